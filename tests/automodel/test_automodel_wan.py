"""`encode --layout automodel --model-type wan | wan2.1 | wan2.2` against NeMo AutoModel's own
`wan` processors (vendored in tests/vendored/automodel), driven as its tool's `video` command
drives them, on the same generated videos and tiny Wan weights, file for file, in both video
modes; and the cache read back through AutoModel's text-to-video dataloader builder (its Wan
recipes' dataloader)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from shardcook.config import resolve
from shardcook.errors import ConfigError

from tests.helpers.automodel import assert_same
from tests.helpers.video import write_clip

cv2 = pytest.importorskip("cv2")

#: (name, codec, frames, height, width, caption in a same-stem .json or None): more frames than
#: --num-frames and fewer, several aspect ratios, a side that is not the quantisation's multiple.
VIDEOS = (("a_wide.mp4", "libx264", 13, 48, 80, None),
          ("b_tall.mp4", "libx264", 7, 96, 64, "a  tall &amp; narrow clip"),
          ("c_square.webm", "libvpx", 5, 64, 64, "a square clip"),
          ("sub/d_odd.mkv", "ffv1", 9, 50, 90, None))
#: CPU kernels may round differently with other thread counts: both sides use one.
THREADS = 1


def make_inputs(folder: Path) -> None:
    """The videos, their sidecar captions, and one file that is no video."""
    (folder / "sub").mkdir(parents=True)
    for i, (name, codec, frames, h, w, caption) in enumerate(VIDEOS):
        path = write_clip(folder / name, frames, codec, h, w, seed=i)
        if caption is not None:
            path.with_suffix(".json").write_text(json.dumps({"caption": caption}))
    (folder / "zz_broken.mp4").write_bytes(b"not a video")


def run_encode(inputs: Path, out: Path, root: Path, model_type: str, *extra: str,
               env: dict[str, str] | None = None, check: bool = True
               ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "shardcook", "encode", "--layout", "automodel", "--model-type",
         model_type, "--model-path", str(root), "--input-dir", str(inputs), "--output-dir",
         str(out), "--device", "cpu", "--quiet", *extra],
        check=check, timeout=600, env=env, capture_output=True, text=True)


def media_files(folder: Path) -> list[Path]:
    """The tool's `_get_media_files(video_dir, VIDEO_EXTENSIONS)`, as it is written there."""
    found = []
    for root, _, files in os.walk(folder):
        for file in files:
            if "." in file and file.lower().rsplit(".", 1)[-1] in {"mp4", "avi", "mov", "mkv",
                                                                    "webm"}:
                found.append(Path(root) / file)
    return sorted(found)


def extract_evenly_spaced_frames(video_path, num_frames, target_size):
    """The tool's `_extract_evenly_spaced_frames` (bilinear, centre crop), as written there."""
    cap = cv2.VideoCapture(video_path)
    if not cap.isOpened():
        raise ValueError(f"Failed to open video: {video_path}")
    total_frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    orig_width = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
    orig_height = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    if num_frames >= total_frames:
        frame_indices = list(range(total_frames))
    else:
        frame_indices = np.linspace(0, total_frames - 1, num_frames).astype(int).tolist()
    target_height, target_width = target_size
    frames, actual_indices = [], []
    for target_idx in frame_indices:
        cap.set(cv2.CAP_PROP_POS_FRAMES, target_idx)
        ret, frame = cap.read()
        if not ret:
            continue
        frame = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
        scale = max(target_width / orig_width, target_height / orig_height)
        new_width, new_height = int(orig_width * scale), int(orig_height * scale)
        frame = cv2.resize(frame, (new_width, new_height), interpolation=cv2.INTER_LINEAR)
        start_x, start_y = (new_width - target_width) // 2, (new_height - target_height) // 2
        frames.append(frame[start_y:start_y + target_height, start_x:start_x + target_width])
        actual_indices.append(target_idx)
    cap.release()
    return frames, actual_indices


def frame_to_video_tensor(frame, dtype=torch.float16):
    """The tool's `_frame_to_video_tensor`, as written there."""
    tensor = torch.from_numpy(frame).float().permute(2, 0, 1)
    tensor = (tensor / 255.0 - 0.5) / 0.5
    return tensor.unsqueeze(0).unsqueeze(2).to(dtype)


def automodel_cache(inputs: Path, out: Path, root: Path, processor_name: str, *, mode: str,
                    num_frames: int, max_pixels: int, size: tuple[int, int] | None
                    ) -> list[dict]:
    """What the tool writes for `inputs` with AutoModel's `wan` or `wan2.2` processor
    (`tool_video_cache`)."""
    from tests.vendored.automodel.processors.wan import Wan22Processor, WanProcessor

    processor = Wan22Processor() if processor_name == "wan2.2" else WanProcessor()
    return tool_video_cache(processor, root, inputs, out, mode=mode, num_frames=num_frames,
                            max_pixels=max_pixels, size=size)


def tool_video_cache(processor: Any, root: Path, inputs: Path, out: Path, *, mode: str,
                     num_frames: int, max_pixels: int, size: tuple[int, int] | None
                     ) -> list[dict]:
    """What the tool's `preprocess_video_dataset` writes for `inputs` with `processor` on one
    device: its `_process_video_video_mode` / `_process_video_frames_mode` step by step with the
    processor (loaded by its own `load_models`), bucket calculator and sidecar caption loader;
    in video mode the first frame's `image_embeds` where the processor has
    `encode_first_frame`, as the tool asks."""
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return _tool_video_cache(processor, root, inputs, out, mode, num_frames, max_pixels,
                                 size)
    finally:
        torch.set_num_threads(threads)


def _tool_video_cache(processor, root, inputs, out, mode, num_frames, max_pixels, size):
    from tests.vendored.automodel.datasets.diffusion.multi_tier_bucketing import (
        MultiTierBucketCalculator,
    )
    from tests.vendored.automodel.processors.caption_loaders import get_caption_loader

    models = processor.load_models(str(root), "cpu")
    calculator = MultiTierBucketCalculator(quantization=processor.quantization,
                                           max_pixels=max_pixels)
    files = media_files(inputs)
    captions = get_caption_loader("sidecar").load_captions(files, "caption")
    results = []
    for path in files:
        cap = cv2.VideoCapture(str(path))
        if not cap.isOpened():
            continue  # the tool logs the error and goes on
        orig_width = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
        orig_height = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        cap.release()
        if size is not None:
            width, height = size
            bucket_id, aspect_ratio = None, width / height
        else:
            bucket = calculator.get_bucket_for_image(orig_width, orig_height)
            (width, height), bucket_id = bucket["resolution"], bucket["id"]
            aspect_ratio = bucket["aspect_ratio"]
        caption = captions.get(path.name) or path.stem.replace("_", " ")
        text = processor.encode_text(caption, models, "cpu")
        resolution = f"{width}x{height}"
        absolute = str(path.absolute())
        metadata = {"original_resolution": (orig_width, orig_height),
                    "bucket_resolution": (width, height), "bucket_id": bucket_id,
                    "aspect_ratio": aspect_ratio, "prompt": caption, "video_path": absolute,
                    "deterministic": True, "mode": mode}
        entry = {"video_path": absolute, "bucket_resolution": [width, height],
                 "original_resolution": [orig_width, orig_height], "prompt": caption,
                 "bucket_id": bucket_id, "aspect_ratio": aspect_ratio,
                 "pixels": width * height, "model_type": processor.model_type}
        if mode == "video":
            video, first_frame = processor.load_video(str(path), target_size=(height, width),
                                                      num_frames=num_frames)
            latent = processor.encode_video(video, models, "cpu", deterministic=True)
            embeds = (processor.encode_first_frame(first_frame, models, "cpu")
                      if hasattr(processor, "encode_first_frame") else None)
            count = video.shape[2]
            name = hashlib.md5(f"{absolute}_{resolution}_{count}".encode()).hexdigest()
            file = processor.get_cache_data(latent, text, {
                **metadata, "num_frames": count, "first_frame": first_frame,
                "image_embeds": embeds})
            results.append({"file": file, "entry": {
                "cache_file": str(out / resolution / f"{name}.meta"), **entry,
                "num_frames": count}})
            continue
        frames, sources = extract_evenly_spaced_frames(str(path), num_frames, (height, width))
        for n, (frame, source) in enumerate(zip(frames, sources, strict=True)):
            latent = processor.encode_video(frame_to_video_tensor(frame), models, "cpu")
            file = processor.get_cache_data(latent, text, {**metadata, "num_frames": 1})
            name = hashlib.md5(f"{absolute}_{resolution}_frame{n}".encode()).hexdigest()
            results.append({"file": file, "entry": {
                "cache_file": str(out / resolution / f"{name}.meta"), **entry, "num_frames": 1,
                "frame_index": n + 1, "total_frames_extracted": len(frames),
                "source_frame_index": source}})
    return results


def order(entry: dict) -> list[str]:
    """The keys of a metadata entry in the tool's `_build_result_dict` order."""
    first = ["cache_file", "video_path", "bucket_resolution", "original_resolution",
             "num_frames", "prompt", "bucket_id", "aspect_ratio", "pixels", "model_type"]
    return first + [k for k in ("frame_index", "total_frames_extracted", "source_frame_index")
                    if k in entry]


def check_cache(out: Path, expected: list[dict], metadata: dict) -> None:
    assert json.loads((out / "metadata.json").read_text()) == {
        "total_items": len(expected), "num_shards": 1, "shard_size": 10000,
        "shards": ["metadata_shard_0000.json"], **metadata}
    entries = json.loads((out / "metadata_shard_0000.json").read_text())
    assert entries == [e["entry"] for e in expected]
    assert all(list(e) == order(e) for e in entries)
    for want in expected:
        path = Path(want["entry"]["cache_file"])
        assert_same(torch.load(path, weights_only=True), want["file"], path.name)


@pytest.mark.parametrize("model_type", ["wan", "wan2.2"])
def test_video_mode_equals_automodel_tool(tiny_wan: Path, tmp_path: Path,
                                          model_type: str) -> None:
    """Buckets by aspect ratio, --num-frames 10 spread over longer videos (shorter ones whole),
    sidecar captions else the file name; wan2.2 records its own model_type and version."""
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(inputs, out, tiny_wan, model_type, "--max-pixels", "4096")
    expected = automodel_cache(inputs, out, tiny_wan, model_type, mode="video", num_frames=10,
                               max_pixels=4096, size=None)
    assert len(expected) == len(VIDEOS)
    check_cache(out, expected, {
        "processor": model_type, "model_name": str(tiny_wan),
        "model_type": "wan22" if model_type == "wan2.2" else "wan",
        "caption_format": "sidecar", "caption_field": "caption", "max_pixels": 4096,
        "mode": "video", "target_frames": None})
    files = [torch.load(e["entry"]["cache_file"], weights_only=True) for e in expected]
    assert [f["num_frames"] for f in files] == [10, 7, 5, 9]
    assert {f["model_version"] for f in files} == {"wan2.2" if model_type == "wan2.2"
                                                   else "wan2.1"}
    assert len({tuple(f["bucket_resolution"]) for f in files}) == 3
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [(s["source"], s["reason"]) for s in report["skipped"]] == [
        (str(inputs / "zz_broken.mp4"), "video_decode_error")]


def test_frames_mode_equals_automodel_tool(tiny_wan: Path, tmp_path: Path) -> None:
    """--video-mode frames --num-frames 3 at an explicit size (no bucket) whose width is over
    the VAE's 256-pixel tile, so AutoModel's tiled encode runs: one 1-frame file per frame,
    the inputs cast through fp16 as the tool does."""
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(inputs, out, tiny_wan, "wan2.1", "--video-mode", "frames", "--num-frames", "3",
               "--height", "48", "--width", "272", "--batch-size", "4")
    expected = automodel_cache(inputs, out, tiny_wan, "wan2.1", mode="frames", num_frames=3,
                               max_pixels=48 * 272, size=(272, 48))
    assert len(expected) == 3 * len(VIDEOS)
    check_cache(out, expected, {
        "processor": "wan2.1", "model_name": str(tiny_wan), "model_type": "wan",
        "caption_format": "sidecar", "caption_field": "caption", "max_pixels": 48 * 272,
        "mode": "frames", "target_frames": None})
    first = torch.load(expected[0]["entry"]["cache_file"], weights_only=True)
    assert first["first_frame"] is None and first["processing_mode"] == "frames"
    assert first["video_latents"].shape == (1, 16, 1, 6, 34)


def test_cache_loads_through_automodel_dataloader(tiny_wan: Path, tmp_path: Path) -> None:
    """AutoModel's `build_video_multiresolution_dataloader`, as its wan2_1_t2v_flow and
    wan2_2_t2v_flow recipes build it (model_type wan, base_resolution 512x512), reads every
    sample, batched by bucket."""
    from tests.vendored.automodel.datasets.diffusion.collate_fns import (
        build_video_multiresolution_dataloader,
    )

    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(inputs, out, tiny_wan, "wan2.2", "--max-pixels", "4096")
    loader, _ = build_video_multiresolution_dataloader(
        cache_dir=str(out), model_type="wan", base_resolution=(512, 512), batch_size=1,
        num_workers=0, pin_memory=False, shuffle=False, drop_last=False)
    batches = list(loader)
    assert len(batches) == len(VIDEOS)
    for batch in batches:
        latent = batch["video_latents"]
        assert latent.dtype == torch.float16 and latent.shape[:2] == (1, 16)
        assert latent.shape[2] in (3, 2)  # 1 + (T - 1) // 4 of 10, 7, 5 and 9 frames
        assert batch["text_embeddings"].shape == (1, 226, 32)
        assert batch["text_embeddings"].dtype == torch.float32  # UMT5's dtype on the CPU


def test_without_opencv_one_sentence(tiny_wan: Path, tmp_path: Path) -> None:
    """A video run where OpenCV cannot be imported stops with one sentence and exit code 2."""
    inputs, out, blocker = tmp_path / "in", tmp_path / "out", tmp_path / "blocker"
    make_inputs(inputs)
    (blocker / "cv2").mkdir(parents=True)
    (blocker / "cv2" / "__init__.py").write_text("raise ImportError('no OpenCV here')\n")
    path = os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])
    run = run_encode(inputs, out, tiny_wan, "wan", env={"PYTHONPATH": path}, check=False)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert ("--layout automodel resizes video frames with OpenCV, as AutoModel's tool does; "
            "install it with pip install 'shardcook[automodel]'.") in run.stderr


def _resolved(tmp_path: Path, **values: object):
    (tmp_path / "in").mkdir(exist_ok=True)
    given = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"),
             "layout": "automodel", **values}
    return resolve(given, set(given), encode=True)


def test_options_as_automodel_takes_them(tmp_path: Path) -> None:
    """--num-frames in both modes; the bounds AutoModel's tool lacks refused; the caption
    defaults of each tool's command; its latent default, the posterior mean."""
    cfg = _resolved(tmp_path, model_type="wan2.2", num_frames=21)
    assert cfg.video.num_frames == 21 and cfg.video.video_mode == "video"
    assert (cfg.automodel.caption_format, cfg.automodel.caption_field) == ("sidecar", "caption")
    assert cfg.model.latent_mode == "mode"
    assert cfg.model.model_path == "Wan-AI/Wan2.2-T2V-A14B-Diffusers"
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, model_type="wan", **{"video.max_frames": 9})
    assert str(e.value) == ("--max-frames is not for --layout automodel; it takes --num-frames "
                            "frames of each video, evenly spread, in both video modes.")
    assert _resolved(tmp_path, model_type="flux").automodel.caption_field == "internvl"
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, model_type="flux", caption_format="meta_json")
    assert str(e.value) == ("--caption-format is for videos; images are captioned by their "
                            "<prefix>_internvl.json, so drop it.")
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, model_type="flux", caption_field="caption")
    assert str(e.value) == "--caption-field must be internvl or usr for images, not 'caption'."
