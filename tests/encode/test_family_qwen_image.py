"""The Qwen-Image family (`shardcook/encoders/qwen_image.py` and its registry entry) against NeMo
AutoModel's Qwen-Image processor (vendored in tests/vendored/automodel/processors), both run on
the CPU on the same tiny model folder (real diffusers/transformers classes, random weights) and
the same inputs: our batched latents and prompt embeddings are the processor's, one input at a
time, value for value, in its dtypes; our prompt mask is diffusers' `encode_prompt`'s."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from shardcook.config import resolve
from shardcook.encoders.flux import sample_seed
from shardcook.encoders.models import LATENTS_MEAN_STD, MODELS, QWEN_IMAGE
from shardcook.encoders.qwen_image import (
    PROMPT_EMBEDS,
    PROMPT_EMBEDS_MASK,
    PROMPT_TEMPLATE,
    TEMPLATE_TOKENS,
    TEXT_LENGTH,
    QwenImageDecoder,
    QwenImageEncoders,
    qwen_image_manifest,
)
from shardcook.errors import ConfigError
from shardcook.htmlreport.stats import latent_check
from shardcook.layouts import LAYOUTS

from tests.vendored.automodel.processors.qwen_image import QwenImageProcessor

CAPTIONS = ["a red circle on a white background", "", "cat",
            "a yellow star with a blue square and a green triangle in a photo of a rocket",
            # past the 1024 tokens kept after the template's system turn
            "red " * 1100]
SEED = 7


@pytest.fixture(scope="module")
def processor(tiny_qwen_image):
    """AutoModel's processor and the models its `load_models` loads (bf16, as it always does)."""
    proc = QwenImageProcessor()
    return proc, proc.load_models(str(tiny_qwen_image), "cpu")


def _ours(folder: Path, latent_mode: str = "sample") -> QwenImageEncoders:
    return QwenImageEncoders.load(model_path=str(folder), revision=None, token_file=None,
                                  precision="bf16", device="cpu", latent_mode=latent_mode,
                                  seed=SEED)


def test_the_tiny_tokenizer_makes_the_system_turn_34_tokens(tiny_qwen_image):
    """As Qwen2.5-VL's tokenizer does: what Qwen-Image drops is the system turn, exactly."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen_image / "tokenizer")
    system = PROMPT_TEMPLATE[:PROMPT_TEMPLATE.index("<|im_start|>user")]
    assert len(tok(system).input_ids) == TEMPLATE_TOKENS


def test_prompt_embeds_are_the_processors(tiny_qwen_image, processor):
    """Each caption's rows of our batch are the processor's `prompt_embeds` [1, L, D] bf16 for it
    alone; rows past its mask are zero; the mask is `encode_prompt`'s for the batch."""
    proc, models = processor
    ours = _ours(tiny_qwen_image).encode_text(CAPTIONS)
    assert list(ours) == list(QWEN_IMAGE.text.outputs) == [PROMPT_EMBEDS, PROMPT_EMBEDS_MASK]
    embeds, mask = ours[PROMPT_EMBEDS], ours[PROMPT_EMBEDS_MASK]
    assert embeds.dtype == torch.bfloat16 and mask.dtype == torch.int64
    assert embeds.shape[:2] == mask.shape == (len(CAPTIONS), TEXT_LENGTH)
    for i, caption in enumerate(CAPTIONS):
        theirs = proc.encode_text(caption, models, "cpu")["prompt_embeds"]
        n = int(mask[i].sum())
        assert theirs.dtype == torch.bfloat16 and theirs.shape == (1, n, embeds.shape[2])
        assert torch.equal(embeds[i, :n], theirs[0]), caption[:40]
        assert mask[i, :n].all() and not mask[i, n:].any() and not embeds[i, n:].any()
    assert int(mask[-1].sum()) == TEXT_LENGTH  # the long caption is cut as diffusers cuts it
    with torch.no_grad():
        _, pipeline_mask = models["pipeline"].encode_prompt(prompt=CAPTIONS, device="cpu")
    assert torch.equal(mask, pipeline_mask)


def test_latents_are_the_processors(tiny_qwen_image, processor):
    """Our sampled latents of a batch, [B, 16, H/8, W/8], are the processor's `encode_image` of
    each image (seeded with the sample's seed, as ours is), normalised by the VAE config's
    latents_mean/std, in its float16."""
    proc, models = processor
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3, 32, 48, 3), dtype=np.uint8)
    keys = ["k0", "k1", "k2"]
    ours = _ours(tiny_qwen_image).encode_pixels(pixels, keys)
    assert ours.latents.shape == (3, 16, 4, 6) and ours.latents.dtype == torch.bfloat16
    for image, key, latent in zip(pixels, keys, ours.latents, strict=True):
        torch.manual_seed(sample_seed(SEED, key))  # the global generator the processor draws from
        theirs = proc.encode_image(proc.preprocess_image(Image.fromarray(image)), models, "cpu")
        assert theirs.dtype == torch.float16 and theirs.shape == latent.shape
        assert torch.equal(latent.to(torch.float16), theirs), key
    # the normalisation is the config's: undone, the latents are the VAE's own
    mode = _ours(tiny_qwen_image, "mode")
    both = mode.encode_pixels(pixels, keys, posterior=True)
    assert both.mean is not None and both.mean.shape == both.latents.shape
    config = models["vae"].config
    norm = torch.tensor(config.latents_mean).view(1, -1, 1, 1).to(torch.bfloat16), torch.tensor(
        config.latents_std).view(1, -1, 1, 1).to(torch.bfloat16)
    assert torch.equal(both.latents, (both.mean - norm[0]) / norm[1])
    assert not torch.equal(both.latents, ours.latents)  # mode is not a sample


def test_the_manifest_and_the_decoder_read_the_vae_config(tiny_qwen_image):
    from shardcook.config.sections import ModelConfig

    model = ModelConfig(model_path=str(tiny_qwen_image), precision="bf16", latent_mode="sample",
                        seed=SEED)
    manifest = qwen_image_manifest(model, None)
    norm = manifest["normalisation"]
    assert norm["kind"] == LATENTS_MEAN_STD and len(norm["latents_mean"]) == 16
    assert norm["latents_mean"] != QWEN_IMAGE_REAL_MEAN  # the tiny VAE's own, from its config
    assert (manifest["model"], manifest["latent_channels"]) == ("qwen_image", 16)
    latent = _ours(tiny_qwen_image, "mode").encode_pixels(
        np.full((1, 32, 48, 3), 128, np.uint8), ["k"]).latents[0]
    image = QwenImageDecoder(str(tiny_qwen_image), manifest)(latent)
    assert image.shape == (32, 48, 3) and image.dtype == np.uint8


#: The real Qwen-Image VAE's latents_mean (its diffusers default), which the tiny VAE's are not.
QWEN_IMAGE_REAL_MEAN = [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                        0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921]


def test_reports_latent_check_takes_its_rank_3_per_channel_latents(tiny_qwen_image):
    """Normalised latents [C, h, w] of images like those the tiny VAE's statistics were measured
    on pass the report's per-channel check; the VAE's own latents do not."""
    from shardcook.config.sections import ModelConfig

    manifest = qwen_image_manifest(ModelConfig(model_path=str(tiny_qwen_image),
                                               precision="fp32", latent_mode="mode"), None)
    enc = QwenImageEncoders.load(model_path=str(tiny_qwen_image), revision=None,
                                 token_file=None, precision="fp32", device="cpu",
                                 latent_mode="mode", seed=0)
    pixels = np.random.default_rng(1).integers(0, 256, (4, 64, 96, 3), dtype=np.uint8)
    out = enc.encode_pixels(pixels, [str(k) for k in range(4)], posterior=True)
    for stored, warned in ((out.latents, False), (out.mean, True)):
        check = latent_check(QWEN_IMAGE, True, manifest)
        assert check is not None and check.norm.channels == 16 and not check.norm.approximate
        for latent in stored:
            check.add(latent)
        assert check.samples == 4 and bool(check.warnings()) == warned


def _resolved(tmp_path: Path, **values: object):
    (tmp_path / "in").mkdir(exist_ok=True)
    given = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"), **values}
    return resolve(given, set(given), encode=True)


def test_the_registry_lists_it_and_encode_refuses_what_it_cannot_take(tmp_path, monkeypatch):
    """A layout naming `qwen_image` (one registered only here: none is written yet) runs Qwen's
    default model, and its config checks refuse a size its VAE and packing cannot take and
    FLUX's T5 option, each in one sentence."""
    assert MODELS["qwen_image"] is QWEN_IMAGE and QWEN_IMAGE.input_kind == "image"
    assert QWEN_IMAGE.function("encoders") is QwenImageEncoders
    base = LAYOUTS["megatron-bridge"]
    assert base.encode is not None
    monkeypatch.setitem(LAYOUTS, "qwen-toy", dataclasses.replace(
        base, name="qwen-toy", encode=dataclasses.replace(base.encode, model="qwen_image")))
    assert _resolved(tmp_path, layout="qwen-toy").model.model_path == "Qwen/Qwen-Image"
    assert _resolved(tmp_path, layout="qwen-toy", image_size=208).image.image_size == 208
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, layout="qwen-toy", image_size=200)
    assert str(e.value) == ("--image-size must be a multiple of 16 for encode (the VAE "
                            "downsamples by 8 and Qwen-Image packs 2x2 latents), not 200.")
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, layout="qwen-toy", t5_max_length=64)
    assert str(e.value) == ("--t5-max-length is FLUX's T5 padding length; Qwen-Image keeps each "
                            "caption's own tokens, up to 1024, so drop it.")
