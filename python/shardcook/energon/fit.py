"""Before a loader is built: can its task encoder read the dataset (every dataset of a blend)?

A task encoder whose cookers do not match a dataset's `encoding`, or one that resamples latents
from a dataset without a stored posterior, would fail on every sample inside Energon (one
traceback per sample, then a FatalSampleError). This check reads each dataset's metadata and the
first sample's part names, and says in one sentence which task encoder fits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcook.errors import ConfigError
from shardcook.layouts import Layout, by_encoding
from shardcook.layouts.base import CRUDE_WEBDATASET

__all__ = ["check_fit", "fitting_task_encoder"]

_FACTORS = ("scaling_factor", "shift_factor")


def fitting_task_encoder(encoding: str | None) -> str:
    """Names what reads datasets of `encoding` (its layout's task encoder), for error messages."""
    layout = None if encoding is None else by_encoding(encoding)
    if layout is not None and layout.reading.task_encoder is not None:
        return layout.reading.task_encoder.replace(":", ".")
    if layout is not None and layout.sample_type != CRUDE_WEBDATASET:
        return f"the task encoder of its sample type {layout.sample_type} (not shardcook.energon)"
    if encoding is None:
        return ("the task encoder of its layout (or record the layout with `shardcook finalize "
                "--force --encoding ...`)")
    return f"a task encoder with a cooker for encoding {encoding!r} (shardcook.energon has none)"


@dataclass(frozen=True)
class _Crude:
    """One CrudeWebdataset a loader reads: its folder, subflavors and first non-empty shard."""

    root: Path
    subflavors: dict[str, Any]
    first_shard: Path | None


def _crude_datasets(path: str | Path, split: str) -> list[_Crude]:
    """The CrudeWebdatasets that `split` of `path` reads, as Energon resolves them (a blend's
    entries, nested blends, subflavors set in the blend, the shards of the split)."""
    from megatron.energon import CrudeSample, WorkerConfig, load_dataset

    loaded = load_dataset(str(path)).get_datasets(
        training=split == "train",
        split_part=split,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
    )
    found = []
    for entry in loaded.datasets:
        dataset = entry.dataset
        if getattr(type(dataset), "__sample_type__", None) is not CrudeSample:
            continue
        shards = [Path(str(s.path)) for s in getattr(dataset, "shards", ()) if s.count > 0]
        root = Path(str(getattr(dataset, "path", path)))
        found.append(_Crude(root, dict(dataset.subflavors or {}),
                            shards[0] if shards else None))
    return found


def _first_parts(shard: Path) -> dict[str, bytes] | None:
    """The parts of the first sample of `shard`, when readable (else Energon reports it)."""
    from shardcook import _native
    from shardcook.errors import ShardcookError

    try:
        return dict(next(iter(_native.read_shard(shard))).parts)
    except (ShardcookError, StopIteration):
        return None


def _check_posterior(dataset: _Crude, task_encoder: Any, posterior: tuple[str, ...]) -> None:
    """Resampling needs the `posterior` parts (`mean.pth` + `logvar.pth`), and factors from the
    task encoder or the sample's `meta.json`."""
    parts = None if dataset.first_shard is None else _first_parts(dataset.first_shard)
    if parts is None:
        return
    root = dataset.root
    missing = [p for p in posterior if p not in parts]
    if missing:
        raise ConfigError(
            f"resample_latents=True needs each sample's {' and '.join(posterior)}, but the "
            f"first sample of {root} has no {' or '.join(missing)}; write the dataset with "
            "`shardcook encode --latent-mode resample`, or read it with resample_latents=False."
        )
    given = {name: getattr(task_encoder, name, None) for name in _FACTORS}
    try:
        meta = json.loads(parts.get("meta.json", b"{}"))
    except ValueError:
        meta = {}
    recorded = meta if isinstance(meta, dict) else {}
    unknown = [n for n in _FACTORS if given[n] is None and recorded.get(n) is None]
    if unknown:
        raise ConfigError(
            f"resample_latents=True needs the VAE's {' and '.join(unknown)}, which the first "
            f"sample of {root} does not record in meta.json; pass {'=, '.join(unknown)}= to "
            "the task encoder."
        )


def check_fit(path: str | Path, split: str, task_encoder: Any, *, picked: bool = False) -> None:
    """Refuses a task encoder that cannot read every dataset `split` of `path` reads.

    Args:
        path: A dataset folder or a metadataset `.yaml`.
        split: The split part the loader reads.
        task_encoder: The task encoder the loader will use.
        picked: The loader picked it (so the message does not suggest letting it pick).

    Raises:
        ConfigError: A dataset whose `encoding` none of the task encoder's cookers matches
            (naming the task encoder that fits), or resampling from a dataset without a
            posterior or VAE factors.
    """
    name = type(task_encoder).__name__
    datasets = _crude_datasets(path, split)  # as given: a URL must stay one
    where = f" (in {path})" if Path(path).is_file() else ""
    cookers = list(getattr(task_encoder, "cookers", ()) or ())
    for dataset in datasets:
        if not any(c.is_match(dataset.subflavors) for c in cookers):
            encoding = dataset.subflavors.get("encoding")
            what = "it records no encoding" if encoding is None else f"its encoding is {encoding!r}"
            tail = "" if picked else (
                ", or leave task_encoder unset and get_diffusion_loader picks the one that fits")
            raise ConfigError(
                f"{name} cannot read {dataset.root}{where}: {what}; use "
                f"{fitting_task_encoder(encoding)}{tail}."
            )
    if not getattr(task_encoder, "resample_latents", False):
        return
    encoded = [(d, layout) for d in datasets
               if (layout := _resampled_layout(d.subflavors.get("encoding"))) is not None]
    if not encoded:
        raise ConfigError(
            f"resample_latents=True resamples pre-encoded datasets, but {path} holds none; "
            "leave it False."
        )
    for dataset, layout in encoded:  # e.g. MLPerf samples always hold theirs, with FLUX's factors
        if layout.reading.posterior_parts:
            _check_posterior(dataset, task_encoder, layout.reading.posterior_parts)


def _resampled_layout(encoding: object) -> Layout | None:
    """The layout of `encoding` when its task encoder can resample latents from a posterior."""
    layout = by_encoding(encoding) if isinstance(encoding, str) else None
    if layout is None or "resample_latents" not in layout.reading.task_encoder_options:
        return None
    return layout
