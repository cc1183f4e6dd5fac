"""Task encoders: each registers its cooker for its layout's `encoding` (a blend of encoded and raw
datasets never meets the wrong cooker), a subclass's class-level `cookers` win, every one takes
`worker_config=`, and VAE factors must be finite numbers."""

from __future__ import annotations

import re

import pytest
import torch
import yaml
from megatron.energon import (
    Cooker,
    WorkerConfig,
    basic_sample_keys,
    get_loader,
    get_train_dataset,
    stateless,
)
from shardcook.energon import (
    BridgeFluxTaskEncoder,
    DiffusionSample,
    DiffusionTaskEncoder,
    EncodedDiffusionTaskEncoder,
    RawDiffusionTaskEncoder,
)
from shardcook.errors import ConfigError

from tests.helpers.energon import make_encoded_dataset, make_raw_dataset

ENCODERS = [EncodedDiffusionTaskEncoder, RawDiffusionTaskEncoder, BridgeFluxTaskEncoder,
            DiffusionTaskEncoder]


def _wc() -> WorkerConfig:
    return WorkerConfig(rank=0, world_size=1, num_workers=0)


def _dataset(path, task_encoder):
    return get_train_dataset(str(path), batch_size=2, shuffle_buffer_size=None,
                             max_samples_per_sequence=None, worker_config=_wc(),
                             task_encoder=task_encoder)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("te")
    return make_encoded_dataset(root / "enc", 6), make_raw_dataset(root / "raw", 6)


@pytest.mark.parametrize("cls", ENCODERS)
def test_every_task_encoder_takes_worker_config(cls):
    wc = _wc()
    assert cls(worker_config=wc).worker_config is wc
    assert cls(wc).worker_config is wc
    with pytest.raises(ConfigError, match=re.escape(
            "worker_config must be a megatron.energon.WorkerConfig or None, not 'wc'")):
        cls(worker_config="wc")


@pytest.mark.parametrize("cls,encoding", [(EncodedDiffusionTaskEncoder, "preencoded"),
                                          (RawDiffusionTaskEncoder, "raw"),
                                          (BridgeFluxTaskEncoder, "bridge-flux")])
def test_single_layout_encoders_register_for_their_encoding(cls, encoding):
    *others, cooker = cls().cookers
    # the pre-encoded one also reads MLPerf's numpy layout, as Primus's does, by its subflavor
    assert [c.has_subflavors for c in others] == (
        [{"encoding": "preencoded_numpy"}] if encoding == "preencoded" else [])
    assert cooker.has_subflavors == {"encoding": encoding}
    assert cooker.is_match({"encoding": encoding})
    assert not cooker.is_match({"encoding": "raw" if encoding != "raw" else "preencoded"})
    assert cooker.is_match({})  # a dataset that records no encoding (another tool wrote it)


def test_a_blend_of_encoded_and_raw_is_refused_by_a_single_layout_encoder(datasets, tmp_path):
    """Energon picks a cooker per dataset when the loader is built: with the encoding filter a
    raw dataset in the blend is refused there, instead of reaching the pre-encoded cooker."""
    enc, raw = datasets
    blend = tmp_path / "blend.yaml"
    blend.write_text(yaml.safe_dump({
        "__module__": "megatron.energon", "__class__": "MetadatasetV2",
        "splits": {"train": {"blend": [{"path": str(enc.path), "weight": 1},
                                       {"path": str(raw.path), "weight": 1}]}}}))
    with pytest.raises(ValueError,
                       match=re.escape("No cooker found for subflavors: {'encoding': 'raw'}")):
        _dataset(blend, EncodedDiffusionTaskEncoder())
    with pytest.raises(ValueError, match=re.escape(
            "No cooker found for subflavors: {'encoding': 'preencoded'}")):
        _dataset(blend, RawDiffusionTaskEncoder())
    kinds = {type(b).__name__ for b in _take(_dataset(blend, DiffusionTaskEncoder()), 8)}
    assert kinds == {"DiffusionBatch", "RawImageBatch"}


def _take(dataset, n: int) -> list:
    loader = iter(get_loader(dataset))
    return [next(loader) for _ in range(n)]


@stateless
def _cook_marked(sample: dict) -> DiffusionSample:
    zero = torch.zeros(1)
    return DiffusionSample(**basic_sample_keys(sample), latents=zero, prompt_embeds=zero,
                           pooled_prompt_embeds=zero, caption="marked")


class _OwnCookers(EncodedDiffusionTaskEncoder):
    cookers = [Cooker(_cook_marked)]  # noqa: RUF012 - as users write it


def test_class_level_cookers_of_a_subclass_are_respected(datasets):
    enc, _ = datasets
    encoder = _OwnCookers()
    assert encoder.cookers == [Cooker(_cook_marked)]
    (batch,) = _take(_dataset(enc.path, encoder), 1)
    assert batch.captions == ["marked", "marked"]


@pytest.mark.parametrize("kwargs,message", [
    ({"scaling_factor": float("nan")}, "scaling_factor must be a finite number or None, not nan"),
    ({"shift_factor": float("inf")}, "shift_factor must be a finite number or None, not inf"),
    ({"scaling_factor": "0.36"}, "scaling_factor must be a finite number or None, not '0.36'"),
    ({"resample_latents": "yes"}, "resample_latents must be True or False, not 'yes'"),
])
def test_bad_vae_factors_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        EncodedDiffusionTaskEncoder(resample_latents=kwargs.pop("resample_latents", True),
                                    **kwargs)


def test_finite_factor_overrides_still_work():
    encoder = EncodedDiffusionTaskEncoder(resample_latents=True, scaling_factor=0.5,
                                          shift_factor=0)
    assert (encoder.scaling_factor, encoder.shift_factor) == (0.5, 0)
