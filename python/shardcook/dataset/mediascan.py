"""The `media_metadata` rows of a dataset's shards and of a plain folder of media files, keyed as
Energon keys them: `<sample key>.<part>` for a shard's member (members as `energon prepare`
takes them: regular files, `__meta__`-style names skipped, the name split at the first dot of
its last component), and the path relative to the root for a folder's file (hidden folders
included, `.nv-meta` folders skipped, links to folders followed)."""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from shardcook.dataset.mediameta import MediaFilter, media_row
from shardcook.errors import DatasetError
from shardcook.layouts.names import META_DIR

__all__ = ["MediaRow", "entry_key", "folder_files", "folder_rows", "sample_rows", "shard_rows"]

#: (entry_key, metadata_type, metadata_json): one `media_metadata` row.
MediaRow = tuple[str, str, str]

#: Energon's split of a member name into sample key and part, and the names it skips.
_SPLIT_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP_META = re.compile(r"__[^/]*__($|/)")


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


def shard_rows(root: Path, shards: Sequence[str], media_filter: MediaFilter
               ) -> Iterator[MediaRow]:
    """The rows of the members of `shards` (paths under `root`) that the filter takes."""
    for shard in shards:
        try:
            with tarfile.open(root / shard, "r:*") as tar:
                for member, key in _members(tar):
                    if not media_filter.considers(key):
                        continue
                    data = tar.extractfile(member)
                    row = media_row(media_filter, key, data) if data is not None else None
                    if row is not None:
                        yield key, *row
        except (OSError, tarfile.TarError) as e:
            raise DatasetError(f"cannot read the members of shard {root / shard} for their "
                               f"media metadata: {e}") from None


def _files(root: Path) -> Iterator[str]:
    """The files under `root` as Energon's walk finds them, relative to it, sorted (a folder
    reached again through a link, which Energon walks until the system refuses, once)."""
    found, seen = [], set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        if os.path.realpath(folder) in seen:  # a link back up: its files are listed once
            dirs.clear()
            continue
        seen.add(os.path.realpath(folder))
        rel = os.path.relpath(folder, root)
        dirs[:] = [d for d in dirs if d != META_DIR]
        found += [name if rel == "." else f"{rel}/{name}" for name in files]
    found.sort()
    return iter(found)


def folder_files(root: Path, media_filter: MediaFilter) -> list[str]:
    """The files of the folder `root` that the filter considers (by name)."""
    return [rel for rel in _files(root) if media_filter.considers(rel.rpartition("/")[2])]


def folder_rows(root: Path, files: Sequence[str], media_filter: MediaFilter
                ) -> Iterator[MediaRow]:
    """The rows of `files` (from `folder_files`), keyed by their paths relative to `root`."""
    for rel in files:
        try:
            with (root / rel).open("rb") as stream:
                row = media_row(media_filter, rel.rpartition("/")[2], stream)
        except OSError as e:
            raise DatasetError(f"cannot read {root / rel} for its media metadata: "
                               f"{e.strerror or e}") from None
        if row is not None:
            yield rel, *row
