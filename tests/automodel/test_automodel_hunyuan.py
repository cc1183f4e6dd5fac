"""`encode --layout automodel --model-type hunyuanvideo-1.5 | hunyuanvideo | hunyuan` against
NeMo AutoModel's own `HunyuanVideoProcessor` (vendored in tests/vendored/automodel), driven as its
tool's `video` command drives it, on the same generated videos and tiny HunyuanVideo-1.5 pipeline
folder, file for file, in both video modes; `validate` on the result; and the cache read back
through AutoModel's text-to-video dataloader builder (model_type hunyuan)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from shardcook.config import resolve
from shardcook.dataset.check.automodelcache import cache_problems
from shardcook.errors import ConfigError

from tests.automodel.test_automodel_wan import check_cache, run_encode, tool_video_cache
from tests.helpers.video import write_clip

cv2 = pytest.importorskip("cv2")

#: (name, codec, frames, height, width, caption in a same-stem .json or None): more frames than
#: --num-frames and fewer (which the processor repeats), captions quoting text (ByT5's glyphs,
#: both kinds of quotes) and not, a side that is not the quantisation's multiple.
VIDEOS = (("a_wide.mp4", "libx264", 13, 48, 80, None),
          ("b_tall.webm", "libvpx", 6, 64, 48, 'a door saying "OPEN" and \u201cPUSH\u201d'),
          ("sub/c_odd.mkv", "ffv1", 7, 50, 90, "a small clip"))
#: The tiny VAE's channels (its config's `latent_channels`).
CHANNELS = 4


def make_inputs(folder: Path) -> None:
    """The videos, their sidecar captions, and one file that is no video."""
    (folder / "sub").mkdir(parents=True)
    for i, (name, codec, frames, h, w, caption) in enumerate(VIDEOS):
        path = write_clip(folder / name, frames, codec, h, w, seed=i)
        if caption is not None:
            path.with_suffix(".json").write_text(json.dumps({"caption": caption}))
    (folder / "zz_broken.mp4").write_bytes(b"not a video")


def automodel_cache(inputs: Path, out: Path, root: Path, *, mode: str, num_frames: int,
                    max_pixels: int, size: tuple[int, int] | None) -> list[dict]:
    """What the tool writes for `inputs` with AutoModel's `hunyuan` processor
    (`tool_video_cache`), its VAE given consistent tiles (`consistent_tiles`)."""
    from tests.vendored.automodel.processors.hunyuan import HunyuanVideoProcessor

    class ConsistentTiles(HunyuanVideoProcessor):
        def load_models(self, model_name: str, device: str) -> dict:
            models = super().load_models(model_name, device)
            consistent_tiles(models["vae"])
            return models

    return tool_video_cache(ConsistentTiles(), root, inputs, out, mode=mode,
                            num_frames=num_frames, max_pixels=max_pixels, size=size)


def consistent_tiles(vae) -> None:
    """The processor's VAE with tiles whose latent tile fits the sample tile again: it asks
    for 64-pixel tiles, but diffusers keeps the latent tile of its 256-pixel default, so past 64
    pixels the tiles' latents overlap. shardcook keeps diffusers' default tiles instead."""
    vae.enable_tiling(tile_sample_min_height=vae.tile_latent_min_height * 16,
                      tile_sample_min_width=vae.tile_latent_min_width * 16)


def test_video_mode_equals_automodel_tool(tiny_hunyuan_video: Path, tmp_path: Path) -> None:
    """Buckets by aspect ratio within 64 pixels a side (no VAE tile), --num-frames 9 spread over
    each video, a shorter one's frames repeated; the first frame's SigLIP embeddings; ByT5's
    glyphs of a quoting caption, zeros for the others; fp32 text and masks on the CPU; the
    cache validates and loads through AutoModel's dataloader."""
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(inputs, out, tiny_hunyuan_video, "hunyuan", "--max-pixels", "2048",
               "--num-frames", "9")
    expected = automodel_cache(inputs, out, tiny_hunyuan_video, mode="video", num_frames=9,
                               max_pixels=2048, size=None)
    assert len(expected) == len(VIDEOS)
    check_cache(out, expected, {
        "processor": "hunyuan", "model_name": str(tiny_hunyuan_video), "model_type": "hunyuanvideo",
        "caption_format": "sidecar", "caption_field": "caption", "max_pixels": 2048,
        "mode": "video", "target_frames": None})
    files = [torch.load(e["entry"]["cache_file"], weights_only=True) for e in expected]
    assert [f["num_frames"] for f in files] == [9, 9, 9]
    assert {f["model_version"] for f in files} == {"hunyuanvideo-1.5"}
    assert all(max(f["bucket_resolution"]) <= 64 for f in files)
    for f in files:
        width, height = f["bucket_resolution"]
        assert f["video_latents"].shape == (1, CHANNELS, 3, height // 16, width // 16)
        assert f["video_latents"].dtype == torch.float16
        assert f["image_embeds"].shape == (1, 16, 16)
        assert f["text_embeddings"].shape == (1, 1000, 32)
        assert {f[k].dtype for k in ("text_embeddings", "text_mask", "text_embeddings_2",
                                     "text_mask_2", "image_embeds")} == {torch.float32}
    glyphs = [int(f["text_mask_2"].sum()) for f in files]
    assert glyphs[0] == glyphs[2] == 0 and glyphs[1] > 0
    assert not files[0]["text_embeddings_2"].any() and files[1]["text_embeddings_2"].any()
    assert cache_problems(out, deep=True) == []
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [(s["source"], s["reason"]) for s in report["skipped"]] == [
        (str(inputs / "zz_broken.mp4"), "video_decode_error")]
    _loads_through_automodel_dataloader(out)


def _loads_through_automodel_dataloader(out: Path) -> None:
    """AutoModel's `build_video_multiresolution_dataloader` with model_type hunyuan reads every
    sample with its optional HunyuanVideo fields, batched by bucket."""
    from tests.vendored.automodel.datasets.diffusion.collate_fns import (
        build_video_multiresolution_dataloader,
    )

    loader, _ = build_video_multiresolution_dataloader(
        cache_dir=str(out), model_type="hunyuan", base_resolution=(512, 512), batch_size=1,
        num_workers=0, pin_memory=False, shuffle=False, drop_last=False)
    batches = list(loader)
    assert len(batches) == len(VIDEOS)
    for batch in batches:
        assert batch["video_latents"].dtype == torch.float16
        assert batch["video_latents"].shape[:3] == (1, CHANNELS, 3)  # 1 + (9 - 1) // 4
        assert batch["text_embeddings"].shape == (1, 1000, 32)
        assert batch["text_mask"].shape == (1, 1000)
        assert batch["text_embeddings_2"].shape == (1, 256, 24)
        assert batch["text_mask_2"].shape == (1, 256)
        assert batch["image_embeds"].shape == (1, 16, 16)


def test_frames_mode_equals_automodel_tool(tiny_hunyuan_video: Path, tmp_path: Path) -> None:
    """--video-mode frames --num-frames 3 (frames mode takes any count) at an explicit 48x96,
    over the processor's 64-pixel VAE tile: one 1-frame file per frame, cast through fp16 as the
    tool does, no image embeddings; the processor's VAE with consistent tiles (`consistent_tiles`),
    because its own make a latent wider than 96 / 16, as the last lines show."""
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(inputs, out, tiny_hunyuan_video, "hunyuanvideo-1.5", "--video-mode", "frames",
               "--num-frames", "3", "--height", "48", "--width", "96", "--batch-size", "4")
    expected = automodel_cache(inputs, out, tiny_hunyuan_video, mode="frames", num_frames=3,
                               max_pixels=48 * 96, size=(96, 48))
    assert len(expected) == 3 * len(VIDEOS)
    check_cache(out, expected, {
        "processor": "hunyuanvideo-1.5", "model_name": str(tiny_hunyuan_video),
        "model_type": "hunyuanvideo", "caption_format": "sidecar", "caption_field": "caption",
        "max_pixels": 48 * 96, "mode": "frames", "target_frames": None})
    first = torch.load(expected[0]["entry"]["cache_file"], weights_only=True)
    assert first["image_embeds"] is None and first["processing_mode"] == "frames"
    assert first["video_latents"].shape == (1, CHANNELS, 1, 3, 6)
    assert cache_problems(out) == []
    from tests.vendored.automodel.processors.hunyuan import HunyuanVideoProcessor

    processor = HunyuanVideoProcessor()
    models = processor.load_models(str(tiny_hunyuan_video), "cpu")
    frame = torch.zeros(1, 3, 1, 48, 96)
    assert processor.encode_video(frame, models, "cpu").shape == (1, CHANNELS, 1, 3, 7)


def _resolved(tmp_path: Path, **values: object):
    (tmp_path / "in").mkdir(exist_ok=True)
    given = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"),
             "layout": "automodel", **values}
    return resolve(given, set(given), encode=True)


def test_options_as_the_processor_takes_them(tmp_path: Path) -> None:
    """Video mode takes 4n+1 frames only (the processor raises on others, so the tool writes
    nothing); frames mode any count; the posterior mean by default; its default model."""
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, model_type="hunyuan", num_frames=10)
    assert str(e.value) == (
        "--num-frames must be 4n+1 for --model-type hunyuan (its video VAE encodes the first "
        "frame alone, then 4 frames a latent frame), not 10; e.g. 5, 9 or 61.")
    cfg = _resolved(tmp_path, model_type="hunyuanvideo-1.5", num_frames=121)
    assert cfg.video.num_frames == 121 and cfg.model.latent_mode == "mode"
    assert cfg.model.model_path == "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-720p_i2v"
    assert cfg.layout.encode.model == "hunyuanvideo-1.5"
    frames = _resolved(tmp_path, model_type="hunyuanvideo", video_mode="frames", num_frames=10)
    assert frames.video.num_frames == 10
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, model_type="hunyuan", num_frames=9, height=40, width=64)
    assert str(e.value) == "--height must be a multiple of 16 (the VAE downsamples by 16), not 40."
