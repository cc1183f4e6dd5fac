"""The model-family seam (`shardcook/encoders/models.py`): every registry entry's encoders
follow the `Encoders` protocol, run for real with the family's tiny models; the sizes, default
model and text options `encode`'s config checks enforce, `validate`'s latent checks and
`report`'s latent check all come from the entry; and a model that shares a family's shape is
one registry entry, shown by one registered only here that encodes through `encode`."""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from shardcook.config import resolve
from shardcook.config.sections import ModelConfig
from shardcook.dataset.check.samples import check_bridge_flux, check_wan
from shardcook.encoders.models import (
    FLUX,
    LATENTS_MEAN_STD,
    MODELS,
    PATCH_BATCH_NORM,
    SCALING_SHIFT,
    WAN,
    EncodedPixels,
    Encoders,
    Latents,
    Sizes,
    Text,
)
from shardcook.errors import ConfigError
from shardcook.htmlreport.stats import latent_check
from shardcook.jobs.encode.bridge_parts import pickle_tensors
from shardcook.layouts import LAYOUTS
from shardcook.layouts.mlperf import FLUX_SCALING_FACTOR, FLUX_SHIFT_FACTOR
from shardcook.layouts.names import CLIP_EMPTY, T5_EMPTY

from tests.helpers.encode import run_in_process, samples
from tests.helpers.video import CLIPS, video_folder

#: The conftest fixture of each family's tiny models.
TINY = {"flux": "tiny_flux", "wan": "tiny_wan", "wan2.2": "tiny_wan",
        "qwen_image": "tiny_qwen_image", "flux2": "tiny_flux2", "ltx2": "tiny_ltx2",
        "hunyuanvideo-1.5": "tiny_hunyuan_video"}


def test_every_family_has_tiny_models_here():
    assert set(TINY) == set(MODELS)


@pytest.mark.parametrize("name", list(MODELS))
def test_every_entry_follows_the_protocol(name, request):
    """Its encoders class has the protocol's members with its parameters; loaded with the
    family's tiny models through `for_run` as `encode` loads it, `encode_text` gives the
    entry's named tensors and `encode_pixels` latents of the entry's rank, downsampling and
    frame step, with the posterior when asked for."""
    family = MODELS[name]
    cls = family.function("encoders")
    for member in ("for_run", "encode_text", "encode_pixels"):
        ours = list(inspect.signature(getattr(cls, member)).parameters)
        assert ours == list(inspect.signature(getattr(Encoders, member)).parameters), member
    assert isinstance(inspect.getattr_static(cls, "latent_facts"), property)
    for what in ("manifest", "normalisation", *(["decoder"] if family.decoder else [])):
        assert callable(family.function(what)), what
    assert family.latents.convention in (SCALING_SHIFT, LATENTS_MEAN_STD, PATCH_BATCH_NORM)
    assert family.sizes.multiple % family.sizes.downsample == 0
    assert (family.sizes.frame_step is not None) == (family.input_kind == "video")

    # a family no layout writes yet is loaded without a spec
    spec = next((lay.encode for lay in LAYOUTS.values()
                 if lay.encode and lay.encode.model == name), None)
    model = ModelConfig(model_path=str(request.getfixturevalue(TINY[name])), precision="fp32",
                        latent_mode="mode", t5_max_length=16)
    enc = cls.for_run(model, spec, "cpu", None)

    text = enc.encode_text(["a red circle on a white background", ""])
    assert list(text) == list(family.text.outputs)
    assert all(t.shape[0] == 2 for t in text.values())

    rng = np.random.default_rng(0)
    # two latent frames after the first: every video VAE takes them (LTX-2's only 8n+1)
    side, frames = 2 * family.sizes.multiple, 1 + 2 * (family.sizes.frame_step or 0)
    if family.input_kind == "image":
        pixels = rng.integers(0, 256, (2, side, side, 3), dtype=np.uint8)
    else:
        pixels = [rng.integers(0, 256, (frames, side, side, 3), dtype=np.uint8)
                  for _ in range(2)]
    out = enc.encode_pixels(pixels, ["k0", "k1"])
    assert isinstance(out, EncodedPixels) and out.posterior == ()
    cell = side // family.sizes.downsample
    assert out.latents.dim() == family.latents.rank + 1 and out.latents.shape[0] == 2
    assert tuple(out.latents.shape[-2:]) == (cell, cell)
    if family.sizes.frame_step is not None:
        assert out.latents.shape[2] == 1 + (frames - 1) // family.sizes.frame_step
    both = enc.encode_pixels(pixels, ["k0", "k1"], posterior=True)
    assert len(both.posterior) == 2 and both.mean is not None and both.logvar is not None
    assert both.mean.shape == both.logvar.shape == out.latents.shape
    facts = enc.latent_facts
    if family.latents.convention == SCALING_SHIFT:
        assert set(facts) == {"scaling_factor", "shift_factor"}
    for output, _file in family.empty_encodings:
        assert output in family.text.outputs


def test_the_entries_agree_with_the_format():
    """FLUX's usual factors are MLPerf's (which its training applies), its empty encodings the
    format's file names."""
    assert FLUX.latents.usual_factors == (FLUX_SCALING_FACTOR, FLUX_SHIFT_FACTOR)
    assert [file for _, file in FLUX.empty_encodings] == [T5_EMPTY, CLIP_EMPTY]


def _resolved(tmp_path: Path, **values: object):
    (tmp_path / "in").mkdir(exist_ok=True)
    given = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"), **values}
    return resolve(given, set(given), encode=True)


def test_the_size_rules_config_enforces_are_the_entrys(tmp_path, monkeypatch):
    monkeypatch.setitem(MODELS, "flux", dataclasses.replace(
        FLUX, sizes=Sizes(64, "a toy VAE packs 8x8 latents")))
    monkeypatch.setitem(MODELS, "wan", dataclasses.replace(
        WAN, sizes=Sizes(16, "a toy VAE downsamples by 16", downsample=16, frame_step=4)))
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, image_size=80)
    assert str(e.value) == ("--image-size must be a multiple of 64 for encode (a toy VAE packs "
                            "8x8 latents), not 80.")
    assert _resolved(tmp_path, image_size=128).image.image_size == 128
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, layout="wan", height=40, width=80)
    assert str(e.value) == ("--height must be a multiple of 16 (a toy VAE downsamples by 16), "
                            "not 40.")


def test_the_default_model_and_text_options_are_the_entrys(tmp_path, monkeypatch):
    monkeypatch.setitem(MODELS, "wan", dataclasses.replace(
        WAN, default_model="org/toy-wan", text=Text(outputs=("prompt_embeds",),
                                                    padding="a toy pads to 7 tokens")))
    assert _resolved(tmp_path, layout="wan").model.model_path == "org/toy-wan"
    assert _resolved(tmp_path, layout="wan", model_path="org/mine").model.model_path == "org/mine"
    with pytest.raises(ConfigError) as e:
        _resolved(tmp_path, layout="wan", t5_max_length=64)
    assert str(e.value) == ("--t5-max-length is FLUX's T5 padding length; a toy pads to 7 "
                            "tokens, so drop it.")
    # an option is refused only where no family reading it is run
    monkeypatch.setitem(MODELS, "flux", dataclasses.replace(FLUX, text=Text(FLUX.text.outputs)))
    assert _resolved(tmp_path, layout="wan", t5_max_length=64).model.t5_max_length == 64


def test_reports_latent_check_reads_the_entry():
    """With no normalisation in the manifest, the check assumes what the family's entry says:
    its usual factors, or for a per-channel family mean 0 and standard deviation 1."""
    flux = latent_check(FLUX, False, {})
    assert flux is not None and flux.norm.approximate
    assert flux.expected == (FLUX_SHIFT_FACTOR, 1 / FLUX_SCALING_FACTOR)
    toy = dataclasses.replace(FLUX, latents=Latents(SCALING_SHIFT, 3, usual_factors=(0.5, 0.25)))
    check = latent_check(toy, False, {})
    assert check is not None and check.expected == (0.25, 2.0)
    assert latent_check(dataclasses.replace(toy, latents=Latents(SCALING_SHIFT, 3)), False,
                        {}) is None
    per_channel = dataclasses.replace(FLUX, latents=Latents(LATENTS_MEAN_STD, 3))
    check = latent_check(per_channel, True, {"scaling_factor": 0.3, "shift_factor": 0.1})
    assert check is not None and check.norm.kind == LATENTS_MEAN_STD and check.expected == (0, 1)
    assert latent_check(per_channel, False, {}) is None
    # what the manifest records wins over the entry
    recorded = latent_check(FLUX, False, {"scaling_factor": 0.5, "shift_factor": 0.25})
    assert recorded is not None and not recorded.norm.approximate
    assert recorded.expected == (0.25, 2.0)


def _pth(t: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    torch.save(t, buf)
    return buf.getvalue()


def _wan_parts(latent_frames: int, processed_frames: int) -> dict[str, bytes]:
    meta = {"processed_frames": processed_frames, "processed_height": 48,
            "processed_width": 80}
    return {"pth": _pth(torch.zeros(16, latent_frames, 6, 10)),
            "pickle": pickle_tensors(torch.zeros(226, 8)), "json": json.dumps(meta).encode()}


def test_validates_latent_checks_read_the_entry(monkeypatch):
    """A Wan latent's frames against json's processed_frames by the entry's frame step (9
    frames make 3 latent frames), and a FLUX latent's size by the entry's downsampling."""
    assert check_wan(_wan_parts(3, 9), {}, False) == []
    assert check_wan(_wan_parts(1, 1), {}, False) == []
    assert check_wan(_wan_parts(2, 9), {}, False) == [
        "part pth has 2 latent frames but json's processed_frames 9 make 3 (the VAE keeps the "
        "first frame and one latent frame per 4)"]
    monkeypatch.setitem(MODELS, "wan", dataclasses.replace(
        WAN, sizes=dataclasses.replace(WAN.sizes, frame_step=8)))
    assert check_wan(_wan_parts(2, 9), {}, False) == []

    flux = {"pth": _pth(torch.zeros(4, 4, 5)),
            "pickle": pickle_tensors({"prompt_embeds": torch.zeros(8, 4),
                                      "pooled_prompt_embeds": torch.zeros(4)}),
            "json": json.dumps({"processed_height": 64, "processed_width": 80}).encode()}
    assert check_bridge_flux(flux, {}, False) == [
        "part pth is 4x5 but json's processed size 64x80 needs 8x10"]
    monkeypatch.setitem(MODELS, "flux", dataclasses.replace(
        FLUX, sizes=dataclasses.replace(FLUX.sizes, downsample=16)))
    assert check_bridge_flux(flux, {}, False) == []


def test_a_model_of_a_familys_shape_is_one_registry_entry(tiny_wan, tmp_path, monkeypatch):
    """A model sharing Wan's VAE and text encoder (as Wan 2.2 A14B does) is one entry: here one
    registered only in this test, picked by a layout that names it, encodes the same tensors
    as Wan from its own default model, and records its own version."""
    entry = dataclasses.replace(WAN, name="wan-toy", version="wan2.2",
                                default_model=str(tiny_wan))
    monkeypatch.setitem(MODELS, entry.name, entry)  # the one registry entry
    wan = LAYOUTS["wan"]
    assert wan.encode is not None
    monkeypatch.setitem(LAYOUTS, "wan-toy", dataclasses.replace(
        wan, name="wan-toy", encode=dataclasses.replace(wan.encode, model="wan-toy")))
    videos = tmp_path / "videos"
    video_folder(videos, CLIPS[:2])
    common = ["--input-dir", str(videos), "--height", "48", "--width", "80", "--device", "cpu",
              "--precision", "fp32", "--quiet"]
    run_in_process(["encode", "--layout", "wan-toy", "--output-dir", str(tmp_path / "toy"),
                    *common])
    run_in_process(["encode", "--layout", "wan", "--model-path", str(tiny_wan),
                    "--output-dir", str(tmp_path / "wan"), *common])
    toy, ours = samples(tmp_path / "toy"), samples(tmp_path / "wan")
    assert sorted(toy) == sorted(ours) and len(toy) == 2
    for key, parts in toy.items():
        assert parts["pth"] == ours[key]["pth"] and parts["pickle"] == ours[key]["pickle"]
        meta, reference = json.loads(parts["json"]), json.loads(ours[key]["json"])
        assert (meta.pop("model_version"), reference.pop("model_version")) == ("wan2.2", "wan2.1")
        assert meta == reference
