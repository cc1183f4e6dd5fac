"""The cookers take what Energon's default `SampleDecoder` delivers (tensors, PIL images, parsed
JSON, str), as a plain `DefaultTaskEncoder` subclass gets it, and still read raw bytes safely."""

from __future__ import annotations

import json
import logging
import pickle
import re

import numpy as np
import pytest
import shardcook
import torch
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    SampleDecoder,
    WorkerConfig,
    get_loader,
    get_train_dataset,
    reraise_exception,
)
from PIL import Image
from shardcook.energon import (
    RawImageSample,
    SafeSampleDecoder,
    SampleDecodeError,
    UnsafeSampleError,
    cook_bridge_flux,
    cook_preencoded_diffusion,
    cook_raw_images,
)
from shardcook.energon import cookers as cookers_module

from tests.helpers.energon import (
    crude_sample,
    encoded_parts,
    evil_plain_pickle,
    evil_torch_save,
    image_bytes,
    make_encoded_dataset,
    make_raw_dataset,
    raw_pixels,
)
from tests.helpers.energon_bridge import bridge_parts, make_bridge_dataset


def _decoded(parts: dict[str, bytes], image_decode: str = "torchrgb") -> dict:
    """The parts as Energon's default decoder turns them into Python objects."""
    decoder = SampleDecoder(image_decode=image_decode)  # type: ignore[arg-type]
    return {name: decoder.decode(f"k.{name}", data) for name, data in parts.items()}



@pytest.fixture(autouse=True)
def _warn_again(monkeypatch):
    monkeypatch.setattr(cookers_module, "_warned_predecoded", False, raising=False)


def test_preencoded_from_decoded_parts_equals_from_bytes(caplog):
    parts = encoded_parts("0000000001", (4, 6), seed=1)
    from_bytes = cook_preencoded_diffusion(crude_sample("0000000001", parts))
    with caplog.at_level(logging.WARNING, logger=cookers_module.__name__):
        decoded = _decoded(parts)
        assert isinstance(decoded["latents.pth"], torch.Tensor)
        assert isinstance(decoded["meta.json"], dict) and isinstance(decoded["caption.txt"], str)
        cooked = cook_preencoded_diffusion(crude_sample("0000000001", decoded))
        cook_preencoded_diffusion(crude_sample("0000000001", decoded))
    for name in ("latents", "prompt_embeds", "pooled_prompt_embeds"):
        assert torch.equal(getattr(cooked, name), getattr(from_bytes, name))
    assert (cooked.caption, cooked.size, cooked.source) == (
        from_bytes.caption, from_bytes.size, from_bytes.source)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # once per process, not per sample
    assert "already unpickled by Energon's default decoder" in warnings[0]
    assert "`decoder = None`" in warnings[0]


def test_bytes_are_still_loaded_safely_and_silently(tmp_path, caplog):
    parts = encoded_parts("k", (4, 4), seed=2)
    with caplog.at_level(logging.WARNING, logger=cookers_module.__name__):
        cook_preencoded_diffusion(crude_sample("k", parts))
    assert not caplog.records
    parts["latents.pth"] = evil_plain_pickle(tmp_path / "pwned")
    with pytest.raises(UnsafeSampleError):
        cook_preencoded_diffusion(crude_sample("k", parts))
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("image_decode", ["pil", "torchrgb", "torchrgb8", "rgb8", "rgb", "l8"])
def test_raw_images_from_every_energon_image_decoder(image_decode):
    pixels = raw_pixels(3, (20, 30))
    fmt = "png"
    parts = {fmt: image_bytes(pixels, fmt), "txt": b"a cat"}
    decoded = _decoded(parts, image_decode)
    expected = np.asarray(Image.fromarray(pixels).convert("L").convert("RGB")) \
        if image_decode == "l8" else pixels
    as_tensor = cook_raw_images(crude_sample("k", decoded), image_format="tensor")
    assert as_tensor.image.dtype == torch.uint8 and as_tensor.image.shape == (3, 20, 30)
    assert np.array_equal(as_tensor.image.permute(1, 2, 0).numpy(), expected)
    as_pil = cook_raw_images(crude_sample("k", decoded), image_format="pil")
    assert as_pil.image.mode == "RGB" and np.array_equal(np.asarray(as_pil.image), expected)
    kept = cook_raw_images(crude_sample("k", decoded))  # no format: as the decoder made it
    if image_decode == "pil":
        assert isinstance(kept.image, Image.Image) and kept.image.mode == "RGB"
    else:
        assert kept.image is decoded[fmt]
    assert kept["txt"] == "a cat" and kept.caption == "a cat"


def test_raw_sample_is_the_seeds_images_and_txt_mapping():
    from megatron.energon import basic_sample_keys

    pixels = raw_pixels(4, (8, 12))
    crude = crude_sample("k", _decoded({"jpg": image_bytes(pixels, "png"), "txt": b"a dog"}, "pil"))
    sample = cook_raw_images(crude)
    assert isinstance(sample, RawImageSample)
    # what Primus's cooker returns: {**basic_sample_keys(sample), "images": ..., "txt": ...}
    assert dict(sample) == {**basic_sample_keys(crude), "images": sample.image, "txt": "a dog"}
    assert isinstance(sample["images"], Image.Image)


def test_a_decoded_value_of_the_wrong_kind_is_refused():
    with pytest.raises(SampleDecodeError, match=r"part 'png' arrived decoded as a str, expected "
                                                r"bytes or an image"):
        cook_raw_images(crude_sample("k", {"png": "not an image", "txt": "x"}))
    parts = _decoded(encoded_parts("k", (4, 4), seed=1))
    parts["caption.txt"] = 7
    with pytest.raises(SampleDecodeError, match=re.escape("caption.txt' arrived decoded as a int")):
        cook_preencoded_diffusion(crude_sample("k", parts))


def test_bridge_from_decoded_parts_equals_from_bytes():
    parts = bridge_parts("k", (8, 8), seed=5)
    decoded = _decoded(parts)
    assert isinstance(decoded["pickle"], dict) and isinstance(decoded["json"], dict)
    a = cook_bridge_flux(crude_sample("k", parts))
    b = cook_bridge_flux(crude_sample("k", decoded))
    assert torch.equal(a.latents, b.latents) and torch.equal(a.prompt_embeds, b.prompt_embeds)
    assert a.caption == b.caption == "caption of k" and a.size == b.size == (64, 64)
    decoded["pickle"] = {"prompt_embeds": "text"}
    with pytest.raises(SampleDecodeError, match="not a dict with the tensors"):
        cook_bridge_flux(crude_sample("k", decoded))


def test_nonfinite_vae_factors_in_meta_json_are_refused():
    parts = encoded_parts("k", (4, 4), seed=1)
    parts["meta.json"] = json.dumps({"scaling_factor": float("nan")}).encode()
    with pytest.raises(SampleDecodeError, match="scaling_factor must be a finite number"):
        cook_preencoded_diffusion(crude_sample("k", parts))


class _DefaultDecoderEncoder(DefaultTaskEncoder):
    """A plain Energon task encoder: the default decoder, shardcook's cookers, default batch."""

    cookers = [  # noqa: RUF012 - as users write it
        Cooker(cook_preencoded_diffusion, has_subflavors={"encoding": "preencoded"}),
        Cooker(cook_raw_images, has_subflavors={"encoding": "raw"}),
        Cooker(cook_bridge_flux, has_subflavors={"encoding": "bridge-flux"}),
    ]

    def batch(self, samples):
        return samples


@pytest.mark.parametrize("safe", [False, True], ids=["energons", "safe"])
@pytest.mark.parametrize("layout", ["encoded", "raw", "bridge"])
def test_every_layout_loads_under_energons_default_decoder(tmp_path, layout, safe):
    make = {"encoded": make_encoded_dataset, "raw": make_raw_dataset,
            "bridge": make_bridge_dataset}[layout]
    built = make(tmp_path / layout, 4)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    encoder = _DefaultDecoderEncoder()
    if safe:
        encoder.decoder = SafeSampleDecoder()
    ds = get_train_dataset(str(built.path), batch_size=2, shuffle_buffer_size=None,
                           max_samples_per_sequence=None, worker_config=wc, task_encoder=encoder)
    samples = next(iter(get_loader(ds)))
    assert len(samples) == 2 and all(s.__key__ in built.keys for s in samples)
    if layout == "raw":
        assert samples[0]["images"].dtype == torch.float32  # torchrgb, kept as decoded
    else:
        assert samples[0].latents.shape == (16, 8, 8)
    assert pickle.loads(pickle.dumps(samples[0])).__key__ == samples[0].__key__


@pytest.mark.parametrize("decoder,runs", [(SampleDecoder(), True), (SafeSampleDecoder(), False)],
                         ids=["energons", "safe"])
def test_a_malicious_pth_runs_inside_energons_decoder_but_not_the_safe_one(tmp_path, monkeypatch,
                                                                          decoder, runs):
    """Why shardcook's task encoders turn the default decoder off: it unpickles `.pth` parts
    (weights_only=False) before any cooker can refuse them. `SafeSampleDecoder` leaves them as
    bytes, and the cooker refuses the payload without running it."""
    monkeypatch.setattr("webdataset.autodecode.pytorch_weights_only", False)  # Energon's default
    target, root = tmp_path / "pwned", tmp_path / "evil"
    with shardcook.ShardWriter(str(root), shard_size=4) as w:
        for i in range(2):
            parts = encoded_parts(f"{i:010d}", (4, 4), seed=i)
            parts["latents.pth"] = evil_torch_save(target)
            w.write(f"{i:010d}", parts)
    shardcook.finalize(root, encoding="preencoded", split=(1, 0, 0), validate=False)

    class Encoder(DefaultTaskEncoder):
        cookers = [Cooker(cook_preencoded_diffusion)]  # noqa: RUF012 - as users write it

    Encoder.decoder = decoder
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0,
                      global_error_handler=reraise_exception)
    ds = get_train_dataset(str(root), batch_size=1, shuffle_buffer_size=None,
                           max_samples_per_sequence=None, worker_config=wc,
                           task_encoder=Encoder())
    expected = SampleDecodeError if runs else UnsafeSampleError
    with pytest.raises(expected):
        next(iter(get_loader(ds)))
    assert target.exists() is runs
