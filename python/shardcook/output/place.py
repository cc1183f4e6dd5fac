"""Where a run may write: never inside shardcook's or Energon's own folders (`.shardcook/`,
`.nv-meta/`), and never inside another dataset, whose finalize and validate would then meet
this run's shards. Checked before anything is written, for a local folder and for a folder in
object storage."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from shardcook.errors import ConfigError
from shardcook.layouts.names import MANIFEST_JSON, META_DIR, OURS_DIR
from shardcook.storage import Remote
from shardcook.storage.store import Store

#: The folders a dataset keeps for Energon and for shardcook; nothing else goes inside them.
RESERVED_FOLDERS = (META_DIR, OURS_DIR)
#: What marks a folder as a dataset: Energon's metadata folder, or a shardcook run's manifest.
_RUN_MANIFEST = f"{OURS_DIR}/{MANIFEST_JSON}"


def reserved_folder(parts: Iterable[str]) -> str | None:
    """The first of `parts` (a path's segments) that is one of `RESERVED_FOLDERS`, else None."""
    return next((part for part in parts if part in RESERVED_FOLDERS), None)


def _inside_reserved(what: str, where: str, folder: str) -> ConfigError:
    return ConfigError(f"{what} {where!r} is inside a {folder} folder, which holds a dataset's "
                       "own records; choose a folder outside it.")


def _inside_dataset(what: str, where: str, dataset: str) -> ConfigError:
    return ConfigError(f"{what} {where!r} is inside the dataset {dataset!r}, whose finalize and "
                       "validate would then meet this run's shards; choose a folder outside it.")


def _is_dataset(folder: Path) -> bool:
    """`folder` holds `.nv-meta/` or a shardcook run's manifest (an unreadable folder does
    not count: nothing can be told about it)."""
    try:
        return (folder / META_DIR).is_dir() or (folder / _RUN_MANIFEST).is_file()
    except OSError:
        return False


def check_local_place(root: Path, what: str = "--output-dir") -> None:
    """Raises ConfigError when `root` (made absolute, links followed) is or lies inside a
    `.nv-meta`/`.shardcook` folder or inside a folder that is a dataset."""
    resolved = Path(os.path.realpath(root))
    folder = reserved_folder(resolved.parts)
    if folder is not None:
        raise _inside_reserved(what, str(root), folder)
    dataset = next((p for p in resolved.parents if _is_dataset(p)), None)
    if dataset is not None:
        raise _inside_dataset(what, str(root), str(dataset))


def check_store_place(store: Store, what: str = "--output-dir") -> None:
    """`check_local_place` for a folder in object storage: its path's segments, then each
    folder above it up to the bucket (or profile) root, one listing and one lookup each. A
    store with no folders above it (memory) is inside nothing.

    Raises:
        ConfigError: it is inside a reserved folder or a dataset.
        Exception: what the client raises when the store cannot be read (the caller's
            `_checked` turns it into one sentence).
    """
    if not isinstance(store, Remote):
        return
    folder = reserved_folder(store.segments)
    if folder is not None:
        raise _inside_reserved(what, store.url, folder)
    for above in store.above():
        if above.exists(_RUN_MANIFEST) or next(above.names(f"{META_DIR}/"), None) is not None:
            raise _inside_dataset(what, store.url, above.url)
