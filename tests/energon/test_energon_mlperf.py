"""`preencoded_numpy` (MLPerf Flux.1) datasets through Energon: Primus's trainer opens the one
ingested folder for both its train and val loaders, Primus's own cooker logic and our task
encoder read our ingested shards into the same tensors, timesteps reach validation batches,
resampling uses FLUX's factors, and a batch mixing samples with and without a timestep fails."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    Sample,
    SampleDecoder,
    WorkerConfig,
    basic_sample_keys,
    get_loader,
    get_train_dataset,
    get_val_dataset,
    stateless,
)
from megatron.energon.edataclass import edataclass
from shardcook.config.ingest import IngestConfig, IngestDataset
from shardcook.energon import (
    EncodedDiffusionTaskEncoder,
    SampleDecodeError,
    cook_preencoded_numpy_diffusion,
    get_diffusion_loader,
)
from shardcook.jobs.ingest.run import run_ingest

from tests.helpers.mlperf import bf16_bits, expected_values, write_arrow_set

# ---- Primus's cooker, re-typed from its public source -------------------------------------
# AMD-AGI/Primus, primus/backends/megatron/data/diffusion/task_encoders/image.py:
# `load_numpy_tensor`, `cook_preencoded_numpy_diffusion` and `EncodedDiffusionTaskEncoder.batch`
# (its decoder is SampleDecoder(image_decode="pil"), so `json` arrives as a dict, `.bytes` raw).


@edataclass
class PrimusSample(Sample):
    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    mean: torch.Tensor | None = None
    logvar: torch.Tensor | None = None
    timestep: torch.Tensor | None = None


def primus_load_numpy_tensor(data: bytes | None) -> torch.Tensor | None:
    if data is None:
        return None
    if data[:6] == b"\x93NUMPY":
        arr = np.load(io.BytesIO(data))
    else:
        arr = np.frombuffer(data, dtype=np.uint16)
    return torch.from_numpy(arr.copy()).view(torch.bfloat16)


@stateless
def primus_cook(sample: dict[str, Any]) -> PrimusSample:
    timestep = None
    if "json" in sample:
        raw = sample["json"]
        decoded = raw if isinstance(raw, dict) else json.loads(raw)
        if "timestep" in decoded:
            timestep = torch.tensor(decoded["timestep"])
    return PrimusSample(
        **basic_sample_keys(sample),
        prompt_embeds=primus_load_numpy_tensor(sample.get("t5.bytes")),
        pooled_prompt_embeds=primus_load_numpy_tensor(sample.get("clip.bytes")),
        mean=primus_load_numpy_tensor(sample.get("mean.bytes")),
        logvar=primus_load_numpy_tensor(sample.get("logvar.bytes")),
        timestep=timestep,
    )


class PrimusEncoder(DefaultTaskEncoder[PrimusSample, PrimusSample, dict, dict]):
    decoder = SampleDecoder(image_decode="pil")
    cookers = [Cooker(primus_cook, has_subflavors={"encoding": "preencoded_numpy"})]  # noqa: RUF012

    def batch(self, samples: list[PrimusSample]) -> dict[str, torch.Tensor]:
        batch = {"prompt_embeds": torch.stack([s.prompt_embeds for s in samples]),
                 "pooled_prompt_embeds": torch.stack([s.pooled_prompt_embeds for s in samples]),
                 "mean": torch.stack([s.mean for s in samples]),
                 "logvar": torch.stack([s.logvar for s in samples])}
        if samples[0].timestep is not None:
            batch["timestep"] = torch.stack([s.timestep for s in samples])
        return batch


# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlperf(tmp_path_factory) -> tuple[Path, dict[str, tuple[int, int, int | None]]]:
    """The ingested dataset (train and val), and what each row holds."""
    root = tmp_path_factory.mktemp("mlperf")
    train = write_arrow_set(root / "cc12m", 2, 5, timesteps=False)
    val = write_arrow_set(root / "coco", 2, 8, timesteps=True, prefix="coco", key_prefix="v")
    run_ingest(IngestConfig(output_dir=root / "out", datasets=[
        IngestDataset(split="train", paths=(train.folder,)),
        IngestDataset(split="val", paths=(val.folder,))]))
    return root / "out", {**train.rows, **val.rows}


def _val_batches(path: Path, encoder: Any, batch_size: int) -> list[Any]:
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_val_dataset(path, split_part="val", worker_config=config, batch_size=batch_size,
                         task_encoder=encoder)
    return list(get_loader(ds))


def test_primus_trainer_opens_the_one_folder_for_train_and_val(mlperf):
    """Primus's trainer passes its one data_path to both loaders (split parts `train/.*`,
    `val/.*`); each gets its own split's samples, whole, through Primus's cooker."""
    out, rows = mlperf
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    train = get_train_dataset(out, split_part="train", worker_config=config, batch_size=5,
                              shuffle_buffer_size=None, max_samples_per_sequence=None,
                              task_encoder=PrimusEncoder())
    first = next(iter(get_loader(train)))
    assert "timestep" not in first and first["mean"].shape == (5, 4, 2, 2)
    val = _val_batches(out, PrimusEncoder(), 4)
    keys = [k for batch in _val_batches(out, EncodedDiffusionTaskEncoder(), 4)
            for k in batch.__key__]
    assert sorted(keys) == sorted(k for k in rows if k.startswith("v"))
    timesteps = torch.cat([b["timestep"] for b in val]).tolist()
    assert sorted(timesteps) == sorted(rows[k][2] for k in keys)
    assert len(keys) == 16


def test_primus_cooker_and_ours_give_the_same_tensors(mlperf):
    out, rows = mlperf
    theirs = _val_batches(out, PrimusEncoder(), 4)
    ours = _val_batches(out, EncodedDiffusionTaskEncoder(), 4)
    assert len(theirs) == len(ours) == 4
    for t, o in zip(theirs, ours, strict=True):
        for name in ("prompt_embeds", "pooled_prompt_embeds", "mean", "logvar", "timestep"):
            assert torch.equal(t[name], o[name]), name
        assert o.prompt_embeds.dtype == torch.bfloat16
    # and both equal the source, bit for bit
    first = ours[0]
    key = first.__key__[0]
    file_index, row, t = rows[key]
    bits = bf16_bits(expected_values(file_index, row, "mean"))
    assert torch.equal(first.mean[0].view(torch.int16), torch.from_numpy(bits.view(np.int16)))
    assert int(first.timestep[0]) == t


def test_loader_dispatches_on_subflavor_and_puts_timestep_in_val_batches(mlperf):
    out, rows = mlperf
    loader = get_diffusion_loader(out, batch_size=8, split="val", num_workers=0)
    batch = next(loader)
    assert batch["timestep"].dtype == torch.int64
    assert batch["timestep"].tolist() == [rows[k][2] for k in batch.__key__]
    # deterministic latent: FLUX's scaling of the posterior mode
    expected = (0.3611 * (batch.mean.float() - 0.1159)).to(torch.bfloat16)
    assert torch.equal(batch.latents, expected)
    fixed = next(get_diffusion_loader(out, batch_size=5, split="train", num_workers=0))
    drawn = next(get_diffusion_loader(out, batch_size=5, split="train", num_workers=0,
                                      resample_latents=True))
    assert "timestep" not in drawn and "mean" not in drawn  # the draw replaces the posterior
    assert drawn.__key__ == fixed.__key__
    assert drawn.latents.shape == fixed.latents.shape
    assert not torch.equal(drawn.latents, fixed.latents)


def _cooked(path: Path, shard: str) -> list[Any]:
    from shardcook import read_shard

    return [cook_preencoded_numpy_diffusion(_crude(key, parts))
            for key, parts in read_shard(path / shard)]


def _crude(key: str, parts: dict[str, bytes]) -> dict[str, Any]:
    """A crude sample as Energon hands it to a cooker with `decoder = None`."""
    return {"__key__": key, "__restore_key__": (), "__subflavors__": {}, "__sources__": (),
            **parts}


def test_a_batch_mixing_timesteps_names_the_keys(mlperf):
    out, _ = mlperf
    train = _cooked(out, "train/train-shard-000000.tar")[:2]
    val = _cooked(out, "val/val-shard-000000.tar")[:1]
    with pytest.raises(SampleDecodeError, match="mixes samples with a timestep") as e:
        EncodedDiffusionTaskEncoder().batch(train + val)
    assert val[0].__key__ in str(e.value) and train[0].__key__ in str(e.value)


def test_cooker_refuses_a_pickled_npy(mlperf):
    out, _ = mlperf
    from shardcook import read_shard

    key, parts = next(iter(read_shard(out / "val" / "val-shard-000000.tar")))
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(SampleDecodeError, match=re.escape("not a readable .npy")):
        cook_preencoded_numpy_diffusion(_crude(key, {**parts, "t5.bytes": buf.getvalue()}))


def test_a_blend_dispatches_on_the_subflavor_too(mlperf, tmp_path):
    from shardcook.energon import write_blend

    out, _ = mlperf
    blend = write_blend(tmp_path / "mix.yaml", [f"{out}=1"])
    batch = next(get_diffusion_loader(blend, batch_size=5, num_workers=0))
    assert batch.mean.dtype == torch.bfloat16 and batch.mean.shape == (5, 4, 2, 2)
    assert "timestep" not in batch
    assert len(set(batch.__key__)) == 5
