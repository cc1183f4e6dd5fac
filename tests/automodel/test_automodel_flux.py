"""`encode --layout automodel --model-type flux` against NeMo AutoModel's own `flux` processor
and bucketing (vendored in tests/vendored/automodel) on the same inputs and tiny FLUX weights,
file for file, and the cache read back through AutoModel's text-to-image dataloader builder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers.automodel import SIZES, assert_same, make_inputs, reference_cache
from tests.helpers.automodel import run_encode as encode

SEED = 3


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


def automodel_cache(inputs: Path, out: Path, root: Path, max_pixels: int) -> list[dict]:
    """What the tool's `preprocess_dataset` writes for `inputs` with AutoModel's `flux`
    processor."""
    from tests.vendored.automodel.processors.flux import FluxProcessor

    return reference_cache(FluxProcessor(), automodel_models(root), inputs, out, max_pixels,
                           SEED)


def run_encode(inputs: Path, out: Path, flux_root: Path, *extra: str) -> None:
    encode("flux", inputs, out, flux_root, SEED, *extra)


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
