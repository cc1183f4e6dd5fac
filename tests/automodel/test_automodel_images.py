"""`encode --layout automodel --model-type flux2|qwen_image` against NeMo AutoModel's own
processors and bucketing (vendored in tests/vendored/automodel) on the same inputs and tiny
real-class weights, file for file, and the cache read back through the dataloader builder
AutoModel's FLUX.2 and Qwen-Image recipes name (`build_text_to_image_multiresolution_dataloader`,
`base_resolution: [512, 512]`, `train_text_encoder: false`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers.automodel import (
    SIZES,
    assert_same,
    make_inputs,
    reference_cache,
    run_encode,
)

SEED = 5


@pytest.fixture(scope="module")
def flux2_processor(tiny_flux2):
    from tests.vendored.automodel.processors.flux2 import Flux2Processor

    processor = Flux2Processor()
    return processor, processor.load_models(str(tiny_flux2), "cpu")


@pytest.fixture(scope="module")
def qwen_processor(tiny_qwen_image):
    from tests.vendored.automodel.processors.qwen_image import QwenImageProcessor

    processor = QwenImageProcessor()
    return processor, processor.load_models(str(tiny_qwen_image), "cpu")


def qwen_mask(file: dict) -> dict:
    """The `prompt_embeds_mask` shardcook adds to a Qwen-Image file: ones over the caption's
    tokens, which the processor's `prompt_embeds` [1, L, D] holds at their own length."""
    return {"prompt_embeds_mask": torch.ones(file["prompt_embeds"].shape[:2], dtype=torch.int64)}


@pytest.mark.parametrize("family", ["flux2", "qwen_image"])
def test_cache_equals_automodel_tool(family: str, request, tmp_path: Path) -> None:
    """Every cache file, metadata shard and metadata.json is what AutoModel's tool writes with
    that family's processor (`--batch-size 1`: the processor runs the VAE on one image)."""
    root = request.getfixturevalue(f"tiny_{family}")
    processor, models = request.getfixturevalue(
        "flux2_processor" if family == "flux2" else "qwen_processor")
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(family, inputs, out, root, SEED, "--batch-size", "1")
    expected = reference_cache(processor, models, inputs, out, 256 * 256, SEED,
                               qwen_mask if family == "qwen_image" else None)
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata == {"processor": family, "model_name": str(root), "model_type": family,
                        "total_items": len(SIZES), "num_shards": 1, "shard_size": 10000,
                        "shards": ["metadata_shard_0000.json"], "caption_field": "internvl",
                        "max_pixels": 256 * 256}
    entries = json.loads((out / "metadata_shard_0000.json").read_text())
    assert entries == [e["entry"] for e in expected]
    for want in expected:
        path = Path(want["entry"]["cache_file"])
        assert_same(torch.load(path, weights_only=True), want["file"], path.name)


def test_qwen_image_prompt_embeds_keep_each_captions_length(tiny_qwen_image, tmp_path):
    """A batch of captions of different lengths stores each at its own length, as the processor
    encodes one caption at a time: the files equal those of a run of batch size 1."""
    inputs = tmp_path / "in"
    make_inputs(inputs)
    for size in ("1", "4"):
        run_encode("qwen_image", inputs, tmp_path / size, tiny_qwen_image, SEED,
                   "--batch-size", size)
    lengths = set()
    for one in sorted((tmp_path / "1").glob("*x*/*.pt")):
        alone = torch.load(one, weights_only=True)
        batched = torch.load(tmp_path / "4" / one.relative_to(tmp_path / "1"), weights_only=True)
        assert_same(batched, alone, one.name)
        lengths.add(alone["prompt_embeds"].shape[1])
        assert alone["prompt_embeds_mask"].shape == alone["prompt_embeds"].shape[:2]
    assert len(lengths) > 1


@pytest.mark.parametrize("family", ["flux2", "qwen_image"])
def test_cache_loads_through_automodel_dataloader(family: str, request, tmp_path: Path) -> None:
    """The recipes' dataloader reads every sample, batched by bucket: latents of the family's
    channels at bucket / downsample, text as its trainer takes it (Qwen-Image's captions of
    different lengths padded to a multiple of 8 in one batch)."""
    from shardcook.encoders.models import MODELS

    from tests.vendored.automodel.datasets.diffusion.collate_fns import (
        build_text_to_image_multiresolution_dataloader,
    )

    root = request.getfixturevalue(f"tiny_{family}")
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    run_encode(family, inputs, out, root, SEED)
    loader, _ = build_text_to_image_multiresolution_dataloader(
        cache_dir=str(out), train_text_encoder=False, batch_size=2, base_resolution=(512, 512),
        num_workers=0, pin_memory=False, shuffle=False, drop_last=False,
        dynamic_batch_size=False)
    down = MODELS[family].sizes.downsample
    seen = 0
    for batch in loader:
        latent, text = batch["image_latents"], batch["text_embeddings"]
        n = latent.shape[0]
        seen += n
        width, height = batch["metadata"]["crop_resolution"][0].tolist()
        assert latent.dtype == torch.float16
        assert latent.shape[0] == text.shape[0] and latent.shape[2:] == (height // down,
                                                                          width // down)
        if family == "flux2":
            assert latent.shape[1] == 32 and text.shape[1:] == (512, 48)
            assert text.dtype == torch.float16
        else:
            assert latent.shape[1] == 16 and text.dtype == torch.bfloat16
            assert text.shape[1] % 8 == 0
    assert seen == len(SIZES)
