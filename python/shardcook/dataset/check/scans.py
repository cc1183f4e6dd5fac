"""The checks `validate` runs beyond reading the metadata: index.sqlite against .info.json, each
split's first sample through shardcook's reader and through Energon with its layout's cooker, and
every sample (`--deep`).
Each returns one sentence per problem."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import sqlite3
import tarfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shardcook import _native
from shardcook.dataset import metadata
from shardcook.dataset.check.samples import Checker, SplitAgreement, check_sample
from shardcook.dataset.index.sqlitedb import open_read_only
from shardcook.errors import DatasetError, ShardcookError
from shardcook.layouts import LAYOUTS, Layout
from shardcook.layouts.base import registry_function
from shardcook.layouts.names import DATASET_YAML, INDEX_SQLITE, INFO_JSON, INFO_YAML, META_DIR

#: Energon's index tables (docs/FORMAT.md §5).
SQLITE_TABLES = ("samples", "sample_parts")


def factory_arguments_problem(root: Path, dataset: metadata.DatasetYaml) -> str | None:
    """Why Energon refuses dataset.yaml for its generic webdataset factory's arguments: it takes
    exactly one of a `field_map` and a `sample_loader` for a Sample class under `sample_type:`
    and for a layout's class built by that factory (Megatron-Bridge's ChatMLWebdataset), which
    is checked here whether or not its package is installed; None when it takes them."""
    named = f"{dataset.module}:{dataset.cls}"
    layout = next((lay for lay in LAYOUTS.values()
                   if lay.field_map_from is not None and lay.sample_type == named), None)
    nested = dataset.class_entry is not dataset.content
    given = [k for k in ("field_map", "sample_loader") if dataset.content.get(k) is not None]
    if (layout is None and not nested) or len(given) == 1:
        return None
    fix = ("remove one of them" if given else
           f"run `shardcook finalize --force --encoding {layout.encoding} {root}` to write "
           "the field_map" if layout else "add a field_map naming the part of each field")
    return (f"{META_DIR}/{DATASET_YAML} names {dataset.module}.{dataset.cls}, which Energon "
            "builds from a field_map or a sample_loader, but it gives "
            f"{'both' if given else 'neither'}, so Energon refuses it (\"Either field_map or "
            f"sample_loader must be provided.\"); {fix}")


def sqlite_problems(root: Path, counts: Mapping[str, int], expected: bool,
                    samples_only_ok: bool = False, *, light: bool = False) -> list[str]:
    """index.sqlite opens, has Energon's tables, holds one row per sample of each shard in
    .info.json's order, and no sample with the same part twice. A missing file is a problem
    unless `expected` is False (finalize recorded that it was not written, or an older Energon
    indexed the dataset); with `samples_only_ok` the `samples` table alone (Energon 6's index)
    is accepted. `light` reads no table whole (a few index lookups per shard, whatever the
    dataset's size): each shard's first and last row are there and none past it, and the parts
    are not checked; an index without Energon's (tar_file_id, sample_index) index (Energon 6's)
    is counted, as a lookup there would read the whole table once per shard."""
    path = root / META_DIR / INDEX_SQLITE
    label = f"{META_DIR}/{INDEX_SQLITE}"
    fix = f"; run `shardcook finalize --force {root}`"
    if not path.exists():
        return [f"{label} is missing{fix}"] if expected else []
    if not path.is_file():
        return [f"{label} is not a regular file{fix}"]
    try:
        with contextlib.closing(open_read_only(path)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            lacking = [t for t in SQLITE_TABLES if t not in tables]
            if not expected and len(lacking) == len(SQLITE_TABLES):
                return []  # no sample tables, as finalize recorded (its media tables only)
            if lacking and not (samples_only_ok and lacking == ["sample_parts"]):
                return [f"{label} lacks Energon's table(s) {', '.join(lacking)}{fix}"]
            if light and _has_lookup_index(db):
                return [f"{p}{fix}" for p in _shard_ends_problems(db, counts, label)]
            rows = dict(db.execute(
                "SELECT tar_file_id, count(*) FROM samples GROUP BY tar_file_id").fetchall())
            twice = None if lacking else db.execute(
                "SELECT tar_file_id, sample_index, part_name FROM sample_parts "
                "GROUP BY tar_file_id, sample_index, part_name HAVING count(*) > 1 LIMIT 1"
            ).fetchone()
    except sqlite3.Error as e:
        return [f"{label} is not a readable SQLite index ({e}){fix}"]
    problems = []
    for tar_id, (shard, n) in enumerate(counts.items()):
        if rows.get(tar_id, 0) != n:
            problems.append(f"{label} holds {rows.get(tar_id, 0)} samples of {shard} but "
                            f".info.json says {n}{fix}")
            break
    extra = sorted(set(rows) - set(range(len(counts))))
    if extra:
        problems.append(f"{label} holds samples of {len(extra)} shard(s) not in .info.json{fix}")
    if twice is not None:
        tar_id, index, part = twice
        shard = list(counts)[tar_id] if 0 <= tar_id < len(counts) else f"shard #{tar_id}"
        problems.append(f"{shard}: sample #{index} holds the part {part} twice; Energon keeps "
                        "only one of them")
    return problems


#: The first shard (tar_file_id, count) whose rows do not end where .info.json says: no first
#: or last row, or a row past the last. Each test is a lookup in Energon's
#: (tar_file_id, sample_index) index, all shards in one statement.
_SHARD_ENDS = """
SELECT e.key, e.value FROM json_each(?) AS e
WHERE (e.value > 0 AND NOT EXISTS (SELECT 1 FROM samples WHERE tar_file_id = e.key
                                   AND sample_index = 0))
   OR (e.value > 0 AND NOT EXISTS (SELECT 1 FROM samples WHERE tar_file_id = e.key
                                   AND sample_index = e.value - 1))
   OR EXISTS (SELECT 1 FROM samples WHERE tar_file_id = e.key AND sample_index = e.value)
LIMIT 1"""


def _has_lookup_index(db: sqlite3.Connection) -> bool:
    """`samples` has an index on (tar_file_id, sample_index), as Energon 7 writes."""
    names = [row[0] for row in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'samples'")]
    return any([row[0] for row in db.execute("SELECT name FROM pragma_index_info(?)", (name,))]
               [:2] == ["tar_file_id", "sample_index"] for name in names)


def _shard_ends_problems(db: sqlite3.Connection, counts: Mapping[str, int],
                         label: str) -> list[str]:
    """`light` counting: each shard's rows start at 0 and end at its count, and no rows belong to
    a shard .info.json does not list (the smallest and largest tar_file_id, from the index)."""
    problems = []
    found = db.execute(_SHARD_ENDS, (json.dumps(list(counts.values())),)).fetchone()
    if found is not None:
        tar_id, n = found
        problems.append(f"{label} does not hold samples #0 to #{n - 1} of {list(counts)[tar_id]} "
                        f"(.info.json's count, {n}) and no more")
    low, high = db.execute("SELECT (SELECT min(tar_file_id) FROM samples), "
                           "(SELECT max(tar_file_id) FROM samples)").fetchone()
    if low is not None and (low < 0 or high >= len(counts)):
        problems.append(f"{label} holds samples of shard(s) not in .info.json")
    return problems


def info_files_problems(root: Path) -> list[str]:
    """`.info.yaml` (what an Energon before 7.0 reads) against `.info.json` (what later ones
    read), when both are there: the counts must agree, or two Energons train on different data."""
    if not all((root / META_DIR / name).is_file() for name in (INFO_JSON, INFO_YAML)):
        return []
    try:
        new, old = (metadata.read_info_json(root, name) for name in (INFO_JSON, INFO_YAML))
    except DatasetError as e:
        return [str(e)]
    if new is None or old is None or new.shard_counts == old.shard_counts:
        return []
    shard = next(s for s in sorted({*new.shard_counts, *old.shard_counts})
                 if new.shard_counts.get(s) != old.shard_counts.get(s))
    counts = " and ".join(str(info.shard_counts.get(shard, "no count")) for info in (old, new))
    message = (f"{META_DIR}/{INFO_YAML} and {META_DIR}/{INFO_JSON} disagree on the sample counts "
               f"(e.g. {shard}: {counts}), so an Energon before 7.0 reads other counts than a "
               f"later one; run `shardcook finalize --force {root}` to rewrite both from the "
               "shards")
    return [message]


def repeated_part_problems(root: Path, shards: Sequence[str]) -> list[str]:
    """Samples holding the same part twice, found from the tar headers alone (the check
    `sqlite_problems` makes from index.sqlite, for datasets finalized without it)."""
    problems = []
    for shard in shards:
        seen: set[tuple[str, str]] = set()
        try:
            with tarfile.open(root / shard) as tar:  # reads headers, seeks over the data
                for member in tar:
                    folder, _, base = member.name.rpartition("/")
                    key, _, part = base.partition(".")
                    if (f"{folder}/{key}", part) in seen:
                        problems.append(f"{shard}: sample {key} holds the part {part} twice; "
                                        "Energon keeps only one of them")
                        break
                    seen.add((f"{folder}/{key}", part))
        except (OSError, tarfile.TarError) as e:
            problems.append(f"{shard}: {e}")
    return problems


def first_samples(
    root: Path, splits: Mapping[str, Sequence[str]]
) -> tuple[dict[str, _native.Sample], list[str]]:
    """The first sample of each non-empty split, read with shardcook's reader, and problems."""
    found: dict[str, _native.Sample] = {}
    problems: list[str] = []
    for split, shards in splits.items():
        if not shards:
            continue
        try:
            found[split] = next(iter(_native.read_shard(root / shards[0])))
        except (ShardcookError, StopIteration) as e:
            problems.append(f"cannot read the first sample of the {split} split: {e}")
    return found, problems


def first_sample_problems(
    root: Path,
    splits: Mapping[str, Sequence[str]],
    layout: Layout | None,
    field_map: Mapping[str, str],
    manifest: Mapping[str, Any],
    checker: Checker | None,
    *,
    deep: bool = False,
) -> list[str]:
    """Each split's first sample has its layout's parts and the parts dataset.yaml's field_map
    names, and passes the layout's checker (`deep`: and `--deep`'s checks of every part)."""
    samples, problems = first_samples(root, splits)
    for split, (key, parts) in samples.items():
        missing = layout.missing_parts(parts) if layout else []
        named = {option for need in missing for option in need.split("|")}
        missing += [p for p in field_map.values() if p not in parts and p not in named]
        if missing:
            kind = f"the {layout.encoding} part(s)" if layout else "the part(s)"
            problems.append(f"sample {key} of the {split} split lacks {kind} {', '.join(missing)}")
            continue
        problems += [f"sample {key} of the {split} split: {p}"
                     for p in check_sample(parts, layout, manifest=manifest, checker=checker,
                                           deep=deep)]
    return problems


def energon_load_problems(root: Path | str, splits: Mapping[str, Sequence[str]],
                          layout: Layout | None) -> list[str]:
    """Loads the first sample of each non-empty split through Energon's own loader from raw
    bytes and cooks it with the layout's cooker, which loads tensors and pickles safely (nothing
    pickled runs); for a layout without a cooker only the part names are taken."""
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        Sample,
        WorkerConfig,
        basic_sample_keys,
        get_val_dataset,
        reraise_exception,
        stateless,
    )
    from megatron.energon.edataclass import edataclass
    from megatron.energon.savable_loader import BasicDataLoader

    @edataclass
    class PartNames(Sample):
        parts: list[str]

    @stateless
    def part_names(crude: dict[str, Any]) -> PartNames:
        names = [k for k in crude if not k.startswith("__")]
        return PartNames(**basic_sample_keys(crude), parts=names)

    spec = layout.reading.cooker if layout else None
    cook = registry_function(spec) if spec else part_names

    class FirstSampleEncoder(DefaultTaskEncoder[Any, Any, list[Any], list[Any]]):
        decoder = None
        cookers = [Cooker(cook)]  # noqa: RUF012 (Energon's declaration style)

        def batch(self, samples: list[Any]) -> list[Any]:
            return samples

    problems = []
    for split, shards in splits.items():
        if not shards:
            continue
        config = WorkerConfig(
            rank=0, world_size=1, num_workers=0, global_error_handler=reraise_exception
        )
        try:
            # Energon prints each failure before its handler re-raises it; keep that off stdout.
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*pin_memory.*")
                dataset = get_val_dataset(root, split_part=split, worker_config=config,
                                          batch_size=1, task_encoder=FirstSampleEncoder())
                # Energon's loader as `get_loader` builds it, without a gc pass per sample;
                # its gc.collect() on creation is made cheap by freezing what already lives
                gc.freeze()
                try:
                    next(iter(BasicDataLoader(dataset, gc_collect_every_n_steps=0)))
                finally:
                    gc.unfreeze()
        except Exception as e:  # noqa: BLE001 (any failure inside Energon is the finding)
            detail = str(e).splitlines()[0] if str(e) else ""
            problems.append(f"Energon cannot load the {split} split: {type(e).__name__}: {detail}")
    return problems


def deep_problems(
    root: Path,
    shards: Sequence[str],
    layout: Layout | None,
    manifest: Mapping[str, Any],
    checker: Checker | None,
    agreement: SplitAgreement | None = None,
) -> list[str]:
    """Reads every sample of every shard and checks it (see `samplecheck.check_sample`), and
    a sound one against its split's first (`agreement`): a broken sample is named once."""
    problems = []
    for shard in shards:
        try:
            for key, parts in _native.read_shard(root / shard):
                found = check_sample(parts, layout, manifest=manifest, checker=checker, deep=True)
                problems += [f"{shard}: sample {key} {p}" for p in found]
                if agreement is not None and not found:
                    problems += agreement.check(shard, key, parts)
        except ShardcookError as e:
            problems.append(str(e))
    return problems
