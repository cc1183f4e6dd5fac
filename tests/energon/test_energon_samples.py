"""Cookers, task encoders and batches read through the real Energon loader."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from shardcook.energon import (
    DiffusionBatch,
    DiffusionSample,
    RawImageBatch,
    RawImageSample,
    SampleDecodeError,
    cook_preencoded_diffusion,
    cook_raw_images,
    get_diffusion_loader,
)
from shardcook.energon.task_encoders import EncodedDiffusionTaskEncoder, RawDiffusionTaskEncoder

from tests.helpers.energon import (
    D_CLIP,
    D_T5,
    C,
    L,
    crude_sample,
    encoded_parts,
    image_bytes,
    make_encoded_dataset,
    make_raw_dataset,
    raw_pixels,
)


def _one_pass(wrapper) -> list:
    """The batches of one pass of the wrapped Energon loader (built with repeat=False)."""
    return list(wrapper.loader)


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    return make_encoded_dataset(tmp_path_factory.mktemp("enc") / "ds", 24,
                                latent_shapes=[(8, 8), (6, 10), (10, 6)])


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return make_raw_dataset(tmp_path_factory.mktemp("raw") / "ds", 18,
                            sizes=[(32, 48), (40, 24)], formats=["png", "webp", "jpg"])


def test_cook_preencoded_keeps_values_dtypes_and_basic_keys():
    parts = encoded_parts("0000000007", (8, 8), seed=7)
    sample = cook_preencoded_diffusion(crude_sample("0000000007", parts))
    assert isinstance(sample, DiffusionSample)
    assert sample.__key__ == "0000000007"
    assert sample.__restore_key__ == ("Webdataset", 0)
    assert sample.__subflavors__ == {}
    assert sample.latents.shape == (C, 8, 8) and sample.latents.dtype == torch.bfloat16
    assert sample.prompt_embeds.shape == (L, D_T5)
    assert sample.pooled_prompt_embeds.shape == (D_CLIP,)
    expected = torch.load(io.BytesIO(parts["latents.pth"]), weights_only=True)
    assert torch.equal(sample.latents, expected)
    assert sample.caption == "caption of 0000000007"
    assert sample.size == (64, 64) and sample.orig_size == (128, 128) and sample.crop == (0, 0)
    assert sample.source == "test/0000000007.png"


def test_cook_preencoded_without_meta_leaves_meta_fields_empty():
    parts = encoded_parts("k", (4, 4), seed=1)
    del parts["meta.json"]
    sample = cook_preencoded_diffusion(crude_sample("k", parts))
    assert sample.size is None and sample.source is None


def test_cook_preencoded_missing_part_names_key_and_part():
    parts = encoded_parts("0000000003", (4, 4), seed=3)
    del parts["prompt_embeds.pth"]
    with pytest.raises(SampleDecodeError, match=r"0000000003.*prompt_embeds\.pth"):
        cook_preencoded_diffusion(crude_sample("0000000003", parts))


def test_cook_preencoded_refuses_a_decoded_part_that_is_not_a_tensor():
    parts = encoded_parts("k", (4, 4), seed=1)
    parts["latents.pth"] = {"not": "a tensor"}
    with pytest.raises(SampleDecodeError, match=r"latents\.pth' arrived decoded as a dict.*"
                                                r"decoder = None"):
        cook_preencoded_diffusion(crude_sample("k", parts))


def test_cook_preencoded_rejects_non_tensor_and_garbage_pth():
    buf = io.BytesIO()
    torch.save({"a": torch.zeros(2)}, buf)
    parts = encoded_parts("k", (4, 4), seed=1)
    parts["pooled_prompt_embeds.pth"] = buf.getvalue()
    with pytest.raises(SampleDecodeError, match="expected one tensor"):
        cook_preencoded_diffusion(crude_sample("k", parts))
    parts["pooled_prompt_embeds.pth"] = b"not a torch file"
    with pytest.raises(SampleDecodeError, match="not plain tensor data and was refused"):
        cook_preencoded_diffusion(crude_sample("k", parts))


@pytest.mark.parametrize("fmt", ["png", "webp"])
def test_cook_raw_images_tensor_is_exact_rgb_chw_uint8(fmt):
    pixels = raw_pixels(5, (20, 30))
    crude = crude_sample("k", {fmt: image_bytes(pixels, fmt), "txt": b"a cat"})
    sample = cook_raw_images(crude)
    assert isinstance(sample, RawImageSample)
    assert sample.image.dtype == torch.uint8 and sample.image.shape == (3, 20, 30)
    assert np.array_equal(sample.image.permute(1, 2, 0).numpy(), pixels)
    assert sample.caption == "a cat"


def test_cook_raw_images_pil_and_grayscale_to_rgb():
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((6, 9), 77, dtype=np.uint8), mode="L").save(buf, format="PNG")
    sample = cook_raw_images(crude_sample("k", {"png": buf.getvalue(), "txt": b"x"}),
                             image_format="pil")
    assert sample.image.mode == "RGB" and sample.image.size == (9, 6)
    tensor = cook_raw_images(crude_sample("k", {"png": buf.getvalue(), "txt": b"x"})).image
    assert tensor.shape == (3, 6, 9) and int(tensor.min()) == int(tensor.max()) == 77


def test_cook_raw_images_errors_name_the_key():
    with pytest.raises(SampleDecodeError, match=r"0000000042.*no image part"):
        cook_raw_images(crude_sample("0000000042", {"txt": b"x"}))
    with pytest.raises(SampleDecodeError, match=r"0000000042.*not a readable image"):
        cook_raw_images(crude_sample("0000000042", {"jpg": b"\xff\xd8garbage", "txt": b"x"}))


def test_encoded_batches_shapes_dtypes_and_values(encoded):
    wrapper = get_diffusion_loader(encoded.path, batch_size=4, num_workers=0, repeat=False)
    batches = _one_pass(wrapper)
    seen = []
    for b in batches:
        assert isinstance(b, DiffusionBatch)
        n = len(b.__key__)
        assert 1 <= n <= 4
        shape = encoded.shapes[b.__key__[0]]
        assert b.latents.shape == (n, *shape) and b.latents.dtype == torch.bfloat16
        assert b.prompt_embeds.shape == (n, L, D_T5) and b.prompt_embeds.dtype == torch.bfloat16
        assert b.pooled_prompt_embeds.shape == (n, D_CLIP)
        assert b.captions == [encoded.captions[k] for k in b.__key__]
        for i, key in enumerate(b.__key__):
            idx = int(key)
            g = torch.Generator().manual_seed(idx)
            want = torch.randn(*shape, generator=g).to(torch.bfloat16)
            assert torch.equal(b.latents[i], want)
        seen.extend(b.__key__)
    assert sorted(seen) == encoded.keys


def test_raw_batches_shapes_dtypes_and_pixels(raw):
    wrapper = get_diffusion_loader(raw.path, batch_size=4, num_workers=0, repeat=False,
                                   batch_drop_last=False)
    seen = []
    for b in _one_pass(wrapper):
        assert isinstance(b, RawImageBatch)
        n = len(b.__key__)
        _c, h, w = raw.shapes[b.__key__[0]]
        assert b.images.shape == (n, 3, h, w) and b.images.dtype == torch.uint8
        assert b.captions == [raw.captions[k] for k in b.__key__]
        assert b.sizes == [(h, w)] * n
        for i, key in enumerate(b.__key__):
            if int(key) % 3 != 2:  # png and lossless webp are exact; jpg is lossy
                assert np.array_equal(b.images[i].permute(1, 2, 0).numpy(),
                                      raw_pixels(int(key), (h, w)))
        seen.extend(b.__key__)
    assert sorted(seen) == raw.keys


def test_raw_batches_as_pil(raw):
    wrapper = get_diffusion_loader(raw.path, batch_size=4, num_workers=0, repeat=False,
                                   image_format="pil")
    batch = next(wrapper)
    assert isinstance(batch.images, list)
    assert {im.mode for im in batch.images} == {"RGB"}
    assert len({im.size for im in batch.images}) == 1


@pytest.mark.parametrize("fixture", ["encoded", "raw"])
def test_bucketed_batches_hold_one_shape_each(fixture, request):
    built = request.getfixturevalue(fixture)
    wrapper = get_diffusion_loader(built.path, batch_size=3, num_workers=0, repeat=False,
                                   shuffle_buffer_size=8, max_samples_per_sequence=2,
                                   batch_drop_last=False)
    shapes_seen = set()
    keys = []
    for b in _one_pass(wrapper):
        tensor = b.latents if isinstance(b, DiffusionBatch) else b.images
        assert len({built.shapes[k] for k in b.__key__}) == 1, b.__key__
        assert tuple(tensor.shape[1:]) == built.shapes[b.__key__[0]]
        shapes_seen.add(tuple(tensor.shape[1:]))
        keys.extend(b.__key__)
    assert shapes_seen == set(built.shapes.values()) and len(shapes_seen) > 1
    assert sorted(keys) == built.keys


def test_task_encoders_turn_off_energons_default_decoder():
    assert EncodedDiffusionTaskEncoder().decoder is None
    assert RawDiffusionTaskEncoder().decoder is None


def test_loader_picks_encoder_from_encoding(encoded, raw):
    from shardcook.energon import DiffusionTaskEncoder, task_encoder_for

    assert isinstance(task_encoder_for(encoded.path), EncodedDiffusionTaskEncoder)
    assert isinstance(task_encoder_for(raw.path), RawDiffusionTaskEncoder)
    yaml_file = encoded.path.parent / "mix.yaml"
    yaml_file.write_text("x: 1\n")
    assert isinstance(task_encoder_for(yaml_file), DiffusionTaskEncoder)


def test_loader_without_encoding_says_what_to_do(tmp_path, encoded):
    from shardcook.errors import DatasetError

    with pytest.raises(DatasetError, match="finalize"):
        get_diffusion_loader(tmp_path, batch_size=2)
