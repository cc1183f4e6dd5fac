"""`prepare-media`, as `energon prepare-media`: record the media metadata of a dataset's shards
in its index.sqlite (rows added or replaced, a filter row appended), or make a plain folder of
media files a filesystem dataset (`.nv-meta/index.sqlite` and nothing else) that a metadataset's
auxiliary sources can name.

The index is written to a copy renamed over the old file, so an interrupted or refused run
leaves the index as it was, and no temporary file. A `.nv-meta` that is a link is refused as
finalize refuses it (the index would be written wherever it points), as is an index.sqlite
that is not SQLite. Files that are not regular files, or lead nowhere or out of the folder, are
skipped with the reason (`mediascan`); a filter that takes no file or member is refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shardcook.dataset import metadata
from shardcook.dataset.index.sqlitedb import open_read_only
from shardcook.dataset.media import tables as mediatables
from shardcook.dataset.media.meta import GLOB, MediaFilter
from shardcook.dataset.media.scan import MediaRow, Tally, folder_files, folder_rows, shard_rows
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import INDEX_SQLITE, INFO_JSON, INFO_YAML, META_DIR
from shardcook.storage.location import locate

__all__ = ["Prepared", "prepare_media"]


@dataclass(frozen=True)
class Prepared:
    """What `prepare_media` did: the rows written, of how many files (members) the filter took
    (the others are no image, video or audio that Pillow or PyAV reads), and the files it
    skipped (`NAME: why`)."""

    written: int
    taken: int = 0
    skipped: list[str] = field(default_factory=list)


def _is_dataset(root: Path) -> bool:
    """Whether `root` is a WebDataset as Energon tells one: it has shard counts."""
    return any((root / META_DIR / name).is_file() for name in (INFO_JSON, INFO_YAML))


def _check_index(root: Path, fix: str) -> None:
    """Refuses a `.nv-meta` that is not a folder, or an index.sqlite there that is not a
    regular SQLite file, before any file is read."""
    meta = root / META_DIR
    if meta.exists() and not meta.is_dir():
        raise DatasetError(f"{meta} is a file, not a folder; {fix}")
    path = meta / INDEX_SQLITE
    if not path.exists():
        return
    if not path.is_file():
        raise DatasetError(f"{path} is not a regular file; {fix}")
    try:
        with contextlib.closing(open_read_only(path)) as db:
            db.execute("SELECT name FROM sqlite_master").fetchall()
    except sqlite3.Error as e:
        raise DatasetError(f"{path} is not a readable SQLite index ({e}); {fix}") from None


def _write(root: Path, rows: Iterable[MediaRow], media_filter: MediaFilter) -> int:
    """Adds the rows to `root`'s index.sqlite through a copy renamed over it; the copy is
    removed whatever fails."""
    meta = root / META_DIR
    path = meta / INDEX_SQLITE
    temporary = meta / f".{INDEX_SQLITE}.media-tmp"
    made = not meta.is_dir()  # a refused run leaves no empty `.nv-meta` behind either
    try:
        meta.mkdir(exist_ok=True)
        temporary.unlink(missing_ok=True)
        if path.is_file():
            shutil.copyfile(path, temporary)
        written = mediatables.write(temporary, rows, media_filter.strategy,
                                    media_filter.patterns_text, reset=False)
        os.replace(temporary, path)
    except sqlite3.Error as e:
        raise DatasetError(f"cannot write the media metadata to {path} ({e})") from None
    except OSError as e:
        raise DatasetError(f"cannot write the media metadata to {path}: "
                           f"{e.strerror or e}") from None
    finally:
        temporary.unlink(missing_ok=True)
        if made and not path.exists():
            with contextlib.suppress(OSError):
                meta.rmdir()
    return written


def _option(media_filter: MediaFilter) -> str:
    """The filter as the option that asks for it, for the sentence refusing one."""
    if media_filter.strategy == GLOB:
        return f"--media-metadata-by-glob {media_filter.patterns_text!r}"
    return f"--media-metadata-by-{media_filter.strategy.lower()}"


def _some_taken(rows: Iterable[MediaRow], tally: Tally, refusal: str) -> Iterator[MediaRow]:
    """`rows`, then DatasetError(`refusal`) when the filter took no member: raised inside the
    write, so nothing is renamed over the index."""
    yield from rows
    if not tally.taken:
        raise DatasetError(refusal)


def prepare_media(path: str | Path, media_filter: MediaFilter) -> Prepared:
    """Records the media metadata of the dataset or plain folder at `path` in its
    `.nv-meta/index.sqlite`.

    Raises:
        ConfigError: a URL, or `path` is not a folder.
        DatasetError: a `.nv-meta` (or an entry in it) that is a link, an index.sqlite that is
            not SQLite, a filter that takes no file, an unreadable shard or file.
    """
    root = locate(path, "The folder", urls=False).path
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder: prepare-media takes a dataset folder or a "
                          "folder of media files")
    metadata.refuse_links(root)
    tally = Tally()
    if _is_dataset(root):
        _check_index(root, f"run `shardcook finalize --force {root}` to rebuild it")
        info = metadata.read_info_json(root)
        shards = list(info.shard_counts) if info is not None else []
        if not shards:
            return Prepared(0)  # Energon writes nothing for a dataset of no shards
        refusal = (f"the media filter ({_option(media_filter)}) takes no member of the "
                   f"{len(shards):,} shard(s) of {root}, so there is no media metadata to "
                   "record; nothing was written")
        rows = _some_taken(shard_rows(root, shards, media_filter, tally), tally, refusal)
        written = _write(root, rows, media_filter)
        return Prepared(written, tally.taken)
    _check_index(root, "remove it, then run prepare-media again")
    files = folder_files(root, media_filter, tally)
    if not files:
        skipped = (f"; {len(tally.skipped):,} skipped, the first {tally.skipped[0]}"
                   if tally.skipped else "")
        raise DatasetError(f"{root} holds no file that the media filter takes "
                           f"({_option(media_filter)}{skipped}), so there is no media metadata "
                           "to record")
    written = _write(root, folder_rows(root, files, media_filter), media_filter)
    return Prepared(written, tally.taken, tally.skipped)
