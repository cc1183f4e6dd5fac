"""`encode --layout automodel --model-type ltx2` against NeMo AutoModel's own `ltx2` processor
(vendored in tests/vendored/automodel), driven as its tool's `video` command drives it, on the
same generated clips (with audio tracks of several rates and layouts, one without audio) and
tiny LTX-2 weights, file for file; then `validate` on the cache, and the inputs AutoModel cannot
encode (too short, a corrupt audio track, no video) skipped with their reasons."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from shardcook.config import resolve
from shardcook.errors import ConfigError

from tests.helpers.automodel import assert_same, copy_of
from tests.helpers.video import frames

cv2 = pytest.importorskip("cv2")
av = pytest.importorskip("av")

#: (name, fps, frames, height, width, audio, caption in a same-stem .json or None); audio is
#: (sample rate, layout), None for no audio track, or "corrupt" for packets no decoder reads.
VIDEOS = (("a_wide.mp4", 24, 14, 64, 112, (44100, "stereo"), "a red square moving across"),
          ("b_tall.mp4", 30, 16, 96, 64, (48000, "mono"), None),
          ("c_silent.mp4", 25, 12, 64, 64, None, "a silent clip"),
          ("d_short.mp4", 24, 5, 64, 64, (16000, "stereo"), "too short"),
          ("e_corrupt.mp4", 24, 12, 64, 64, "corrupt", "a corrupt audio track"))
#: LTX-2's frames: 8n+1.
NUM_FRAMES = 9
MAX_PIXELS = 64 * 96
#: CPU kernels may round differently with other thread counts: both sides use one.
THREADS = 1


def write_clip(path: Path, n: int, fps: int, h: int, w: int, audio: object, seed: int) -> None:
    """`n` generated frames at `fps` (H.264) and an AAC track of two tones a little longer than
    the video (or none, or packets of noise)."""
    with av.open(str(path), mode="w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = w, h, "yuv420p"
        track = None
        if audio is not None:
            rate, layout = (44100, "stereo") if audio == "corrupt" else audio
            track = container.add_stream("aac", rate=rate)
            track.layout = layout
        for f in frames(n, h, w, seed=seed):
            for packet in video.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        if audio == "corrupt":
            rng = np.random.default_rng(seed)
            for i in range(20):
                packet = av.Packet(rng.integers(0, 255, 300, dtype=np.uint8).tobytes())
                packet.stream, packet.pts, packet.dts = track, i * 1024, i * 1024
                packet.time_base = Fraction(1, 44100)
                container.mux(packet)
        elif track is not None:
            _tones(container, track, audio[0], audio[1], n / fps + 0.2, seed)


def _tones(container, track, rate: int, layout: str, seconds: float, seed: int) -> None:
    t = np.arange(int(rate * seconds)) / rate
    pitch = 220 + 110 * seed
    wave = [np.sin(2 * np.pi * pitch * t), 0.5 * np.sin(2 * np.pi * 1.5 * pitch * t)]
    wave = np.stack(wave[:2 if layout == "stereo" else 1]).astype(np.float32) * 0.5
    for i in range(0, wave.shape[1], 1024):
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(wave[:, i:i + 1024]),
                                           format="fltp", layout=layout)
        frame.sample_rate, frame.pts = rate, i
        for packet in track.encode(frame):
            container.mux(packet)
    for packet in track.encode():
        container.mux(packet)


def make_inputs(folder: Path) -> None:
    folder.mkdir(parents=True)
    for i, (name, fps, n, h, w, audio, caption) in enumerate(VIDEOS):
        write_clip(folder / name, n, fps, h, w, audio, seed=i)
        if caption is not None:
            (folder / name).with_suffix(".json").write_text(json.dumps({"caption": caption}))
    (folder / "zz_broken.mp4").write_bytes(b"not a video")


@pytest.fixture(scope="module")
def encoded(tiny_ltx2: Path, tmp_path_factory) -> tuple[Path, Path]:
    """(inputs, cache) of one `encode` run."""
    root = tmp_path_factory.mktemp("ltx2_run")
    inputs, out = root / "in", root / "out"
    make_inputs(inputs)
    run_encode(inputs, out, tiny_ltx2, "--num-frames", str(NUM_FRAMES), "--max-pixels",
               str(MAX_PIXELS), "--batch-size", "2")
    return inputs, out


def run_encode(inputs: Path, out: Path, root: Path, *extra: str, check: bool = True
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardcook", "encode", "--layout", "automodel", "--model-type",
         "ltx2", "--model-path", str(root), "--input-dir", str(inputs), "--output-dir",
         str(out), "--device", "cpu", "--quiet", *extra],
        check=check, timeout=600, env={**os.environ, "OMP_NUM_THREADS": str(THREADS)},
        capture_output=True, text=True)


def media_files(folder: Path) -> list[Path]:
    """The tool's `_get_media_files(video_dir, VIDEO_EXTENSIONS)` of these flat inputs."""
    return sorted(p for p in folder.iterdir()
                  if p.suffix.lower() in {".mp4", ".avi", ".mov", ".mkv", ".webm"})


def automodel_cache(inputs: Path, out: Path, root: Path) -> list[dict]:
    """What the tool's `preprocess_video_dataset` writes for `inputs` on one device: its
    `_process_video_video_mode` step by step with AutoModel's `ltx2` processor (loaded by its
    own `load_models`), bucket calculator and sidecar caption loader; a video it fails on is
    left out, as the tool logs it and goes on."""
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return _automodel_cache(inputs, out, root)
    finally:
        torch.set_num_threads(threads)


def _automodel_cache(inputs: Path, out: Path, root: Path) -> list[dict]:
    from tests.vendored.automodel.datasets.diffusion.multi_tier_bucketing import (
        MultiTierBucketCalculator,
    )
    from tests.vendored.automodel.processors.caption_loaders import get_caption_loader
    from tests.vendored.automodel.processors.ltx2 import LTX2Processor

    processor = LTX2Processor()
    models = processor.load_models(str(root), "cpu")
    calculator = MultiTierBucketCalculator(quantization=processor.quantization,
                                           max_pixels=MAX_PIXELS)
    files = media_files(inputs)
    captions = get_caption_loader("sidecar").load_captions(files, "caption")
    results = []
    for path in files:
        try:
            results.append(_one(processor, models, calculator, captions, path, out))
        except Exception:  # noqa: BLE001 - the tool logs every error and goes on
            continue
    return results


def _one(processor, models, calculator, captions, path: Path, out: Path) -> dict:
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise ValueError(f"Failed to open video: {path}")
    orig_width = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
    orig_height = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    cap.release()
    bucket = calculator.get_bucket_for_image(orig_width, orig_height)
    (width, height), bucket_id, aspect_ratio = (bucket["resolution"], bucket["id"],
                                                bucket["aspect_ratio"])
    video, first_frame = processor.load_video(str(path), target_size=(height, width),
                                              num_frames=NUM_FRAMES)
    count = video.shape[2]
    caption = captions.get(path.name) or path.stem.replace("_", " ")
    latent = processor.encode_video(video, models, "cpu", deterministic=True)
    text = processor.encode_text(caption, models, "cpu")
    audio = processor.encode_audio(str(path), count, models, "cpu")
    absolute = str(path.absolute())
    file = processor.get_cache_data(latent, text, {
        **audio, "original_resolution": (orig_width, orig_height),
        "bucket_resolution": (width, height), "bucket_id": bucket_id,
        "aspect_ratio": aspect_ratio, "num_frames": count, "prompt": caption,
        "video_path": absolute, "first_frame": first_frame, "image_embeds": None,
        "deterministic": True, "mode": "video"})
    resolution = f"{width}x{height}"
    name = hashlib.md5(f"{absolute}_{resolution}_{count}".encode()).hexdigest()
    return {"file": file, "entry": {
        "cache_file": str(out / resolution / f"{name}.meta"), "video_path": absolute,
        "bucket_resolution": [width, height], "original_resolution": [orig_width, orig_height],
        "num_frames": count, "prompt": caption, "bucket_id": bucket_id,
        "aspect_ratio": aspect_ratio, "pixels": width * height, "model_type": "ltx2"}}


def test_cache_equals_automodel_tool(tiny_ltx2: Path, encoded: tuple[Path, Path]) -> None:
    """Every file, key, order, dtype, shape and value, and every metadata entry and field, as
    the tool writes them; the clips AutoModel fails on skipped with their reasons."""
    inputs, out = encoded
    expected = automodel_cache(inputs, out, tiny_ltx2)
    assert [Path(e["entry"]["video_path"]).name for e in expected] == [
        "a_wide.mp4", "b_tall.mp4", "c_silent.mp4"]
    assert json.loads((out / "metadata.json").read_text()) == {
        "processor": "ltx2", "model_name": str(tiny_ltx2), "model_type": "ltx2",
        "total_items": 3, "num_shards": 1, "shard_size": 10000,
        "shards": ["metadata_shard_0000.json"], "caption_format": "sidecar",
        "caption_field": "caption", "max_pixels": MAX_PIXELS, "mode": "video",
        "target_frames": None}
    entries = json.loads((out / "metadata_shard_0000.json").read_text())
    assert entries == [e["entry"] for e in expected]
    assert [list(e) for e in entries] == [list(e["entry"]) for e in expected]
    for want in expected:
        path = Path(want["entry"]["cache_file"])
        assert_same(torch.load(path, weights_only=True), want["file"], path.name)
    files = [want["file"] for want in expected]
    assert [f["model_version"] for f in files] == ["ltx2.3"] * 3
    assert files[0]["video_latents"].dtype == torch.bfloat16
    assert files[0]["video_latents"].shape == (1, 8, 2, 2, 3)  # 9 frames, 64x96 bucket
    assert files[0]["audio_latents"].shape == (1, 2, 10, 16)  # 0.375 s at 25 a second
    assert files[0]["text_embeddings"].shape == (1, 1024, 32)
    assert files[0]["audio_text_embeddings"].shape == (1, 1024, 16)
    assert files[0]["text_mask"].dtype == torch.int64
    # the tones are heard, the silent clip is silence: different audio latents
    audio = [f["audio_latents"] for f in files]
    assert not torch.equal(audio[0], audio[1]) and not torch.equal(audio[1], audio[2])
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert sorted((Path(s["source"]).name, s["reason"]) for s in report["skipped"]) == [
        ("d_short.mp4", "too_few_frames"), ("e_corrupt.mp4", "audio_decode_error"),
        ("zz_broken.mp4", "video_decode_error")]


def test_cache_validates(encoded: tuple[Path, Path]) -> None:
    """`validate` reads every file of the cache (`--deep`) and finds nothing wrong; a file
    without its audio latents is found."""
    _, out = encoded
    run = subprocess.run([sys.executable, "-m", "shardcook", "validate", str(out), "--deep"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    from shardcook.dataset.check.automodelcache import cache_problems

    broken = copy_of(out, out.parent / "broken")
    first = sorted(broken.glob("*x*/*.meta"))[0]
    data = torch.load(first, weights_only=True)
    del data["audio_latents"]
    torch.save(data, first)
    problems = cache_problems(broken, deep=True)
    assert any("lacks audio_latents" in p for p in problems), problems


def _resolved(tmp_path: Path, **values: object):
    (tmp_path / "in").mkdir(exist_ok=True)
    given = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"),
             "layout": "automodel", "model_type": "ltx2", **values}
    return resolve(given, set(given), encode=True)


def test_options_as_ltx2_takes_them(tmp_path: Path) -> None:
    """8n+1 frames and video mode only, as AutoModel's processor declares; its default model
    and latent mode."""
    cfg = _resolved(tmp_path, num_frames=121)
    assert cfg.model.model_path == "diffusers/LTX-2.3-Diffusers"
    assert cfg.model.latent_mode == "mode"
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, num_frames=10)
    assert str(e.value) == (
        "--num-frames must be 8n+1 for --model-type ltx2 (its video VAE encodes the first frame "
        "alone, then 8 frames a latent frame), not 10; e.g. 9, 17 or 121.")
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, num_frames=9, **{"video.video_mode": "frames"})
    assert str(e.value) == ("--model-type ltx2 takes --video-mode video (all its processor "
                            "supports), not frames.")


def test_cache_loads_through_automodel_dataloader(encoded: tuple[Path, Path]) -> None:
    """AutoModel's `build_video_multiresolution_dataloader` (model_type ltx2, as its LTX-2
    recipes build it) reads every file with its dual-stream fields, batched by bucket."""
    from tests.vendored.automodel.datasets.diffusion.collate_fns import (
        build_video_multiresolution_dataloader,
    )

    _, out = encoded
    loader, _ = build_video_multiresolution_dataloader(
        cache_dir=str(out), model_type="ltx2", base_resolution=(512, 512), batch_size=1,
        num_workers=0, pin_memory=False, shuffle=False, drop_last=False)
    batches = list(loader)
    assert len(batches) == 3
    for batch in batches:
        assert batch["video_latents"].dtype == torch.bfloat16
        assert batch["video_latents"].shape[:3] == (1, 8, 2)  # 1 + (9 - 1) // 8
        assert batch["audio_latents"].shape == (1, 2, 10, 16)
        assert batch["text_embeddings"].shape == (1, 1024, 32)
        assert batch["audio_text_embeddings"].shape == (1, 1024, 16)
        assert batch["text_mask"].shape == (1, 1024)
