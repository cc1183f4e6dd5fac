"""`shardcook info`: what a dataset holds, read from its metadata and one sample; no torch, no
Energon import, so it is fast and works on CrudeWebdataset datasets where `energon info` fails."""

from __future__ import annotations

import os
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shardcook import _native
from shardcook.dataset import metadata
from shardcook.dataset.cachesummary import CacheSummary, cache_summary
from shardcook.dataset.check import legacy
from shardcook.dataset.check.npyparts import describe_npy
from shardcook.dataset.check.tensorinfo import pickled_summary, tensor_info
from shardcook.dataset.jsonl import file as jsonl
from shardcook.dataset.kind import AUTOMODEL_CACHE, dataset_kind
from shardcook.dataset.location import cache_view, dataset_view
from shardcook.dataset.view import DatasetView
from shardcook.errors import DatasetError, ShardcookError
from shardcook.layouts import by_encoding, registry_function
from shardcook.layouts.names import INDEX_SQLITE, INFO_JSON, INFO_YAML, META_DIR

#: What a dataset without index.sqlite's sample rows lacks.
NO_SAMPLE_TABLES = ("no sample tables in index.sqlite (--no-sample-tables or --no-sqlite): "
                    "training reads the .tar.idx files, lookups by key (energon mount, joined "
                    "datasets) do not work")


@dataclass
class SplitSummary:
    shards: int
    samples: int


@dataclass
class DatasetSummary:
    """The facts people ask about a dataset."""

    directory: str
    dataset_type: str
    subflavors: dict[str, Any]
    samples: int
    shards: int
    splits: dict[str, SplitSummary]
    #: Part name to a description: `dtype[shape]` for tensors, else its size in bytes.
    parts: dict[str, str] = field(default_factory=dict)
    bytes_on_disk: int = 0
    #: `preencoded_numpy` only: how many samples of the val split carry each timestep.
    val_timesteps: dict[int, int] | None = None
    #: Whether index.sqlite holds the sample rows (not after --no-sample-tables or --no-sqlite).
    sample_tables: bool = True
    #: Why index.sqlite, which is there, cannot be read (not an SQLite database); one sentence.
    index_problem: str | None = None

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes_on_disk / self.samples if self.samples else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bytes_per_sample"] = round(self.bytes_per_sample, 1)
        return d

    def lines(self) -> list[str]:
        flavors = ", ".join(f"{k}={v}" for k, v in self.subflavors.items()) or "none"
        out = [
            f"dataset:     {self.directory}",
            f"type:        {self.dataset_type} (subflavors: {flavors})",
            f"samples:     {self.samples:,} in {self.shards:,} shards",
        ]
        for name, s in self.splits.items():
            out.append(f"  {name + ':':<10} {s.samples:,} samples in {s.shards:,} shards")
        out.append(
            f"size:        {_human(self.bytes_on_disk)} on disk, "
            f"{_human(self.bytes_per_sample)} per sample"
        )
        if self.parts:
            out.append("parts of the first sample:")
            out.extend(f"  {name:<26} {desc}" for name, desc in self.parts.items())
        if self.val_timesteps is not None:
            counts = ", ".join(f"{t}: {n:,}" for t, n in self.val_timesteps.items()) or "none"
            out.append(f"val timesteps: {counts}")
        if self.index_problem is not None:
            out.append(f"index:       {self.index_problem}")
        elif not self.sample_tables:
            out.append(f"index:       {NO_SAMPLE_TABLES}")
        return out


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def read_metadata(
    root: Path,
) -> tuple[dict[str, int], dict[str, list[str]], metadata.DatasetYaml | None]:
    """(shard counts, split name to shard list, dataset.yaml or None), read by `metadata`;
    DatasetError with the fix when .info.json is missing or any file is damaged."""
    info = metadata.read_info_json(root)
    if info is None:
        raise DatasetError(
            f"{root} has no {META_DIR}/{INFO_JSON} (nor the {INFO_YAML} of Energon before 7.0) "
            f"nor a NeMo AutoModel cache's metadata.json; if it holds shards, run `shardcook "
            f"finalize {root}` first"
        )
    split_yaml = metadata.read_split_yaml(root)
    return info.shard_counts, split_yaml.parts if split_yaml else {}, metadata.read_dataset_yaml(
        root)


def describe_parts(parts: dict[str, bytes]) -> dict[str, str]:
    """`dtype[shape]` for tensor parts, else the size in bytes."""
    out: dict[str, str] = {}
    for name, data in parts.items():
        info = tensor_info(data, name)
        numpy_bits = describe_npy(data) if name.endswith(".bytes") else None
        out[name] = (str(info) if info else numpy_bits or pickled_summary(data, name)
                     or f"{len(data):,} bytes")
    return out


def summarize(
    view: DatasetView,
    counts: dict[str, int],
    splits: dict[str, list[str]],
    dataset: metadata.DatasetYaml | None,
) -> DatasetSummary:
    """The summary of a dataset whose metadata was read (no check beyond reading); of its
    shards only the first sample of the first one is read."""
    root = view.root
    split_summaries = {
        name: SplitSummary(len(shards), sum(counts.get(s, 0) for s in shards))
        for name, shards in splits.items()
    }
    bytes_on_disk = sum(os.stat(path).st_size for path in
                        (os.path.join(root, s) for s in counts) if os.path.isfile(path))
    parts: dict[str, str] = {}
    for shard, count in counts.items():
        if count and (root / shard).is_file():
            try:
                with view.fetched([shard], first_sample=True):
                    _, first = next(iter(_native.read_shard(root / shard)))
                parts = describe_parts(first)
            except (ShardcookError, StopIteration):  # damaged: validate reports it
                parts = {}
            break
    tables, sqlite = legacy.sqlite_tables(root), root / META_DIR / INDEX_SQLITE
    layout = by_encoding(dataset.encoding) if dataset and dataset.encoding else None
    val_timesteps = None
    if layout is not None and layout.reading.timesteps and "val" in splits:
        count_timesteps = registry_function(layout.reading.timesteps)
        try:
            val_timesteps = count_timesteps(root, [s for s in splits["val"] if s in counts])
        except (OSError, tarfile.TarError):  # damaged: validate reports it
            val_timesteps = None
    return DatasetSummary(
        directory=view.name,
        dataset_type=f"{dataset.module}.{dataset.cls}" if dataset else "?.?",
        subflavors=dataset.subflavors if dataset else {},
        samples=sum(counts.values()),
        shards=len(counts),
        splits=split_summaries,
        parts=parts,
        bytes_on_disk=bytes_on_disk,
        val_timesteps=val_timesteps,
        sample_tables=legacy.SAMPLES_TABLE in (tables or set()),
        index_problem=None if tables is not None or not sqlite.exists() else (
            f"{META_DIR}/{INDEX_SQLITE} is not an SQLite database (or cannot be read); run "
            f"`shardcook finalize --force {view.name}` to write it anew"),
    )


def jsonl_summary(dataset: jsonl.JsonlFile) -> DatasetSummary:
    """The summary of a JSONL dataset, from its index's ends and its first record.

    Raises:
        DatasetError: the index is missing, damaged or stale.
    """
    samples, first = dataset.indexed()
    return DatasetSummary(
        directory=str(dataset), dataset_type=jsonl.ENERGON_CLASS, subflavors={},
        samples=samples, shards=1, splits={}, parts={jsonl.PART: jsonl.describe(first)},
        bytes_on_disk=dataset.size())


def info(directory: str | Path, *, scratch_dir: str | Path | None = None
         ) -> DatasetSummary | CacheSummary:
    """Summarizes a finalized dataset from its metadata and its first sample. `directory` is
    a folder or its URL (`msc://PROFILE/path`, `s3://bucket/path`): then its small files are
    copied under `scratch_dir` (default: the temporary folder), and of its shards only the first
    sample's bytes are read. A `.jsonl` file (or URL) is a JSONL dataset: its index's ends and
    first record are read. A NeMo AutoModel cache's summary is `cachesummary.cache_summary`'s."""
    what = dataset_kind(directory)
    if what.records is not None:
        return jsonl_summary(what.records)
    if what.kind == AUTOMODEL_CACHE:
        with cache_view(what.location, scratch_dir) as cache:
            summary = cache_summary(cache.root, cache.fetched)
            summary.directory = cache.name
            summary.keys = {name: cache.shown(shown) for name, shown in summary.keys.items()}
            return summary
    with dataset_view(what.location, scratch_dir=scratch_dir) as view:
        counts, splits, dataset = read_metadata(view.root)
        return summarize(view, counts, splits, dataset)
