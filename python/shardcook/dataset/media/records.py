"""A shard's `media_metadata` rows, recorded by the run that wrote it (`raw`, `encode`, `chatml`
with a `--media-metadata-by-*` flag), so that finalize merges them into index.sqlite without
reading the shard again.

The record (`.shardcook/media/<shard>.sqlite`) holds the rows as Energon's `media_metadata`
table holds them, in member order, the filter they were made with (`media_filter`) and the shard
they describe (`shard_object`, as `shardrows` names it: its size, and in object storage its ETag,
in a local folder its modification time). finalize takes a shard's rows from its record only
while the filter is the one asked and the shard is that object; any other shard is read, as
before. Energon never reads these files.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardcook.dataset import metadata
from shardcook.dataset.index import shardrows
from shardcook.dataset.index.sqlitedb import open_read_only
from shardcook.dataset.media import scan as mediascan
from shardcook.dataset.media.meta import MediaFilter
from shardcook.dataset.media.scan import MediaRow
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import OURS_DIR

if TYPE_CHECKING:
    from shardcook.dataset.view import DatasetView

__all__ = ["MEDIA_DIR", "UnitMedia", "dataset_rows", "record_name", "run_filter", "write_record"]

#: Where the records are, inside the dataset folder.
MEDIA_DIR = f"{OURS_DIR}/media"
_FILTER = "media_filter"


def record_name(shard: str) -> str:
    """The record of `shard`, relative to the dataset folder."""
    return f"{MEDIA_DIR}/{shard}.sqlite"


@dataclass
class UnitMedia:
    """The rows a run computed for one unit's shard as it wrote it, and the filter they are
    of; `add` takes each sample as it is written."""

    media_filter: MediaFilter
    rows: list[MediaRow] = field(default_factory=list)

    def add(self, key: str, parts: Iterable[tuple[str, Any]]) -> None:
        self.rows += mediascan.sample_rows(self.media_filter, key, parts)

    def write(self, path: Path, shard: tuple[int, str] | None = None, *,
              durable: bool = True) -> None:
        """`write_record` of these rows."""
        write_record(path, self.rows, self.media_filter, shard, durable=durable)


def write_record(path: Path, rows: Iterable[MediaRow], media_filter: MediaFilter,
                 shard: tuple[int, str] | None = None, *, durable: bool = True) -> None:
    """Writes the record at `path` whole (a new file, without SQLite's journal and its syncs,
    renamed over any there; flushed to the disk once when `durable`): the rows, the filter and,
    when known now, the shard object (`shard`: size and identity; a bucket's is added once
    uploaded, `shardrows.record_object`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    building = path.with_name(f".{path.name}.tmp{os.getpid()}")
    building.unlink(missing_ok=True)
    try:
        with contextlib.closing(sqlite3.connect(building)) as db:
            for pragma in (f"page_size = {shardrows.ROWS_PAGE_SIZE}", "journal_mode = OFF",
                           "synchronous = OFF"):
                db.execute(f"PRAGMA {pragma}")
            with db:
                db.execute("CREATE TABLE media_metadata (entry_key TEXT NOT NULL, "
                           "metadata_type TEXT NOT NULL, metadata_json TEXT NOT NULL)")
                db.executemany("INSERT INTO media_metadata VALUES (?, ?, ?)", rows)
                db.execute(f"CREATE TABLE {_FILTER} (strategy TEXT NOT NULL, patterns TEXT)")
                db.execute(f"INSERT INTO {_FILTER} VALUES (?, ?)",
                           (media_filter.strategy, media_filter.patterns_text))
                if shard is not None:
                    shardrows.name_object(db, *shard)
        if durable:
            with open(building, "rb") as f:
                os.fsync(f.fileno())
        os.replace(building, path)
    finally:
        building.unlink(missing_ok=True)


def _recorded(path: Path, media_filter: MediaFilter, shard: tuple[int, str] | None
              ) -> list[MediaRow] | None:
    """The rows of the record at `path` when it was made with `media_filter` for the shard
    object `shard`; None otherwise (no record, another filter, another object, a damaged
    file)."""
    if shard is None or not path.is_file():
        return None
    try:
        with contextlib.closing(open_read_only(path)) as db:
            made = db.execute(f"SELECT strategy, patterns FROM {_FILTER}").fetchall()
            if made != [(media_filter.strategy, media_filter.patterns_text)]:
                return None
            if db.execute("SELECT size, etag FROM shard_object").fetchall() != [shard]:
                return None
            rows: list[MediaRow] = db.execute(
                "SELECT entry_key, metadata_type, metadata_json FROM media_metadata "
                "ORDER BY rowid").fetchall()
            return rows
    except sqlite3.Error:
        return None


def dataset_rows(view: DatasetView, shards: Sequence[str], media_filter: MediaFilter
                 ) -> Iterator[MediaRow]:
    """The rows of the members of `shards`, in shard order: a shard's record where it holds
    them (`_recorded`), else the shard's members read (`mediascan.shard_rows`, a few shards'
    bytes fetched at a time)."""
    unrecorded: list[str] = []

    def read() -> Iterator[MediaRow]:
        for group in view.windows(unrecorded):
            yield from mediascan.shard_rows(view.root, group, media_filter)
        unrecorded.clear()

    for shard in shards:
        rows = _recorded(view.root / record_name(shard), media_filter, view.shard_object(shard))
        if rows is None:
            unrecorded.append(shard)
            continue
        yield from read()
        yield from rows
    yield from read()


def run_filter(root: Path) -> MediaFilter | None:
    """The media filter the run that wrote `root` recorded rows with (its manifest's
    `--media-metadata-by-*` options); None for none, no run, or a manifest that does not say
    (damaged: finalize's other steps name that)."""
    try:
        manifest = metadata.read_manifest(root)
    except DatasetError:
        return None
    config: Any = (manifest or {}).get("config")
    output: Any = config.get("output") if isinstance(config, dict) else None
    if not isinstance(output, dict):
        return None
    glob, header, extension = (output.get(f"media_metadata_by_{name}")
                               for name in ("glob", "header", "extension"))
    if (glob is not None and not isinstance(glob, str)) or not all(
            flag is None or isinstance(flag, bool) for flag in (header, extension)):
        return None
    try:
        return MediaFilter.from_flags(glob, bool(header), bool(extension))
    except ConfigError:
        return None
