"""`shardcook demo`'s video part: a few generated clips (same-stem `.json` captions, Bridge's
convention) through tiny random-weight Wan encoders, `encode --layout wan`, finalized, validated
sample by sample and loaded through Energon (shardcook.energon's safe parts reader)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shardcook.config import RunConfig

#: Clips the video part makes (kept few: each adds about a second of tiny VAE on the CPU).
CLIPS = 3


def make_videos(folder: Path, colours: dict[str, tuple[int, int, int]]) -> None:
    """CLIPS clips of a moving square, each with a same-stem `.json` caption naming its colour."""
    from shardcook.demo.chatml import make_clip

    folder.mkdir(parents=True, exist_ok=True)
    for i, (colour, rgb) in enumerate(list(colours.items())[:CLIPS]):
        clip = folder / f"{colour}.mp4"
        make_clip(clip, rgb, 2 + i)
        caption = {"caption": f"a {colour} square moving right"}
        clip.with_suffix(".json").write_text(json.dumps(caption), encoding="utf-8")


def config(videos: Path, out: Path, model: Path) -> RunConfig:
    from shardcook.config import resolve

    values = {"layout": "wan", "input_dir": str(videos), "output_dir": str(out),
              "model_path": str(model), "video_mode": "video", "precision": "fp32",
              "device": "cpu", "batch_size": CLIPS, "shard_size": 2, "overwrite": True,
              "quiet": True}
    return resolve(values, set(values), encode=True)


def first_sample(out: Path) -> dict[str, Any]:
    """The first sample of `out` through shardcook.energon's loader with `PartsTaskEncoder`
    (the layout's parts; pickle-based ones stay bytes), its tensors then read safely."""
    import warnings

    from shardcook.energon import (
        PartsTaskEncoder,
        get_diffusion_loader,
        load_pickled_tensors,
        load_tensor,
    )

    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    loader = get_diffusion_loader(out, batch_size=1, num_workers=0, shuffle_buffer_size=None,
                                  max_samples_per_sequence=None, task_encoder=PartsTaskEncoder())
    batch = next(iter(loader))
    key, parts = batch.__key__[0], batch.parts  # a json part is batched as a dict of lists
    return {"__key__": key, "caption": parts["json"]["caption"][0],
            "pth": load_tensor(parts["pth"][0], key=key, part="pth"),
            "pickle": load_pickled_tensors(parts["pickle"][0], key=key, part="pickle")}


def run_wan_demo(root: Path, model: Path) -> list[str]:
    """Writes `root/videos/` and `root/wan/` with the tiny Wan encoders at `model` (built there
    if absent), validates every sample, loads one; returns the demo's lines about it.

    Raises:
        DatasetError: the dataset does not validate.
    """
    from shardcook.dataset import validate
    from shardcook.demo.images import COLOURS
    from shardcook.encoders.tiny import build_tiny_wan
    from shardcook.errors import DatasetError
    from shardcook.jobs.encode.job import EncodeJob
    from shardcook.pipeline.driver import run_pipeline

    if not (model / "DEMO_WEIGHTS.txt").is_file():
        build_tiny_wan(model)
    videos, out = root / "videos", root / "wan"
    make_videos(videos, COLOURS)
    cfg = config(videos, out, model)
    rep = run_pipeline(cfg, EncodeJob(cfg))
    assert rep is not None  # one process: rank 0 reports
    v = validate(out, deep=True)
    if not v.ok:
        raise DatasetError(f"the demo's wan dataset did not validate: {v.problems}")
    s = first_sample(out)
    return [(f"  wan:      {out}: {rep['num_written']} generated clips ({videos}) through "
             f"tiny Wan encoders ({model.name}), finalized and validated "
             f"({rep['wall_seconds']:.1f} s)"),
            (f"            energon: {s['__key__']}: latents {list(s['pth'].shape)}, text "
             f"{list(s['pickle'].shape)}, caption \"{s['caption']}\"")]
