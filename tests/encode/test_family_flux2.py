"""The FLUX.2 family (`shardcook/encoders/flux2.py` and its registry entry) against NeMo
AutoModel's FLUX.2 processor (vendored in tests/vendored/automodel/processors), both run on the
CPU on the same tiny model folder (real diffusers/transformers classes, random weights, a batch
norm far from the identity, Mistral padding on the left) and the same inputs: our batched prompt
embeddings are the processor's value for value, and our latents of one image are its latents,
in its float16. The processor never samples (it stores the posterior's mode), so neither does
the comparison."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from shardcook.config import resolve
from shardcook.config.sections import ModelConfig
from shardcook.encoders.flux2 import (
    PROMPT_EMBEDS,
    TEXT_LENGTH,
    Flux2Encoders,
    flux2_manifest,
    patchify,
    unpatchify,
)
from shardcook.encoders.models import FLUX2, MODELS, PATCH_BATCH_NORM
from shardcook.errors import ConfigError
from shardcook.htmlreport.stats import latent_check
from shardcook.layouts import LAYOUTS

from tests.helpers.tiny_flux2 import TINY_HIDDEN, TINY_LATENT_CHANNELS
from tests.vendored.automodel.processors.flux2 import Flux2Processor

CAPTIONS = ["a red circle on a white background", "", "cat [IMG] dog",
            # past the 512 tokens (one a byte here) left after the system prompt
            "a yellow star " * 60]
#: The stored latent's channels: the VAE's, patchified 2x2.
CHANNELS = 4 * TINY_LATENT_CHANNELS


@pytest.fixture(scope="module")
def processor(tiny_flux2):
    """AutoModel's processor and the models its `load_models` loads (bf16, as it always does)."""
    proc = Flux2Processor()
    return proc, proc.load_models(str(tiny_flux2), "cpu")


def _ours(folder: Path, precision: str = "bf16", latent_mode: str = "mode") -> Flux2Encoders:
    return Flux2Encoders.load(model_path=str(folder), revision=None, token_file=None,
                              precision=precision, device="cpu", latent_mode=latent_mode, seed=3)


def _images(n: int, height: int = 64, width: int = 96) -> np.ndarray:
    """Seeded noise with a bright square: pictures whose latents differ from channel to
    channel."""
    pixels = np.random.default_rng(0).integers(0, 256, (n, height, width, 3), dtype=np.uint8)
    pixels[:, 8:40, 16:48] = 250
    return pixels


def test_prompt_embeds_are_the_processors(tiny_flux2, processor):
    """Each caption's row of our batch, [512, 3D] in the model's bf16, is the processor's
    `prompt_embeds` for it alone once in its float16: the same layers side by side, the same
    system prompt and template, padded on the tokenizer's side, a long caption cut the same."""
    proc, models = processor
    ours = _ours(tiny_flux2).encode_text(CAPTIONS)
    assert list(ours) == list(FLUX2.text.outputs) == [PROMPT_EMBEDS]
    embeds = ours[PROMPT_EMBEDS]
    assert embeds.dtype == torch.bfloat16
    assert embeds.shape == (len(CAPTIONS), TEXT_LENGTH, 3 * TINY_HIDDEN)
    for i, caption in enumerate(CAPTIONS):
        theirs = proc.encode_text(caption, models, "cpu")["prompt_embeds"]
        assert theirs.dtype == torch.float16 and theirs.shape == embeds.shape[1:]
        assert torch.equal(embeds[i].to(torch.float16), theirs), caption[:40]
    # left padding: a short caption's first rows are padding, a cut one has none
    tok = models["pipeline"].tokenizer
    assert tok.padding_side == "left"
    assert not torch.equal(embeds[0, 0], embeds[3, 0])


def test_latents_are_the_processors(tiny_flux2, processor):
    """Our latent of each image, [4C, H/16, W/16] float32, is the processor's `encode_image` of
    it (its own `preprocess_image`), in its float16; a batch of several is the same to the
    VAE's own batched rounding."""
    proc, models = processor
    pixels = _images(3)
    enc = _ours(tiny_flux2)
    batch = enc.encode_pixels(pixels, ["k0", "k1", "k2"]).latents
    assert batch.shape == (3, CHANNELS, 4, 6) and batch.dtype == torch.float32
    for i, image in enumerate(pixels):
        theirs = proc.encode_image(proc.preprocess_image(Image.fromarray(image)), models, "cpu")
        assert theirs.dtype == torch.float16 and theirs.shape == (CHANNELS, 4, 6)
        alone = enc.encode_pixels(image[None], [f"k{i}"]).latents[0]
        assert torch.equal(alone.to(torch.float16), theirs), i
        # diffusers' VAE itself rounds a batch of bf16 images differently from one alone
        torch.testing.assert_close(batch[i].to(torch.float16), theirs, atol=0.05, rtol=0.02)


def test_the_normalisation_is_the_batch_norms(tiny_flux2, processor):
    """Undone with the batch norm's statistics and unpatchified, the latents are the VAE's own
    mode; the posterior comes patchified, unnormalised, in the latents' shape."""
    _proc, models = processor
    enc = _ours(tiny_flux2, "fp32")
    pixels = _images(2)
    both = enc.encode_pixels(pixels, ["a", "b"], posterior=True)
    assert both.mean is not None and both.logvar is not None
    assert both.mean.shape == both.logvar.shape == both.latents.shape
    mean, std = models["bn_mean"], models["bn_std"]  # the processor's, from its bf16 VAE
    assert not torch.allclose(mean, torch.zeros_like(mean), atol=0.1)
    assert not torch.allclose(std, torch.ones_like(std), atol=0.1)
    from diffusers import Flux2Pipeline

    z = torch.randn(2, TINY_LATENT_CHANNELS, 8, 12)
    assert torch.equal(patchify(z), Flux2Pipeline._patchify_latents(z))
    assert torch.equal(unpatchify(patchify(z)), z)
    with torch.inference_mode():
        raw = enc.vae.encode(enc._unit_values[torch.from_numpy(pixels).int()].permute(
            0, 3, 1, 2).contiguous()).latent_dist.mode()
    undone = unpatchify(both.latents * enc.bn_std + enc.bn_mean)
    torch.testing.assert_close(undone, raw, atol=1e-5, rtol=1e-5)
    assert torch.equal(unpatchify(both.mean), raw)


def test_sampled_latents_are_seeded_per_key(tiny_flux2):
    """`--latent-mode sample` draws from the posterior with the sample's own seed: the same key
    gives the same latent in any batch, another key another, and neither is the mode."""
    enc = _ours(tiny_flux2, "fp32", "sample")
    pixels = _images(2)
    pair = enc.encode_pixels(pixels, ["a", "b"]).latents
    again = enc.encode_pixels(pixels[1:], ["b"]).latents
    torch.testing.assert_close(pair[1], again[0], atol=1e-5, rtol=1e-5)
    other = enc.encode_pixels(pixels[1:], ["c"]).latents
    mode = _ours(tiny_flux2, "fp32").encode_pixels(pixels[1:], ["b"]).latents
    assert not torch.allclose(other, again) and not torch.allclose(mode, again)


def test_the_manifest_records_the_statistics_the_processor_applies(tiny_flux2, processor):
    """The manifest's normalisation is the batch norm's, as the encoders (and the processor, in
    bf16) apply them; report's latent check reads it: our latents pass, the VAE's own fail."""
    _proc, models = processor
    manifest = flux2_manifest(ModelConfig(model_path=str(tiny_flux2), precision="bf16",
                                          latent_mode="mode"), None)
    norm = manifest["normalisation"]
    assert norm["kind"] == PATCH_BATCH_NORM and norm["patch_size"] == [2, 2]
    assert norm["bn_mean"] == models["bn_mean"].flatten().tolist()
    assert norm["bn_std"] == models["bn_std"].flatten().tolist()
    assert (manifest["model"], manifest["latent_channels"]) == ("flux2", CHANNELS)
    assert (manifest["text_max_length"], manifest["text_layers"]) == (512, [10, 20, 30])

    out = _ours(tiny_flux2, "fp32").encode_pixels(
        np.random.default_rng(1).integers(0, 256, (4, 64, 96, 3), dtype=np.uint8),
        [str(k) for k in range(4)], posterior=True)
    for stored, warned in ((out.latents, False), (out.mean, True)):
        check = latent_check(FLUX2, True, manifest)
        assert check is not None and check.norm.channels == CHANNELS
        assert not check.norm.approximate and "batch-norm" in check.norm.describe()
        for latent in stored:
            check.add(latent)
        assert bool(check.warnings()) == warned
    assert latent_check(FLUX2, True, {}).norm.approximate  # type: ignore[union-attr]


def _resolved(tmp_path: Path, **values: object):
    (tmp_path / "in").mkdir(exist_ok=True)
    given = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"), **values}
    return resolve(given, set(given), encode=True)


def test_the_family_is_one_module_and_one_entry(tmp_path, monkeypatch):
    """The registry lists it, its entry names this module; a layout naming `flux2` (one
    registered only here) runs FLUX.2's default model, and its config checks refuse a size its
    VAE and patching cannot take and FLUX's T5 option, each in one sentence."""
    assert MODELS["flux2"] is FLUX2 and FLUX2.input_kind == "image"
    assert FLUX2.function("encoders") is Flux2Encoders
    assert FLUX2.function("manifest") is flux2_manifest
    assert FLUX2.default_model == "black-forest-labs/FLUX.2-dev" and FLUX2.version == "flux2"
    base = LAYOUTS["megatron-bridge"]
    assert base.encode is not None
    monkeypatch.setitem(LAYOUTS, "flux2-toy", dataclasses.replace(
        base, name="flux2-toy", encode=dataclasses.replace(base.encode, model="flux2")))
    assert _resolved(tmp_path, layout="flux2-toy").model.model_path == FLUX2.default_model
    assert _resolved(tmp_path, layout="flux2-toy", image_size=208).image.image_size == 208
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, layout="flux2-toy", image_size=200)
    assert str(e.value) == ("--image-size must be a multiple of 16 for encode (the VAE "
                            "downsamples by 8 and FLUX.2 patchifies 2x2 latents), not 200.")
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, layout="flux2-toy", t5_max_length=64)
    assert str(e.value) == ("--t5-max-length is FLUX's T5 padding length; FLUX.2's Mistral text "
                            "encoder always pads captions to 512 tokens (as AutoModel's processor "
                            "does), so drop it.")


def test_a_folder_without_the_flux2_layout_is_one_sentence(tmp_path):
    (tmp_path / "vae").mkdir()
    with pytest.raises(ConfigError) as e:
        _ours(tmp_path)
    assert str(e.value) == (f"--model-path {str(tmp_path)!r} has no text_encoder/ folder (a "
                            "FLUX.2 folder holds vae/, text_encoder/ and tokenizer/); add it.")
