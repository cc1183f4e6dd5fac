"""The demo's output folder: `shardcook demo` writes only into a new or empty folder, or one that
holds exactly what an earlier demo wrote there. The demo records what it wrote, file by file
with its sha256, in `.shardcook-demo.json`; a file that record does not name, or whose bytes
changed since, is a user's, and the demo refuses the folder instead of replacing it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from shardcook.errors import ConfigError
from shardcook.files import write_atomic

#: The demo's record of what it wrote in its folder.
RECORD = ".shardcook-demo.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _entries(root: Path) -> dict[str, Path]:
    """Every file and link below `root` (not the record), by path relative to `root`."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder, name)
            found[path.relative_to(root).as_posix()] = path
    found.pop(RECORD, None)
    return found


def _recorded(root: Path) -> dict[str, str] | None:
    """The record's sha256 by file, or None when it is missing, damaged or not a mapping."""
    try:
        files = json.loads((root / RECORD).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(files, dict) and all(isinstance(v, str) for v in files.values())):
        return None
    return files


def _is_the_demos(path: Path, sha256: str | None) -> bool:
    if sha256 is None or path.is_symlink() or not path.is_file():
        return False  # a FIFO or device would block the read
    try:
        return _sha256(path) == sha256
    except OSError:
        return False


def _refusal(root: Path, what: str) -> ConfigError:
    return ConfigError(
        f"{str(root)!r} holds {what}; the demo replaces what it wrote there, so give --output-dir "
        "a new or empty folder (nothing was changed)."
    )


def check_demo_folder(root: Path) -> None:
    """Raises ConfigError unless `root` is missing, empty, or holds only what an earlier demo
    wrote there, unchanged."""
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--output-dir {str(root)!r} is a file; name a folder for the demo.")
    if not root.exists():
        return
    with os.scandir(root) as it:
        if next(it, None) is None:
            return
    recorded = _recorded(root)
    if recorded is None:
        raise _refusal(root, f"files the demo did not write (it has no readable {RECORD})")
    for name, path in sorted(_entries(root).items()):
        if not _is_the_demos(path, recorded.get(name)):
            raise _refusal(root, f"{name}, which the demo did not write there or which changed "
                           "since")


def record_demo_folder(root: Path) -> None:
    """Records every file in `root` as the demo's (after `check_demo_folder` found only the
    demo's files there, everything in it is)."""
    files = {name: _sha256(path) for name, path in sorted(_entries(root).items())
             if not path.is_symlink()}
    write_atomic(root / RECORD, json.dumps({"files": files}, indent=1))
