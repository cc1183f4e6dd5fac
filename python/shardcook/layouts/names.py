"""Every on-disk name shardcook reads or writes, defined once (docs/FORMAT.md)."""

from __future__ import annotations

import re

from shardcook import _native

#: Energon's metadata folder inside a dataset.
META_DIR = ".nv-meta"
#: shardcook's own folder inside a dataset (manifest, report, resume markers, tmp); Energon never
#: reads it.
OURS_DIR = ".shardcook"
DATASET_YAML = "dataset.yaml"
SPLIT_YAML = "split.yaml"
INFO_JSON = ".info.json"
#: What Energon before 7.0 wrote instead of `.info.json` (same content, YAML); Energon still
#: reads it when `.info.json` is absent.
INFO_YAML = ".info.yaml"
INDEX_SQLITE = "index.sqlite"
INDEX_UUID = "index.uuid"
MANIFEST_JSON = "manifest.json"
REPORT_JSON = "report.json"
#: In `.shardcook/` with `--report-html`: the page `shardcook report` makes of the finished dataset.
REPORT_HTML = "report.html"
#: What finalize was asked (split, exclusions), so validate and a later finalize keep it.
FINALIZE_JSON = "finalize.json"
PROGRESS_DIR = "progress"
#: In `.shardcook/`: the run that holds the folder now (a lock, or a lease in a bucket).
RUN_LOCK = "lock.json"
TMP_DIR = "tmp"
#: In object storage, the leases of the workers sharing a run's folder (`output/lock.py`).
WORKERS_DIR = "workers"
#: The split a run's units were shared out by (`pipeline/ledger.py`).
LEDGER_JSON = "ledger.json"


def finalizing_json(units: int) -> str:
    """The claim of the worker that finalizes a run of `units` units (`pipeline/ledger.py`):
    one per count, so a later command that adds units (ingest's next split) is not held off
    by the claim of the finalize before it."""
    return f"finalizing-{units}.json"


#: encode only: the encoders' outputs for the empty caption.
EMPTY_ENCODINGS_DIR = "empty_encodings"
#: ... its files: T5's and CLIP's encodings of "".
T5_EMPTY = "t5_empty.npy"
CLIP_EMPTY = "clip_empty.npy"

SHARD_SUFFIX = ".tar"
INDEX_SUFFIX = ".tar.idx"
#: A JSONL dataset is one file of this suffix, its index beside it (Energon's names).
JSONL_SUFFIX = ".jsonl"
JSONL_INDEX_SUFFIX = ".jsonl.idx"
#: A shard name's prefix and number as the writer forms them: none, or a split's (lowercase
#: letters) `-shard-`; `is_shard_name` then asks the writer whether it makes exactly that name.
_SHARD_PARTS = re.compile(r"((?:[a-z]+-shard-)?)([0-9]+)\.tar")


def sample_key(index: int) -> str:
    """The key of input `index` (docs/FORMAT.md §4)."""
    return f"{index:010d}"


def shard_name(number: int, prefix: str = "") -> str:
    """The file of shard `number` (work unit `number` of raw and encode): the native writer owns
    the rule (`{prefix}{number:06d}.tar`), so this asks it instead of repeating it."""
    return _native.shard_file_name(number, prefix=prefix)


def split_shard_prefix(split: str) -> str:
    """The shard-name prefix of `split`'s shards (Megatron-Bridge's `train-shard-`: chatml's
    and MLPerf ingest's shards)."""
    return f"{split}-shard-"


def is_shard_path(path: str) -> bool:
    """True for a shard's path in its dataset: `is_shard_name`, alone or in a split's folder of
    lowercase letters (`train/train-shard-000000.tar`, as ingest writes them)."""
    folder, _, name = path.rpartition("/")
    return (not folder or re.fullmatch(r"[a-z]+", folder) is not None) and is_shard_name(name)


def is_shard_name(name: str) -> bool:
    """True when `name` is one the writer gives a shard: `shard_name(n)` or
    `shard_name(n, split_shard_prefix(split))` for a split of lowercase letters."""
    match = _SHARD_PARTS.fullmatch(name)
    return match is not None and shard_name(int(match[2]), match[1]) == name
