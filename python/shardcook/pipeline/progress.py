"""Per-unit progress markers in `.shardcook/progress/` (resume) and the output folder's setup."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from shardcook.errors import ConfigError
from shardcook.layouts.names import (
    EMPTY_ENCODINGS_DIR,
    MANIFEST_JSON,
    META_DIR,
    OURS_DIR,
    PROGRESS_DIR,
    SHARD_SUFFIX,
)

OURS = OURS_DIR
PROGRESS = PROGRESS_DIR


def write_json_atomic(path: Path, obj: Any) -> None:
    """Writes JSON to `path` via a fsync'd temporary file and a rename: all or nothing."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def marker_path(out: Path, unit: int) -> Path:
    return out / OURS / PROGRESS / f"{unit:06d}.json"


def write_marker(out: Path, unit: int, record: dict[str, Any]) -> None:
    """Records a finished unit (after its shard got its final name)."""
    write_json_atomic(marker_path(out, unit), record)


def read_marker(out: Path, unit: int) -> dict[str, Any] | None:
    """The unit's record if the unit is done (marker readable and its shard present), else None."""
    path = marker_path(out, unit)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    shard = record.get("shard")
    if shard is not None and not (isinstance(shard, str) and (out / shard).is_file()):
        return None
    return record


def is_ours(out: Path) -> bool:
    """True when `out` is missing, empty, or holds a shardcook run (its manifest or only `.shardcook/`)."""
    if not out.exists():
        return True
    entries = os.listdir(out)
    if not entries:
        return True
    if (out / OURS / MANIFEST_JSON).is_file():
        return True
    return entries == [OURS]


def check_output(out: Path) -> None:
    """Raises ConfigError unless `out` can be created and written and holds nothing foreign."""
    _check_not_a_file(out)
    if not is_ours(out):
        raise ConfigError(
            f"Output folder {str(out)!r} holds files that are not a shardcook dataset; "
            "choose a new or empty folder."
        )
    check_writable(out)


def _check_not_a_file(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output-dir {str(out)!r} is a file; name a folder.")


def check_writable(out: Path) -> None:
    """Creates `out/.shardcook/progress/` and proves it writable, or raises ConfigError."""
    try:
        (out / OURS / PROGRESS).mkdir(parents=True, exist_ok=True)
        probe = out / OURS / f".probe{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"Output folder {str(out)!r} is not writable ({e.strerror or e}); "
            "choose a folder you can write to."
        ) from None


#: Top-level folders only shardcook writes into a dataset folder (encode's empty encodings too).
_OWN_DIRS = frozenset({OURS, META_DIR, EMPTY_ENCODINGS_DIR})
#: Shard files shardcook names: `000000.tar` (raw, encode) or `train-shard-000000.tar` (chatml),
#: and Energon's `.tar.idx` beside each.
_OWN_SHARD = re.compile(r"(?:[a-z]+-shard-)?\d{6}\.tar(?:\.idx)?")


def _is_own_entry(entry: os.DirEntry[str]) -> bool:
    if entry.name in _OWN_DIRS:
        return entry.is_dir(follow_symlinks=False)
    return bool(_OWN_SHARD.fullmatch(entry.name)) and entry.is_file(follow_symlinks=False)


def _first_tar(path: Path) -> Path | None:
    """`path` itself if it is a shard file finalize would index, else the first one below it."""
    if not path.is_dir():
        return path if path.name.endswith(SHARD_SUFFIX) else None
    return next(iter(sorted(path.glob(f"**/*{SHARD_SUFFIX}"))), None)


def plan_overwrite(out: Path) -> tuple[list[Path], list[str]]:
    """What `--overwrite` removes from `out` and what it keeps, deleting nothing.

    Only a folder that holds a shardcook run (or nothing) may be overwritten; in it, shardcook's
    own entries are removed (shards named like ours and their `.tar.idx`, `.nv-meta/`,
    `.shardcook/`, `empty_encodings/`) and every other file is kept. A kept `.tar` anywhere below
    `out` would be indexed into the new dataset by finalize, so it is refused instead.

    Returns:
        (paths to remove, names of the kept entries).

    Raises:
        ConfigError: `out` is a file, not a shardcook run, or holds a tar that is not ours.
    """
    _check_not_a_file(out)
    if not out.exists():
        return [], []
    if not is_ours(out):
        raise ConfigError(
            f"Output folder {str(out)!r} holds files that are not a shardcook dataset, so "
            "--overwrite deletes nothing there; choose a new or empty folder."
        )
    remove: list[Path] = []
    keep: list[str] = []
    with os.scandir(out) as it:
        for entry in sorted(it, key=lambda e: e.name):
            if _is_own_entry(entry):
                remove.append(Path(entry.path))
                continue
            keep.append(entry.name)
            foreign_tar = _first_tar(Path(entry.path))
            if foreign_tar is not None:
                raise ConfigError(
                    f"Output folder {str(out)!r} holds {str(foreign_tar)!r}, a tar shardcook did "
                    "not write that finalize would index; move it away, then rerun "
                    "(nothing was deleted)."
                )
    return remove, keep


def clear_output(out: Path) -> list[str]:
    """Removes what a previous shardcook run wrote, after checking everything (`plan_overwrite`);
    returns the names of the entries kept (files shardcook did not write)."""
    remove, keep = plan_overwrite(out)
    for path in remove:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return keep
