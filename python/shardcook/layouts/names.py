"""Every on-disk name shardcook reads or writes, defined once (docs/FORMAT.md)."""

from __future__ import annotations

#: Energon's metadata folder inside a dataset.
META_DIR = ".nv-meta"
#: shardcook's own folder inside a dataset (manifest, report, resume markers, tmp); Energon never
#: reads it.
OURS_DIR = ".shardcook"
DATASET_YAML = "dataset.yaml"
SPLIT_YAML = "split.yaml"
INFO_JSON = ".info.json"
INDEX_SQLITE = "index.sqlite"
INDEX_UUID = "index.uuid"
MANIFEST_JSON = "manifest.json"
REPORT_JSON = "report.json"
#: What finalize was asked (split, exclusions), so validate and a later finalize keep it.
FINALIZE_JSON = "finalize.json"
PROGRESS_DIR = "progress"
TMP_DIR = "tmp"
#: encode only: the encoders' outputs for the empty caption.
EMPTY_ENCODINGS_DIR = "empty_encodings"

SHARD_SUFFIX = ".tar"
INDEX_SUFFIX = ".tar.idx"


def sample_key(index: int) -> str:
    """The key of input `index` (docs/FORMAT.md §4)."""
    return f"{index:010d}"


def shard_name(unit: int) -> str:
    """The shard file of work unit `unit`."""
    return f"{unit:06d}{SHARD_SUFFIX}"
