"""Energon's index for a folder of shards (docs/FORMAT.md §5): `.tar.idx` files, `.info.json`,
`split.yaml`, `index.sqlite` and `index.uuid`, identical to what `energon prepare` writes and
built by the Rust core in a fraction of the time. What was asked (split, exclusions) is recorded
in `.shardcook/finalize.json` and split.yaml, so a later finalize without arguments keeps it."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from shardcook.braces import BRACE_CHARS
from shardcook.dataset import metadata
from shardcook.dataset.arguments import check_index_arguments
from shardcook.dataset.index import duplicates
from shardcook.dataset.index.splits import (
    Splits,
    check_parts,
    collapse,
    literal_pattern,
    parse_ratio,
    parts_by_name,
    split_by_patterns,
    split_by_ratio,
)
from shardcook.dataset.location import dataset_view
from shardcook.dataset.media import records as mediarecords
from shardcook.dataset.media import tables as mediatables
from shardcook.dataset.media.meta import MediaFilter
from shardcook.dataset.undo import finish_interrupted, undone_on_failure
from shardcook.dataset.view import DatasetView
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts import by_encoding
from shardcook.layouts.names import INDEX_SQLITE, INFO_JSON, INFO_YAML, META_DIR

log = logging.getLogger(__name__)

#: Characters a shard name may not hold: split.yaml's lists are brace-expanded by Energon.


@dataclass
class IndexResult:
    """What `build_index` wrote."""

    #: The dataset folder, or its URL.
    directory: Path | str
    shard_counts: dict[str, int]
    splits: dict[str, list[str]]
    part_names: list[str]
    warnings: list[str] = field(default_factory=list)
    #: Wall time of indexing (scan, .tar.idx, sqlite, metadata), without validation.
    seconds: float = 0.0
    #: How many media files a media filter recorded (None: none was asked).
    media_entries: int | None = None

    @property
    def num_samples(self) -> int:
        return sum(self.shard_counts.values())


#: The file names Energon takes for shards.
_SHARD_SUFFIXES = (".tar", ".tgz")


def energon_order(name: str) -> list[str]:
    """The sort key of Energon's shard order, a sorted glob's: path by path component."""
    return name.split("/")


def compile_excludes(exclude: Sequence[str]) -> list[re.Pattern[str]]:
    """`--exclude` regexes, compiled; a string where a list belongs is refused."""
    if isinstance(exclude, str) or not all(isinstance(p, str) for p in exclude):
        raise ConfigError(
            f"exclude must be a list of patterns, not {exclude!r}; write exclude=[{exclude!r}]"
            if isinstance(exclude, str) else "exclude must be a list of pattern strings"
        )
    patterns = []
    for pattern in exclude:
        try:
            patterns.append(re.compile(pattern))
        except re.error as e:
            raise ConfigError(
                f"--exclude {pattern!r} is not a valid regular expression ({e})"
            ) from None
    return patterns


def list_shards(directory: Path, exclude: Sequence[str] = ()) -> list[str]:
    """Shard paths relative to `directory`, in Energon's order (sorted `**/*.tar`, `**/*.tgz`),
    minus those matching any `exclude` regex (searched anywhere in the path, as Energon does)."""
    patterns = compile_excludes(exclude)
    names = []
    # What `directory.glob("**/*.tar")` finds (any entry of that name; links to folders are not
    # entered), without its cost per path: a folder of 10,000 shards is listed in a blink.
    for folder, dirs, files in os.walk(directory):
        rel = os.path.relpath(folder, directory)
        names += [name if rel == "." else f"{rel}/{name}" for name in (*dirs, *files)
                  if name.endswith(_SHARD_SUFFIXES)]
    names.sort(key=energon_order)
    return [n for n in names if not any(p.search(n) for p in patterns)]


def excluded_shards(directory: Path, exclude: Sequence[str]) -> list[str]:
    """The shard paths that `exclude` leaves out."""
    kept = set(list_shards(directory, exclude))
    return [n for n in list_shards(directory) if n not in kept]


#: What a path is, by its mode, when it is not a regular file.
_NOT_FILES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
              (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _not_a_file(path: Path) -> str | None:
    """What `path` is when it is not a regular file nor a link to one (`a FIFO`, `a link to
    /dev/zero, a device`, ...), found from its metadata alone; None for a regular file."""
    link = f"a link to {os.readlink(path)}, " if path.is_symlink() else ""
    try:
        mode = path.stat().st_mode
    except OSError as e:  # a link to nothing, a loop of links, no permission
        return f"{link}which cannot be reached ({e.strerror or e})"
    kind = next((k for test, k in _NOT_FILES if test(mode)), None)
    return None if stat.S_ISREG(mode) else f"{link}{kind or 'not a regular file'}"


def shard_name_problem(root: Path, name: str) -> str | None:
    """Why `name`, a path Energon reads as a shard because of its ending, cannot be one: what
    it is and what to do with it; None for a fine shard. Nothing is opened, so a FIFO or a device
    is never read."""
    what = _not_a_file(root / name)
    if what is not None:
        return (f"{root / name} is {what}, not a shard, yet its name makes Energon read it as "
                "one; remove it or rename it (or leave it out with --exclude)")
    if BRACE_CHARS.search(name):
        plain = re.sub(r"[{}\\,]", "_", name)
        return (f"shard {name!r} has a brace or backslash in its name, which Energon's split.yaml "
                f"would brace-expand into other names; rename it (e.g. to {plain!r})")
    return None


def _check_shard_names(root: Path, shards: Sequence[str]) -> None:
    """Refuses names Energon would misread, before anything is written."""
    for name in shards:
        problem = shard_name_problem(root, name)
        if problem is not None:
            raise DatasetError(problem)


@dataclass(frozen=True)
class _Request:
    """What to index, after filling unspecified arguments from what an earlier finalize recorded."""

    record: metadata.FinalizeRecord
    split_parts: dict[str, str] | None
    ratio: tuple[float, float, float]


def _recorded(root: Path, force: bool) -> tuple[metadata.FinalizeRecord | None, list[str]]:
    """The earlier finalize's record, else one rebuilt from split.yaml; a damaged file is passed
    over with a warning only when rebuilding (`force`)."""
    warnings: list[str] = []
    readers: tuple[Callable[[Path], object], ...] = (
        metadata.read_finalize_record, metadata.read_split_yaml)
    for read in readers:
        try:
            found = read(root)
        except DatasetError as e:
            if not force:
                raise
            warnings.append(f"{e}; ignored")
            continue
        if isinstance(found, metadata.FinalizeRecord):
            return found, warnings
        if isinstance(found, metadata.SplitYaml):
            return _from_split_yaml(found), warnings
    return None, warnings


def _from_split_yaml(split_yaml: metadata.SplitYaml) -> metadata.FinalizeRecord:
    """The request split.yaml records: its split parts and exclusions as exact names."""
    parts = {name: literal_pattern(names) for name, names in split_yaml.parts.items() if names}
    exclude = [f"^{literal_pattern([name])}" for name in split_yaml.exclude]
    return metadata.FinalizeRecord(exclude=exclude, split_parts=parts or None)


def _resolve(
    root: Path,
    encoding: str | None,
    split: Sequence[float] | str | None,
    split_parts: Mapping[str, str] | None,
    shuffle_seed: int | None,
    exclude: Sequence[str] | None,
    sqlite: bool,
    force: bool,
) -> tuple[_Request, list[str]]:
    if split_parts is not None and not (
        isinstance(split_parts, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in split_parts.items())
    ):
        raise ConfigError(f"split_parts must map split names to patterns, not {split_parts!r}")
    if exclude is not None:
        compile_excludes(exclude)
    previous, warnings = _recorded(root, force) if (
        exclude is None or (split is None and split_parts is None)) else (None, [])
    if exclude is None:
        exclude = previous.exclude if previous else []
    if split is None and split_parts is None and previous is not None:
        split_parts, shuffle_seed = previous.split_parts, previous.shuffle_seed
        split = previous.split
    elif split is None and split_parts is None:
        split_parts = parts_by_name(list_shards(root, exclude))
    ratio = parse_ratio(split if split is not None else (1, 0, 0))
    record = metadata.FinalizeRecord(
        exclude=list(exclude),
        encoding=encoding if encoding is not None or previous is None else previous.encoding,
        split=None if split_parts else list(ratio),
        split_parts=dict(split_parts) if split_parts else None,
        shuffle_seed=shuffle_seed,
        sqlite=sqlite,
    )
    return _Request(record, record.split_parts, ratio), warnings


def lost_shards(root: Path, shards: Sequence[str]) -> list[str]:
    """The shards the run that wrote `root` recorded that are neither among `shards` nor in the
    folder: lost since the run."""
    present = set(shards)
    return [s for s in metadata.recorded_shards(root)
            if s not in present and not os.path.lexists(root / s)]


def _split(shards: list[str], request: _Request, lost: Sequence[str]) -> Splits:
    """The splits; a ratio is cut over the shards present and those `lost` (left out or not), so
    a lost shard moves no other shard into another split."""
    if request.split_parts:
        splits = split_by_patterns(shards, request.split_parts)
        layout = by_encoding(request.record.encoding) if request.record.encoding else None
        check_parts(splits.parts, need_train=not (layout and layout.split_folders))
        return splits
    order = sorted([*shards, *lost], key=energon_order)
    cut = split_by_ratio(order, request.ratio, request.record.shuffle_seed)
    present = set(shards)
    warnings = [f"shard {name}, which the run recorded, is missing; the other shards keep the "
                "split the run gave them" for name in lost]
    return Splits({name: [s for s in names if s in present] for name, names in cut.parts.items()},
                  cut.warnings + warnings)


@dataclass(frozen=True)
class IndexPlan:
    """An index checked and ready to write: every refusal happened while making it."""

    view: DatasetView
    shards: list[str]
    splits: Splits
    #: Shards left out by the exclusions, brace-collapsed for split.yaml.
    left_out: list[str]
    record: metadata.FinalizeRecord
    warnings: list[str]
    force: bool
    #: The media metadata to record anew (None: keep the media tables there are).
    media: MediaFilter | None = None
    #: Rewrite only the `.tar.idx` files, the sample rows and index.uuid of `.info.json`'s shards.
    tar_index_only: bool = False
    #: Write index.sqlite's samples and sample_parts tables (media tables are kept either way).
    sample_tables: bool = True

    @property
    def root(self) -> Path:
        return self.view.root


def plan_index(
    view: DatasetView,
    *,
    split: Sequence[float] | str | None = None,
    split_parts: Mapping[str, str] | None = None,
    shuffle_seed: int | None = None,
    exclude: Sequence[str] | None = None,
    sqlite: bool = True,
    sample_tables: bool = True,
    tar_index_only: bool = False,
    fix_duplicates: bool = False,
    force: bool = False,
    encoding: str | None = None,
    media: MediaFilter | None = None,
) -> IndexPlan:
    """Checks everything `build_index` is asked (same arguments, on the dataset's view) and
    writes nothing, except that `fix_duplicates` renames the shards' members first when their keys
    repeat across shards; `encoding` is what finalize records for dataset.yaml."""
    check_index_arguments(split, shuffle_seed, exclude, sqlite, force, sample_tables,
                          tar_index_only, fix_duplicates)
    if media is not None and not sqlite:
        raise ConfigError("--media-metadata-by-* records the media metadata in index.sqlite; "
                          "leave out --no-sqlite")
    root = view.root
    metadata.refuse_links(root)
    if fix_duplicates and isinstance(view.location, str):  # a URL's view: shards in a bucket
        raise ConfigError("--fix-duplicates rewrites shards in place, which objects in a bucket "
                          "cannot be; fix a local copy and upload it")
    if tar_index_only:
        return _plan_tar_index(view, split, split_parts, shuffle_seed, exclude, sqlite,
                               sample_tables, fix_duplicates, media)
    meta = root / META_DIR
    if not force and meta.exists() and not meta.is_dir():
        metadata.prepare_meta_dir(root, repair=False)  # raises: names the file and the fix
    if not force and ((meta / INFO_JSON).exists() or (meta / INFO_YAML).exists()):
        raise DatasetError(
            f"{root} is already indexed ({META_DIR}/{metadata.info_file(root)} exists); pass "
            "force=True (--force) to rebuild its index"
        )
    request, warnings = _resolve(root, encoding, split, split_parts, shuffle_seed, exclude,
                                 sqlite and sample_tables, force)
    if not sqlite:
        _refuse_dropping_media(root)
    shards = list_shards(root, request.record.exclude)
    if not shards:
        raise DatasetError(
            f"no .tar shards found in {root}" + (" after --exclude" if request.record.exclude
                                                 else "")
        )
    _check_shard_names(root, shards)
    if fix_duplicates:
        _fix_duplicates(root, shards)
    splits = _split(shards, request, lost_shards(root, shards))
    left_out = collapse(excluded_shards(root, request.record.exclude))
    return IndexPlan(view, shards, splits, left_out, request.record,
                     warnings + splits.warnings, force, media,
                     sample_tables=sample_tables)


def _fix_duplicates(root: Path, shards: Sequence[str]) -> None:
    if duplicates.fix_duplicates(root, shards):
        log.warning("keys repeated across shards: every member of the %d shards was renamed "
                    "in place to <shard path>/<name>", len(shards))


def _plan_tar_index(view: DatasetView, split: object, split_parts: object, shuffle_seed: object,
                    exclude: Sequence[str] | None, sqlite: bool, sample_tables: bool,
                    fix_duplicates: bool, media: MediaFilter | None) -> IndexPlan:
    """`tar_index_only`: the shards `.info.json` lists (minus `exclude`), nothing else asked."""
    root = view.root
    given = [flag for flag, value in (("--split", split), ("--split-parts", split_parts),
                                      ("--shuffle-seed", shuffle_seed), ("--no-sqlite", not sqlite),
                                      ("--no-sample-tables", not sample_tables),
                                      ("--media-metadata-by-*", media))
             if value is not None and value is not False]
    if given:
        raise ConfigError(f"--tar-index-only rewrites the shard index of the dataset as it is "
                          f"indexed, so {given[0]} has no meaning with it; leave it out, or "
                          "rebuild the whole index with --force instead")
    info = metadata.read_info_json(root)
    if info is None:
        raise DatasetError(f"{root} has no {META_DIR}/{INFO_JSON} listing its shards, which "
                           "--tar-index-only reindexes; index it without --tar-index-only first")
    patterns = compile_excludes(exclude or [])
    shards = [s for s in info.shard_counts if not any(p.search(s) for p in patterns)]
    if not shards:
        raise DatasetError(f"{META_DIR}/{info.file} lists no shard to index"
                           + (" after --exclude" if patterns else ""))
    missing = [s for s in shards if not (root / s).is_file()]
    if missing:
        raise DatasetError(f"shard {missing[0]} is listed in {META_DIR}/{info.file} but missing "
                           f"({len(missing)} such); run `shardcook finalize --force {root}` to "
                           "index the shards that are there")
    _check_shard_names(root, shards)
    if fix_duplicates:
        _fix_duplicates(root, shards)
    record = metadata.read_finalize_record(root) or metadata.FinalizeRecord()
    return IndexPlan(view, shards, Splits({}), [], record, [], True, tar_index_only=True)


def _refuse_dropping_media(root: Path) -> None:
    """Refuses `sqlite=False` where index.sqlite holds Energon's media metadata, which removing
    the file would delete."""
    path = root / META_DIR / INDEX_SQLITE
    entries = mediatables.entry_count(path)
    if entries is not None:
        raise ConfigError(
            f"{path} holds Energon's media metadata ({entries:,} entries), which --no-sqlite "
            "would delete with the file; leave out --no-sqlite (finalize keeps the media "
            "tables), or delete the file first if you do not want them"
        )


def _write_media(view: DatasetView, shards: Sequence[str], sqlite_path: Path,
                 media: MediaFilter) -> int:
    """Records the media metadata of the members of `shards` in the new index at
    `sqlite_path`, in place of any the old one had, as `energon prepare --media-metadata-by-*`
    does (a shard's rows from the record of the run that wrote it, where it has one: no shard
    read); returns how many."""
    rows = mediarecords.dataset_rows(view, shards, media)
    return mediatables.write(sqlite_path, rows, media.strategy, media.patterns_text, reset=True)


def write_index(plan: IndexPlan) -> IndexResult:
    """Writes the index `plan_index` checked."""
    root, shards = plan.root, plan.shards
    sqlite = plan.record.sqlite or plan.tar_index_only
    energon_version = version("megatron-energon")  # recorded in .info.json, as Energon does
    start = time.perf_counter()
    meta = metadata.prepare_meta_dir(root, repair=plan.force)
    sqlite_path = meta / INDEX_SQLITE
    metadata.remove_broken(sqlite_path)
    with contextlib.nullcontext() if plan.media else mediatables.kept(sqlite_path):
        counted, part_names = plan.view.index_shards(shards, sqlite_path if sqlite else None)
        if not sqlite:
            sqlite_path.unlink(missing_ok=True)  # a stale index would disagree with the shards
            if not plan.sample_tables:  # an empty index, for the media tables to be kept in
                sqlite3.connect(sqlite_path).close()
    if not plan.sample_tables and mediatables.entry_count(sqlite_path) is None:
        sqlite_path.unlink(missing_ok=True)
    counts = dict(counted)
    empty = [name for name, n in counts.items() if n == 0]
    if empty:
        for name in shards:
            Path(f"{root / name}.idx").unlink(missing_ok=True)
        raise DatasetError(
            f"shard {empty[0]} holds no samples ({len(empty)} such); Energon cannot index empty "
            "shards: remove them or leave them out with --exclude"
        )
    media_entries = None if plan.media is None else _write_media(plan.view, shards,
                                                                 sqlite_path, plan.media)
    for warning in plan.warnings:
        log.warning(warning)
    metadata.write_index_uuid(root)
    if plan.tar_index_only:
        _keep_info(root, counts)
    else:
        metadata.write_info_json(root, energon_version, counts)
        collapsed = {name: collapse(names) for name, names in plan.splits.parts.items()}
        metadata.write_split_yaml(root, collapsed, plan.left_out)
        metadata.write_finalize_record(root, plan.record)
    seconds = time.perf_counter() - start
    return IndexResult(plan.view.location, counts, plan.splits.parts, part_names,
                       list(plan.warnings), seconds, media_entries)


def _keep_info(root: Path, counts: Mapping[str, int]) -> None:
    """`tar_index_only` leaves `.info.json` as it is (converting an older Energon's `.info.yaml`
    to it, as `energon prepare --tar-index-only` does), so a shard whose count changed is
    refused: its counts would disagree with the new `.tar.idx`."""
    info = metadata.read_info_json(root)
    assert info is not None  # plan_index read it
    changed = [(s, n) for s, n in counts.items() if info.shard_counts.get(s) != n]
    if changed:
        shard, n = changed[0]
        raise DatasetError(
            f"shard {shard} now holds {n} samples but {META_DIR}/{info.file} says "
            f"{info.shard_counts[shard]}, which --tar-index-only does not rewrite; run "
            f"`shardcook finalize --force {root}` to rebuild the whole index")
    if info.file == INFO_YAML:
        metadata.convert_info_yaml(root)


def build_index(
    directory: str | Path,
    *,
    split: Sequence[float] | str | None = None,
    split_parts: Mapping[str, str] | None = None,
    shuffle_seed: int | None = None,
    exclude: Sequence[str] | None = None,
    sqlite: bool = True,
    sample_tables: bool = True,
    tar_index_only: bool = False,
    fix_duplicates: bool = False,
    force: bool = False,
    scratch_dir: str | Path | None = None,
) -> IndexResult:
    """Writes `.tar.idx` files and `.nv-meta/{.info.json,split.yaml,index.sqlite,index.uuid}`.

    Args:
        directory: The dataset folder, or its URL (`msc://PROFILE/path`, `s3://bucket/path`:
            shards are read a few at a time through a scratch folder, the index uploaded);
            every `**/*.tar` under it is a shard.
        split: train,val,test ratios (ignored when `split_parts` is given). When neither is
            given, the split an earlier finalize recorded is kept; else shards named by split
            (Megatron-Bridge's `train-`, `val-`, `test-` prefixes) go to that split; else 1,0,0.
        split_parts: Split name to shard-path pattern (brace-expanded, then `re.match`).
        shuffle_seed: Shuffle shards with `random.Random(seed)` before cutting ratios.
        exclude: Regexes; matching shard paths are left out of the dataset. None keeps the
            exclusions an earlier finalize recorded.
        sqlite: Also write index.sqlite (only key lookups need it; training does not).
        sample_tables: Write index.sqlite's samples and sample_parts tables; False is Energon's
            `--no-sample-tables`: the `.tar.idx` files, `.info.json` and split.yaml only, and
            index.sqlite only when it holds media tables, which are kept.
        tar_index_only: Rewrite only the `.tar.idx` files, the sample rows (media tables kept)
            and index.uuid of the shards `.info.json` lists (minus `exclude`), as
            `energon prepare --tar-index-only`; a shard whose count changed is refused.
        fix_duplicates: When a key is in two shards, first rename every member of every shard
            in place to `<shard path>/<name>`, as `energon prepare --fix-duplicates`.
        force: Rebuild an already indexed folder, repairing damaged metadata.
        scratch_dir: Where a URL's files are handled (default: the temporary folder).

    Raises:
        DatasetError: no shards, already indexed, an unreadable shard, a duplicate key (the
            metadata is then as it was).
        ConfigError: a bad ratio or split pattern, an empty or missing train split, a shard in
            two splits.
    """
    with dataset_view(directory, scratch_dir=scratch_dir) as view:
        finish_interrupted(view.root)
        plan = plan_index(view, split=split, split_parts=split_parts, shuffle_seed=shuffle_seed,
                          exclude=exclude, sqlite=sqlite, sample_tables=sample_tables,
                          tar_index_only=tar_index_only, fix_duplicates=fix_duplicates,
                          force=force)
        with undone_on_failure(plan.root, plan.shards):
            result = write_index(plan)
        view.publish()
        return result
