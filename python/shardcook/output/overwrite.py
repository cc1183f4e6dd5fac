"""`--overwrite`'s rules: what to delete of the earlier run in an output folder, and nothing else
(`RunFolder.plan_overwrite` and `RunFolder.clear` apply them).

The earlier run's manifest and unit markers name its shards; the metadata files finalize writes,
encode's empty encodings and shardcook's own `.shardcook/` are known by name, and so, when the
manifest says the run wrote NeMo AutoModel's cache (`encode --layout automodel`), are that cache's
files: `metadata.json`, `metadata_shard_NNNN.json` and the `<md5>.pt` / `.meta` files in its
`WxH/` folders. Everything is decided before anything is deleted: a file named like a shard that
no record names, or a `.tar` finalize would index, refuses the whole overwrite.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from shardcook.dataset.undo import UNDO_PREFIX
from shardcook.errors import ConfigError
from shardcook.layouts.names import (
    CLIP_EMPTY,
    DATASET_YAML,
    EMPTY_ENCODINGS_DIR,
    INDEX_SQLITE,
    INDEX_SUFFIX,
    INDEX_UUID,
    INFO_JSON,
    MANIFEST_JSON,
    META_DIR,
    OURS_DIR,
    RUN_LOCK,
    SHARD_SUFFIX,
    SPLIT_YAML,
    T5_EMPTY,
    is_shard_name,
)

log = logging.getLogger(__name__)

#: The files shardcook writes inside each of its folders in a dataset.
_OWN_FILES = {
    META_DIR: frozenset({DATASET_YAML, SPLIT_YAML, INFO_JSON, INDEX_SQLITE, INDEX_UUID}),
    EMPTY_ENCODINGS_DIR: frozenset({T5_EMPTY, CLIP_EMPTY}),
}
#: How many names a refusal or a log line lists.
_SHOWN = 5
#: The files of NeMo AutoModel's cache an automodel run writes at the top of its folder, its
#: bucket folders and the cache files in them (`layouts.automodel`).
_CACHE_FILE = re.compile(r"^(metadata\.json|metadata_shard_\d{4,}\.json)$")
_CACHE_FOLDER = re.compile(r"^\d+x\d+$")
_CACHE_ENTRY = re.compile(r"^[0-9a-f]{32}\.(pt|meta)$")
#: The manifest's encoding of a run that writes that cache.
CACHE_ENCODING = "automodel"


@dataclass
class OverwritePlan:
    """What `--overwrite` deletes, decided before anything is."""

    #: Files the earlier run wrote, and `.shardcook/` (a folder, removed whole).
    remove: list[Path] = field(default_factory=list)
    #: shardcook's folders left empty by `remove`, removed after it.
    folders: list[Path] = field(default_factory=list)
    #: Entries kept (relative to the output folder): files shardcook did not write.
    keep: list[str] = field(default_factory=list)


def _shard_like(name: str) -> bool:
    """Named like a shard shardcook writes (`000000.tar`, chatml's `train-shard-000000.tar`) or
    Energon's `.tar.idx` beside one: only those a record names are deleted."""
    return is_shard_name(name.removesuffix(".idx"))


def _listed(names: list[str]) -> str:
    more = len(names) - _SHOWN
    return ", ".join(names[:_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _described(out: Path, paths: list[Path]) -> str:
    """`paths` in a few words (`_described_names`)."""
    return _described_names([str(p.relative_to(out)) + ("/" if p.is_dir() else "")
                             for p in paths])


def _described_names(names: list[str]) -> str:
    """`names` in a few words: the shards listed (the first few), their `.tar.idx` counted, and
    every other entry (a few metadata files and `.shardcook/`)."""
    shards = [n for n in names if n.endswith(SHARD_SUFFIX)]
    indexes = [n for n in names if n.endswith(INDEX_SUFFIX)]
    words = [f"{len(shards)} shard(s) ({_listed(shards)})"] if shards else []
    words += [f"{len(indexes)} .tar.idx"] if indexes else []
    words += [n for n in names if n not in shards and n not in indexes]
    return ", ".join(words)


def _first_tar(path: Path) -> Path | None:
    """`path` itself if it is a shard file finalize would index, else the first one below it."""
    if not path.is_dir():
        return path if path.name.endswith(SHARD_SUFFIX) else None
    return next(iter(sorted(path.glob(f"**/*{SHARD_SUFFIX}"))), None)


def _keep(plan: OverwritePlan, out: Path, path: Path) -> None:
    """Keeps `path`, unless it is or holds a tar the next finalize would index into the dataset."""
    foreign = _first_tar(path)
    if foreign is not None:
        _refuse_foreign_tar(str(out), str(foreign))
    plan.keep.append(str(path.relative_to(out)))


def _refuse_foreign_tar(out: str, foreign: str) -> NoReturn:
    raise ConfigError(
        f"Output folder {out!r} holds {foreign!r}, a tar shardcook did not write that finalize "
        "would index; move it away, then rerun (nothing was deleted)."
    )


def _refuse_unrecorded(out: str, unrecorded: list[str]) -> NoReturn:
    them = "it" if len(unrecorded) == 1 else "them"
    raise ConfigError(
        f"Output folder {out!r} holds {_listed(unrecorded)}, named like shardcook's shards but "
        f"not written by the run recorded there; move {them} away, then rerun (nothing was "
        "deleted)."
    )


def _plan_own_folder(plan: OverwritePlan, out: Path, folder: Path) -> None:
    """shardcook's files in `folder` are removed, any other kept (and the folder with them)."""
    own = _OWN_FILES[folder.name]
    kept = len(plan.keep)
    with os.scandir(folder) as it:
        for entry in sorted(it, key=lambda e: e.name):
            if entry.name in own and entry.is_file(follow_symlinks=False):
                plan.remove.append(Path(entry.path))
            else:
                _keep(plan, out, Path(entry.path))
    if len(plan.keep) == kept:
        plan.folders.append(folder)


def _plan_shard_folder(plan: OverwritePlan, out: Path, folder: Path, shards: set[str],
                       unrecorded: list[str]) -> None:
    """A split's folder of recorded shards (ingest's `train/`): those shards, their `.tar.idx`
    and the writer's `.shardcook/` are removed, any other entry kept (and the folder with it)."""
    kept = len(plan.keep)
    with os.scandir(folder) as it:
        for entry in sorted(it, key=lambda e: e.name):
            name = f"{folder.name}/{entry.name}"
            writer_tmp = entry.name == OURS_DIR and entry.is_dir(follow_symlinks=False)
            shard = name.removesuffix(".idx") in shards and entry.is_file(follow_symlinks=False)
            if writer_tmp or shard:
                plan.remove.append(Path(entry.path))
            elif _shard_like(entry.name):
                unrecorded.append(name)
            else:
                _keep(plan, out, Path(entry.path))
    if len(plan.keep) == kept:
        plan.folders.append(folder)


def _wrote_cache(out: Path) -> bool:
    """Whether the earlier run's manifest says it wrote NeMo AutoModel's cache into `out`."""
    try:
        manifest = json.loads((out / OURS_DIR / MANIFEST_JSON).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("encoding") == CACHE_ENCODING


def _plan_cache_folder(plan: OverwritePlan, out: Path, folder: Path) -> None:
    """A bucket folder of the cache: its cache files are removed, any other entry kept (and the
    folder with it)."""
    kept = len(plan.keep)
    with os.scandir(folder) as it:
        for entry in sorted(it, key=lambda e: e.name):
            if _CACHE_ENTRY.match(entry.name) and entry.is_file(follow_symlinks=False):
                plan.remove.append(Path(entry.path))
            else:
                _keep(plan, out, Path(entry.path))
    if len(plan.keep) == kept:
        plan.folders.append(folder)


def _holds_records(ours: Path) -> bool:
    """Whether `.shardcook/` holds anything but the lock (of the run that overwrites, or of a
    killed one): a new folder holds only the lock, and there is no earlier run to delete."""
    with os.scandir(ours) as it:
        return any(entry.name != RUN_LOCK for entry in it)


def plan_deletions(out: Path, shards: set[str]) -> OverwritePlan:
    """What `--overwrite` removes from the shardcook run in `out` and what it keeps, deleting
    nothing. Removed: `shards` (those the run's manifest or unit markers name, at the top or in
    a split's folder) and their `.tar.idx`, finalize's metadata files in `.nv-meta/`, encode's
    files in `empty_encodings/`, an automodel run's cache (its metadata files and the cache
    files in its `WxH/` folders), `.shardcook/` (all but the lock of the run that overwrites)
    and the undo folders of killed finalizes (`dataset/undo.py`: the next finalize would put
    the earlier run's metadata and `.tar.idx` back from them); every other file is kept.

    Raises:
        ConfigError: `out` holds files named like shards that are not in `shards`, or a tar
            anywhere that finalize would index.
    """
    plan = OverwritePlan()
    unrecorded: list[str] = []
    cache = _wrote_cache(out)
    with os.scandir(out) as it:
        for entry in sorted(it, key=lambda e: e.name):
            path, own_dir = Path(entry.path), entry.is_dir(follow_symlinks=False)
            if cache and own_dir and _CACHE_FOLDER.match(entry.name):
                _plan_cache_folder(plan, out, path)
            elif (cache and _CACHE_FILE.match(entry.name)
                  and entry.is_file(follow_symlinks=False)):
                plan.remove.append(path)
            elif entry.name == OURS_DIR and own_dir:
                if _holds_records(path):
                    plan.remove.append(path)
            elif entry.name.startswith(UNDO_PREFIX) and own_dir:
                plan.remove.append(path)
            elif entry.name in _OWN_FILES and own_dir:
                _plan_own_folder(plan, out, path)
            elif own_dir and any(s.startswith(f"{entry.name}/") for s in shards):
                _plan_shard_folder(plan, out, path, shards, unrecorded)
            elif (entry.name.removesuffix(".idx") in shards
                  and entry.is_file(follow_symlinks=False)):
                plan.remove.append(path)
            elif _shard_like(entry.name):
                unrecorded.append(entry.name)
            else:
                _keep(plan, out, path)
    if unrecorded:
        _refuse_unrecorded(str(out), unrecorded)
    return plan


def say_kept(out: object, kept: list[str]) -> None:
    """Warns of the files `--overwrite` kept in `out` because shardcook did not write them."""
    if kept:
        log.warning("--overwrite kept %d file(s) shardcook did not write in %s: %s", len(kept),
                    out, ", ".join(kept[:_SHOWN]) + (", ..." if len(kept) > _SHOWN else ""))


def delete_planned(out: Path, plan: OverwritePlan) -> None:
    """Deletes what `plan` removes from `out`, saying what."""
    if plan.remove:
        log.info("--overwrite deletes what the earlier run wrote in %s: %s", out,
                 _described(out, plan.remove))
    for path in plan.remove:
        if path == out / OURS_DIR and path.is_dir() and not path.is_symlink():
            _empty_ours(path)
        else:
            _remove(path)
    for folder in plan.folders:
        folder.rmdir()


def _empty_ours(ours: Path) -> None:
    """Removes everything in `.shardcook/` but the lock the overwriting run holds there."""
    for entry in sorted(ours.iterdir()):
        if entry.name != RUN_LOCK:
            _remove(entry)


def _remove(path: Path) -> None:
    """Removes a file, a link (never what it points to) or a folder with what it holds."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


@dataclass
class ObjectPlan:
    """What `--overwrite` deletes in a folder in object storage (names relative to it)."""

    remove: list[str] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)


def plan_object_deletions(out: str, names: Iterable[str], shards: set[str],
                          cache: bool = False) -> ObjectPlan:
    """`plan_deletions`' rules for the folder `out` in object storage, whose objects are `names`
    (relative, `/`-separated; a store has no folders, so `.shardcook/` is its objects); `cache`:
    the earlier run's manifest says it wrote NeMo AutoModel's cache there.

    Raises:
        ConfigError: as `plan_deletions`; the tar is named by its URL.
    """
    plan = ObjectPlan()
    unrecorded: list[str] = []
    for name in sorted(names):
        if name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
            plan.keep.append(name)  # a key no client should resolve for us: never deleted
            continue
        top, nested, rest = name.partition("/")
        if top == OURS_DIR and rest == RUN_LOCK:
            continue  # the lease of the run that overwrites
        ours = top == OURS_DIR or rest in _OWN_FILES.get(top, ())
        if cache and (_CACHE_FILE.match(name) or (
                _CACHE_FOLDER.match(top) and _CACHE_ENTRY.match(rest))):
            plan.remove.append(name)
            continue
        if (nested and ours) or (not nested and name.removesuffix(".idx") in shards):
            plan.remove.append(name)
        elif not nested and _shard_like(name):
            unrecorded.append(name)
        elif name.endswith(SHARD_SUFFIX):
            _refuse_foreign_tar(out, f"{out}/{name}")
        else:
            plan.keep.append(name)
    if unrecorded:
        _refuse_unrecorded(out, unrecorded)
    return plan


def delete_planned_objects(out: str, plan: ObjectPlan, delete: Callable[[str], None]) -> None:
    """Deletes what `plan` removes from `out` with `delete(name)`, saying what."""
    ours = f"{OURS_DIR}/"
    shown = [n for n in plan.remove if not n.startswith(ours)]
    records = [n for n in plan.remove if n.startswith(ours)]
    if plan.remove:
        log.info("--overwrite deletes what the earlier run wrote in %s: %s", out,
                 _described_names(shown + ([ours] if records else [])))
    # the records last: deletes that stop half-way leave every remaining shard recorded, so
    # the same command can finish them
    for name in shown + records:
        delete(name)
