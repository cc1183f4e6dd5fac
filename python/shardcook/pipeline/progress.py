"""Per-unit progress markers in `.shardcook/progress/` (resume) and the output folder's setup
(`--overwrite`'s deletions are `pipeline/overwrite.py`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shardcook.errors import ConfigError
from shardcook.layouts.names import MANIFEST_JSON, OURS_DIR, PROGRESS_DIR

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
    check_not_a_file(out)
    if not is_ours(out):
        raise ConfigError(
            f"Output folder {str(out)!r} holds files that are not a shardcook dataset; "
            "choose a new or empty folder."
        )
    check_writable(out)


def check_not_a_file(out: Path) -> None:
    """Raises ConfigError when `out` exists and is not a folder."""
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
