"""`encode --layout automodel --model-type flux` against NeMo AutoModel's own `flux` processor
and bucketing (vendored in tests/vendored/automodel) on the same inputs and tiny FLUX weights,
file for file, and the cache read back through AutoModel's text-to-image dataloader builder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from shardcook.encoders.flux import sample_seed

SEED = 3
SIZES = [(300, 200), (128, 256), (100, 100), (333, 187), (90, 200), (640, 250)]


@pytest.fixture(scope="module")
def flux_root(tiny_flux: Path, tmp_path_factory) -> Path:
    """The tiny FLUX weights, their T5 tokenizer given a model_max_length (FLUX.1's says 512;
    AutoModel pads T5 prompts to it)."""
    root = tmp_path_factory.mktemp("automodel") / "flux"
    shutil.copytree(tiny_flux, root)
    config = root / "tokenizer_2" / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data["model_max_length"] = 48
    config.write_text(json.dumps(data))
    return root


def make_inputs(folder: Path) -> None:
    """Images of several aspect ratios in two folders, JPEG and PNG; captions from a JSONL
    `<prefix>_internvl.json`, else the file name; one file that is no image."""
    rng = np.random.default_rng(0)
    (folder / "sub").mkdir(parents=True)
    for i, (w, h) in enumerate(SIZES):
        pixels = Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
        if i % 2:
            pixels.save(folder / f"shot_sample{i}.png")
        else:
            pixels.save(folder / "sub" / f"a_cat_{i}.jpg", quality=90)
    (folder / "shot_internvl.json").write_text("\n".join(json.dumps(line) for line in [
        {"file_name": "shot_sample1.png", "internvl": "a red circle on blue"},
        {"file_name": "shot_sample3.png", "internvl": "a green star", "usr": "no"},
        {"file_name": "missing.png", "internvl": "nothing"}]) + "\nnot json\n")
    (folder / "zz_broken.png").write_bytes(b"not an image")


#: bf16 CPU kernels round differently with other thread counts: both sides use one.
THREADS = 1


def run_encode(inputs: Path, out: Path, flux_root: Path, *extra: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
    subprocess.run([sys.executable, "-m", "shardcook", "encode", "--layout", "automodel",
                    "--model-type", "flux", "--model-path", str(flux_root), "--input-dir",
                    str(inputs), "--output-dir", str(out), "--device", "cpu", "--seed",
                    str(SEED), "--quiet", *extra], check=True, timeout=600, env=env)


def automodel_models(root: Path) -> dict:
    """The models dict AutoModel's `FluxProcessor.load_models` returns, loaded as its
    `FluxPipeline.from_pretrained(..., torch_dtype=torch.bfloat16)` loads each component (the
    tiny folder has no transformer or scheduler for the pipeline itself)."""
    from diffusers import AutoencoderKL
    from transformers import AutoTokenizer, CLIPTextModel, T5EncoderModel

    return {
        "vae": AutoencoderKL.from_pretrained(root / "vae", torch_dtype=torch.bfloat16).eval(),
        "clip_tokenizer": AutoTokenizer.from_pretrained(root / "tokenizer"),
        "clip_encoder": CLIPTextModel.from_pretrained(root / "text_encoder",
                                                      dtype=torch.bfloat16).eval(),
        "t5_tokenizer": AutoTokenizer.from_pretrained(root / "tokenizer_2"),
        "t5_encoder": T5EncoderModel.from_pretrained(root / "text_encoder_2",
                                                     dtype=torch.bfloat16).eval(),
    }


def media_files(folder: Path) -> list[Path]:
    """The tool's `_get_media_files(image_dir, IMAGE_EXTENSIONS)`, as it is written there."""
    found = []
    for root, _, files in os.walk(folder):
        for file in files:
            if "." in file and file.lower().rsplit(".", 1)[-1] in {"jpg", "jpeg", "png", "webp",
                                                                    "bmp"}:
                found.append(Path(root) / file)
    return sorted(found)


def automodel_cache(inputs: Path, out: Path, root: Path, max_pixels: int) -> list[dict]:
    """What the tool's `preprocess_dataset` writes for `inputs` on one device: its
    `_process_image` step by step with AutoModel's processor, bucket calculator and caption
    loader, the posterior draw of each image seeded as shardcook seeds it (the tool draws from
    the unseeded global generator)."""

    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return _automodel_cache(inputs, out, root, max_pixels)
    finally:
        torch.set_num_threads(threads)


def _automodel_cache(inputs: Path, out: Path, root: Path, max_pixels: int) -> list[dict]:
    from tests.vendored.automodel.datasets.diffusion.multi_tier_bucketing import (
        MultiTierBucketCalculator,
    )
    from tests.vendored.automodel.processors.caption_loaders import JSONLCaptionLoader
    from tests.vendored.automodel.processors.flux import FluxProcessor

    processor, models = FluxProcessor(), automodel_models(root)
    calculator = MultiTierBucketCalculator(quantization=64, max_pixels=max_pixels)
    files = media_files(inputs)
    captions = JSONLCaptionLoader(jsonl_suffix="_internvl.json").load_captions(files,
                                                                              "internvl")
    results = []
    for index, path in enumerate(files):
        try:
            image = Image.open(path).convert("RGB")
        except OSError:
            continue  # the tool logs the error and goes on
        bucket = calculator.get_bucket_for_image(*image.size)
        width, height = bucket["resolution"]
        resized, offset = calculator.resize_and_crop(image, width, height, crop_mode="center")
        torch.manual_seed(sample_seed(SEED, f"{index:010d}"))
        latent = processor.encode_image(processor.preprocess_image(resized), models, "cpu")
        caption = captions.get(path.name) or Path(path).stem.replace("_", " ")
        text = processor.encode_text(caption, models, "cpu")
        resolution = f"{width}x{height}"
        name = hashlib.md5(f"{path.absolute()}_{resolution}".encode()).hexdigest()
        cache_file = out / resolution / f"{name}.pt"
        metadata = {"original_resolution": image.size, "bucket_resolution": (width, height),
                    "crop_offset": offset, "prompt": caption,
                    "image_path": str(path.absolute()), "bucket_id": bucket["id"],
                    "aspect_ratio": bucket["aspect_ratio"]}
        results.append({"file": processor.get_cache_data(latent, text, metadata), "entry": {
            "cache_file": str(cache_file), "image_path": str(path.absolute()),
            "bucket_resolution": [width, height], "original_resolution": list(image.size),
            "prompt": caption, "bucket_id": bucket["id"],
            "aspect_ratio": bucket["aspect_ratio"], "pixels": width * height,
            "model_type": "flux"}})
    return results


def assert_same(ours: dict, theirs: dict, where: str) -> None:
    assert list(ours) == list(theirs), where
    for key, value in theirs.items():
        got = ours[key]
        if isinstance(value, torch.Tensor):
            assert got.dtype == value.dtype and got.shape == value.shape, (where, key)
            assert torch.equal(got, value), (where, key)
        else:
            assert type(got) is type(value) and got == value, (where, key)


@pytest.mark.parametrize("budget", [[], ["--resolution-preset", "512p"]], ids=["default", "512p"])
def test_cache_equals_automodel_tool(flux_root: Path, tmp_path: Path, budget: list[str]) -> None:
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(inputs, out, flux_root, "--batch-size", "1", *budget)
    expected = automodel_cache(inputs, out, flux_root, 512 * 512 if budget else 256 * 256)
    metadata = json.loads((out / "metadata.json").read_text())
    entries = json.loads((out / "metadata_shard_0000.json").read_text())
    assert metadata == {"processor": "flux", "model_name": str(flux_root), "model_type": "flux",
                        "total_items": len(expected), "num_shards": 1, "shard_size": 10000,
                        "shards": ["metadata_shard_0000.json"], "caption_field": "internvl",
                        "max_pixels": 512 * 512 if budget else 256 * 256}
    assert entries == [e["entry"] for e in expected]
    assert len({e["bucket_resolution"][0] for e in entries}) > 2  # several buckets
    for want in expected:
        path = Path(want["entry"]["cache_file"])
        assert_same(torch.load(path, weights_only=True), want["file"], path.name)
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [(s["source"], s["reason"]) for s in report["skipped"]] == [
        (str(inputs / "zz_broken.png"), "decode_error")]


def test_cache_loads_through_automodel_dataloader(flux_root: Path, tmp_path: Path) -> None:
    """AutoModel's `build_text_to_image_multiresolution_dataloader` (its FLUX recipes'
    dataloader) reads every sample, batched by bucket."""
    from tests.vendored.automodel.datasets.diffusion.collate_fns import (
        build_text_to_image_multiresolution_dataloader,
    )

    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(inputs, out, flux_root)
    loader, _ = build_text_to_image_multiresolution_dataloader(
        cache_dir=str(out), batch_size=1, num_workers=0, pin_memory=False, shuffle=False,
        drop_last=False)
    batches = list(loader)
    assert len(batches) == len(SIZES)
    for batch in batches:
        latent = batch["image_latents"]
        width, height = batch["metadata"]["crop_resolution"][0].tolist()
        assert latent.shape == (1, 4, height // 8, width // 8)
        assert latent.dtype == torch.float16
        assert batch["text_embeddings"].shape == (1, 48, 32)
        assert batch["pooled_prompt_embeds"].shape == (1, 24)
        assert batch["clip_hidden"].shape == (1, 77, 24)
