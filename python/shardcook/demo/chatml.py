"""`shardcook demo`'s ChatML part: short generated clips of a moving shape and a few of the
demo's images, with conversations about them, through `chatml` (video frames layout), validated
sample by sample and read back (frames unpickled with no class allowed, decoded)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from shardcook.config import RunConfig
from shardcook.layouts.names import OURS_DIR, REPORT_HTML

CLIP_SECONDS = 1.5
CLIP_FPS = 8
CLIP_SIZE = (64, 96)  # height, width


def make_clip(path: Path, colour: tuple[int, int, int], step: int) -> None:
    """A short MP4 of a square of `colour` moving right by `step` pixels per frame."""
    import av

    h, w = CLIP_SIZE
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=CLIP_FPS)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for k in range(round(CLIP_SECONDS * CLIP_FPS)):
            pixels = np.full((h, w, 3), 20, np.uint8)
            x = (4 + k * step) % (w - 20)
            pixels[22:42, x:x + 20] = colour
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def make_inputs(folder: Path, images: list[tuple[str, str]], image_dir: Path) -> Path:
    """Clips and a JSONL of conversations (a clip each, every third also with an image)."""
    from shardcook.demo.images import COLOURS

    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (colour, rgb) in enumerate(COLOURS.items()):
        clip = folder / f"{colour}.mp4"
        make_clip(clip, rgb, 2 + i)
        record: dict[str, object] = {"id": f"clip-{i}", "video": clip.name, "conversation": [
            {"from": "human", "value": "<video>\nWhich colour is the moving square?"},
            {"from": "gpt", "value": f"It is {colour}."}]}
        if i % 3 == 0:
            name, caption = images[i]
            # media paths in a JSONL are relative to its folder
            record["image"] = os.path.relpath(image_dir / name, folder)
            record["conversation"] = [
                {"from": "human", "value": "<image><video>\nDescribe the picture, then the clip."},
                {"from": "gpt", "value": f"The picture shows {caption}; the square is {colour}."}]
        lines.append(json.dumps(record))
    jsonl = folder / "conversations.jsonl"
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return jsonl


def config(jsonl: Path, out: Path) -> RunConfig:
    from shardcook.config import resolve

    values = {"source_type": "jsonl", "input_path": str(jsonl), "output_dir": str(out),
              "shard_size": 4, "overwrite": True, "quiet": True, "val_fraction": 0.2,
              "video_fps": 4.0, "max_frames": 4, "report_html": True}
    return resolve(values, set(values))


def run_chatml_demo(root: Path, images: list[tuple[str, str]], image_dir: Path) -> list[str]:
    """Writes `root/chatml-inputs/` and `root/chatml/`, validates every sample, reads one
    back; returns the demo's lines about it.

    Raises:
        DatasetError: the dataset does not validate.
    """
    import logging

    from shardcook import read_shard
    from shardcook.dataset import validate
    from shardcook.errors import DatasetError
    from shardcook.jobs.chatml.job import ChatmlJob
    from shardcook.layouts.chatml import VIDEO_FRAMES_PART, load_videos
    from shardcook.pipeline.driver import run_pipeline

    # "Bridge's class is not importable here": expected on a machine without Megatron-Bridge
    logging.getLogger("shardcook.jobs.chatml.job").setLevel(logging.ERROR)
    jsonl = make_inputs(root / "chatml-inputs", images, image_dir)
    out = root / "chatml"
    cfg = config(jsonl, out)
    rep = run_pipeline(cfg, ChatmlJob(cfg))
    assert rep is not None
    v = validate(out, deep=True)
    if not v.ok:
        raise DatasetError(f"the demo's chatml dataset did not validate: {v.problems}")
    key, parts = next(iter(read_shard(min(out.glob("train-shard-*.tar")))))
    frames = load_videos(parts[VIDEO_FRAMES_PART])[0]
    first = json.loads(parts["conversation.json"])["media"]["videos"][0]
    clips = len(list((root / "chatml-inputs").glob("*.mp4")))
    return [(f"  chatml:   {out}: {rep['num_written']} conversations with {clips} generated "
             f"clips in {rep['num_shards']} shards, finalized and validated "
             f"({rep['wall_seconds']:.1f} s)"),
            (f"            {key}: {len(frames)} JPEG frames at {first['timestamps']} s, "
             f"{first['width']}x{first['height']}"),
            f"            page: {out / OURS_DIR / REPORT_HTML}"]
