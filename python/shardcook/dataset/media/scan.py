"""The `media_metadata` rows of a dataset's shards and of a plain folder of media files, keyed as
Energon keys them: `<sample key>.<part>` for a shard's member (members as `energon prepare`
takes them: regular files, `__meta__`-style names skipped, the name split at the first dot of
its last component), and the path relative to the root for a folder's file (hidden folders
included, `.nv-meta` folders skipped, links to folders inside the folder followed).

Only regular files are read, and a folder's walk never leaves it: a FIFO, a device, a link that
leads nowhere or out of the folder is skipped with the reason (`Tally.skipped`), never waited on,
read until memory runs out, or followed out. A file or folder the system refuses to read stops
the scan (its rows would be missing)."""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcook.dataset.media.meta import MediaFilter, media_row
from shardcook.errors import DatasetError
from shardcook.files import file_kind
from shardcook.layouts.names import META_DIR
from shardcook.storage.local import LocalStore

__all__ = ["MediaRow", "Tally", "entry_key", "folder_files", "folder_rows", "sample_rows",
           "shard_rows"]

#: (entry_key, metadata_type, metadata_json): one `media_metadata` row.
MediaRow = tuple[str, str, str]

#: Energon's split of a member name into sample key and part, and the names it skips.
_SPLIT_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP_META = re.compile(r"__[^/]*__($|/)")


@dataclass
class Tally:
    """What a scan met besides its rows: how many files (members) the filter took by name, and
    the files it skipped, each as `NAME: why`."""

    taken: int = 0
    skipped: list[str] = field(default_factory=list)


def entry_key(name: str) -> str | None:
    """The entry key of the member `name` (a regular file) as Energon keys it; None for a
    member Energon takes as no sample part."""
    if _SKIP_META.match(name):
        return None
    found = _SPLIT_NAME.match(name)
    return None if found is None else f"{found.group(1)}.{found.group(2)}"


def _members(tar: tarfile.TarFile) -> Iterator[tuple[tarfile.TarInfo, str]]:
    """The members Energon indexes as sample parts, with their entry keys."""
    for member in tar:
        key = entry_key(member.name) if member.isreg() else None
        if key is not None:
            yield member, key


def sample_rows(media_filter: MediaFilter, key: str, parts: Iterable[tuple[str, Any]]
                ) -> Iterator[MediaRow]:
    """The rows of one sample's members (`<key>.<part>`, the bytes-like `data` the writer writes
    for each part) that the filter takes: what reading its shard back would give."""
    for part, data in parts:
        entry = entry_key(f"{key}.{part}")
        if entry is None or not media_filter.considers(entry):
            continue
        stream = io.BytesIO(data if isinstance(data, bytes) else memoryview(data).tobytes())
        row = media_row(media_filter, entry, stream)
        if row is not None:
            yield entry, *row


def shard_rows(root: Path, shards: Sequence[str], media_filter: MediaFilter,
               tally: Tally | None = None) -> Iterator[MediaRow]:
    """The rows of the members of `shards` (paths under `root`) that the filter takes; `tally`
    counts the members it takes.

    Raises:
        DatasetError: a shard that is not a regular file, or cannot be read as a tar.
    """
    store = LocalStore(root)
    for shard in shards:
        try:
            # the store opens regular files only: a FIFO named like a shard is never waited on
            with store.open_stream(shard) as stream, \
                    tarfile.open(fileobj=stream, mode="r:*") as tar:
                for member, key in _members(tar):
                    if not media_filter.considers(key):
                        continue
                    if tally is not None:
                        tally.taken += 1
                    data = tar.extractfile(member)
                    row = media_row(media_filter, key, data) if data is not None else None
                    if row is not None:
                        yield key, *row
        except (OSError, tarfile.TarError) as e:
            raise DatasetError(f"cannot read the members of shard {root / shard} for their "
                               f"media metadata: {getattr(e, 'strerror', None) or e}") from None


def _listing_refused(error: OSError) -> None:
    """os.walk's `onerror`: a folder it cannot list would silently lose its files' rows."""
    raise DatasetError(f"cannot list the folder {error.filename} for its media files: "
                       f"{error.strerror or error}")


def _link(path: Path) -> str:
    return f"a link to {os.readlink(path)}, " if path.is_symlink() else ""


def _files(store: LocalStore, tally: Tally) -> list[str]:
    """The files under the store's folder as Energon's walk finds them, relative to it, sorted:
    a folder reached again through a link (which Energon walks until the system refuses) once,
    and a link to a folder outside it not followed (in `tally.skipped`)."""
    root = store.root
    found, seen = [], set()
    for folder, dirs, files in os.walk(root, followlinks=True, onerror=_listing_refused):
        if os.path.realpath(folder) in seen:  # a link back up: its files are listed once
            dirs.clear()
            continue
        seen.add(os.path.realpath(folder))
        rel = os.path.relpath(folder, root)
        kept = []
        for d in dirs:
            name = d if rel == "." else f"{rel}/{d}"
            if d == META_DIR:
                continue
            if store.inside(name):
                kept.append(d)
            else:
                tally.skipped.append(f"{name}: {_link(root / name)}out of the folder, so not "
                                     "followed")
        dirs[:] = kept
        found += [name if rel == "." else f"{rel}/{name}" for name in files]
    found.sort()
    return found


def _not_a_file(store: LocalStore, name: str) -> str | None:
    """Why the file `name` (as the walk listed it) is not read: a link that leads nowhere or out
    of the folder, or not a regular file (a FIFO, a device ...); None for a regular file."""
    path = store.root / name
    try:
        mode = path.stat().st_mode
    except OSError as e:  # a link to nothing, a loop of links
        return f"{_link(path)}which leads nowhere ({e.strerror or e})"
    if not store.inside(name):
        return f"{_link(path)}out of the folder"
    if not stat.S_ISREG(mode):
        return f"{_link(path)}{file_kind(mode)}, not a regular file"
    return None


def folder_files(root: Path, media_filter: MediaFilter, tally: Tally) -> list[str]:
    """The regular files of the folder `root` that the filter considers (by name); those it
    considers but cannot read as files go to `tally.skipped`, and `tally.taken` counts the rest.

    Raises:
        DatasetError: a folder under `root` the system refuses to list.
    """
    store = LocalStore(root)
    taken = []
    for rel in _files(store, tally):
        if not media_filter.considers(rel.rpartition("/")[2]):
            continue
        why = _not_a_file(store, rel)
        if why is None:
            taken.append(rel)
        else:
            tally.skipped.append(f"{rel}: {why}")
    tally.taken += len(taken)
    return taken


def folder_rows(root: Path, files: Sequence[str], media_filter: MediaFilter
                ) -> Iterator[MediaRow]:
    """The rows of `files` (from `folder_files`), keyed by their paths relative to `root`.

    Raises:
        DatasetError: a file that cannot be read, or is no longer a regular file.
    """
    store = LocalStore(root)
    for rel in files:
        try:
            with store.open_stream(rel) as stream:
                row = media_row(media_filter, rel.rpartition("/")[2], stream)
        except OSError as e:
            raise DatasetError(f"cannot read {root / rel} for its media metadata: "
                               f"{e.strerror or e}") from None
        if row is not None:
            yield rel, *row
