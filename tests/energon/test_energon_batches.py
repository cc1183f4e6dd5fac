"""Batches are mappings of exactly the tensors a training step uses (plus Primus's raw `txt`), so
the everyday device move is one line; captions and sizes stay attributes. Read through the real
Energon loader, in the calling process and through worker processes."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path

import pytest
import shardcook
import torch
from shardcook.energon import DiffusionBatch, RawImageBatch, get_diffusion_loader
from torch.utils.data._utils.collate import default_convert

from tests.helpers.energon import (
    encoded_parts,
    make_encoded_dataset,
    make_raw_dataset,
    tensor_bytes,
)

TENSOR_KEYS = {"latents", "prompt_embeds", "pooled_prompt_embeds"}


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    return make_encoded_dataset(tmp_path_factory.mktemp("enc") / "ds", 12)


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return make_raw_dataset(tmp_path_factory.mktemp("raw") / "ds", 8)


@pytest.fixture(scope="module")
def posterior(tmp_path_factory) -> Path:
    """Pre-encoded samples that also store the VAE posterior and its factors (resample mode)."""
    root = tmp_path_factory.mktemp("post") / "ds"
    with shardcook.ShardWriter(str(root), shard_size=4) as w:
        for i in range(8):
            key = f"{i:010d}"
            parts = encoded_parts(key, (8, 8), seed=i)
            g = torch.Generator().manual_seed(100 + i)
            parts["mean.pth"] = tensor_bytes(torch.randn(16, 8, 8, generator=g))
            parts["logvar.pth"] = tensor_bytes(torch.randn(16, 8, 8, generator=g) - 3)
            parts["meta.json"] = b'{"scaling_factor": 0.36, "shift_factor": 0.11}'
            w.write(key, parts)
    shardcook.finalize(root, encoding="preencoded", split=(1, 0, 0))
    return root


def _first(path: Path, num_workers: int = 0, **kw):
    with get_diffusion_loader(path, batch_size=4, num_workers=num_workers, **kw) as loader:
        return next(loader)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_encoded_batch_is_a_mapping_of_its_tensors(encoded, num_workers):
    batch = _first(encoded.path, num_workers)
    assert type(batch) is DiffusionBatch and isinstance(batch, Mapping)
    assert set(batch) == set(batch.keys()) == TENSOR_KEYS and len(batch) == 3
    assert all(isinstance(v, torch.Tensor) for v in batch.values())
    # the training loop's device move, on the device this machine has
    device = "cuda" if torch.cuda.is_available() else "cpu"
    moved = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    assert torch.equal(moved["latents"].cpu(), batch["latents"])
    assert batch["latents"] is batch.latents
    assert len(batch.captions) == len(batch.sizes) == 4  # the lists stay attributes
    with pytest.raises(KeyError, match=r"no key 'captions'; its keys are latents, "
                                       r"prompt_embeds, pooled_prompt_embeds; read its other "
                                       r"fields as attributes"):
        batch["captions"]
    assert "captions" not in batch and batch.get("sizes") is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_readme_cuda_line_moves_every_value(encoded):
    batch = _first(encoded.path)
    batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}
    assert {v.device.type for v in batch.values()} == {"cuda"}
    assert set(batch) == TENSOR_KEYS


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_pinned_batch_keeps_its_class_and_captions(encoded):
    from torch.utils.data._utils.pin_memory import pin_memory

    batch = _first(encoded.path)
    pinned = pin_memory(batch)
    assert type(pinned) is DiffusionBatch and pinned.captions == batch.captions
    assert pinned["latents"].is_pinned()


def test_torch_conversion_keeps_the_batch_type(encoded):
    """torch's DataLoader passes every batch through `default_convert`, which turns a read-only
    mapping into a plain dict: the batch must survive it, with its attributes."""
    batch = _first(encoded.path)
    converted = default_convert(batch)
    assert type(converted) is DiffusionBatch and converted.captions == batch.captions
    assert type(pickle.loads(pickle.dumps(batch))) is DiffusionBatch


def test_assigning_replaces_a_value_and_keys_are_fixed(encoded):
    batch = _first(encoded.path)
    batch["latents"] = batch["latents"].float()
    assert batch.latents.dtype == torch.float32
    with pytest.raises(KeyError, match="fixed set of keys"):
        batch["timesteps"] = torch.zeros(4)
    extended = {**batch, "timesteps": torch.zeros(4)}
    assert set(extended) == TENSOR_KEYS | {"timesteps"}


def test_raw_batch_keys_are_primus_images_and_txt(raw):
    batch = _first(raw.path)
    assert type(batch) is RawImageBatch
    assert set(batch) == {"images", "txt"} and len(batch) == 2
    assert batch["txt"] == batch.captions and batch["images"] is batch.images
    assert len(batch.sizes) == 4


def test_posterior_is_a_key_only_until_the_task_encoder_draws_from_it(posterior):
    stored = _first(posterior)
    assert set(stored) == TENSOR_KEYS | {"mean", "logvar"}
    drawn = _first(posterior, resample_latents=True)
    assert set(drawn) == TENSOR_KEYS  # the drawn latent replaced the posterior
    assert drawn.mean is None and drawn.logvar is None
