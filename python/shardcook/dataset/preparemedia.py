"""`prepare-media`, as `energon prepare-media`: record the media metadata of a dataset's shards
in its index.sqlite (rows added or replaced, a filter row appended), or make a plain folder of
media files a filesystem dataset (`.nv-meta/index.sqlite` and nothing else) that a metadataset's
auxiliary sources can name.

The index is written to a copy renamed over the old file, so an interrupted run leaves the
index as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from shardcook.dataset import mediatables, metadata
from shardcook.dataset.mediameta import MediaFilter
from shardcook.dataset.mediascan import MediaRow, folder_files, folder_rows, shard_rows
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import INDEX_SQLITE, INFO_JSON, INFO_YAML, META_DIR
from shardcook.storage.location import locate

__all__ = ["prepare_media"]


def _is_dataset(root: Path) -> bool:
    """Whether `root` is a WebDataset as Energon tells one: it has shard counts."""
    return any((root / META_DIR / name).is_file() for name in (INFO_JSON, INFO_YAML))


def _write(root: Path, rows: Iterable[MediaRow], media_filter: MediaFilter) -> int:
    """Adds the rows to `root`'s index.sqlite through a copy renamed over it."""
    meta = root / META_DIR
    meta.mkdir(exist_ok=True)
    path = meta / INDEX_SQLITE
    temporary = meta / f".{INDEX_SQLITE}.media-tmp"
    temporary.unlink(missing_ok=True)
    if path.is_file():
        shutil.copyfile(path, temporary)
    try:
        written = mediatables.write(temporary, rows, media_filter.strategy,
                                    media_filter.patterns_text, reset=False)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return written


def prepare_media(path: str | Path, media_filter: MediaFilter) -> int:
    """Records the media metadata of the dataset or plain folder at `path` in its
    `.nv-meta/index.sqlite`; returns the number of rows written.

    Raises:
        ConfigError: a URL, or `path` is not a folder.
        DatasetError: a folder with no file the filter takes, an unreadable shard or file.
    """
    root = locate(path, "The folder", urls=False).path
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder: prepare-media takes a dataset folder or a "
                          "folder of media files")
    if _is_dataset(root):
        info = metadata.read_info_json(root)
        shards = list(info.shard_counts) if info is not None else []
        if not shards:
            return 0  # Energon writes nothing for a dataset of no shards
        return _write(root, shard_rows(root, shards, media_filter), media_filter)
    files = folder_files(root, media_filter)
    if not files:
        raise DatasetError(f"{root} holds no file that the media filter takes, so there is no "
                           "media metadata to record")
    return _write(root, folder_rows(root, files, media_filter), media_filter)
