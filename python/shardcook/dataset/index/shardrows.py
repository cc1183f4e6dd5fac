"""A shard's index rows, recorded when a run writes it into object storage, so that finalize
there builds `index.sqlite` without downloading the shard again.

The rows file (`.shardcook/index/<shard>.sqlite`) is what the native indexer writes for that one
shard (`samples` and `sample_parts`, Energon's tables), plus a table `shard_object` naming the
object the rows were read from: its size and the ETag the store gave it. finalize uses the rows
only while the listed object still has that size and ETag and the shard's `.tar.idx` holds the
same offsets; any other shard is downloaded and read as before. Energon never reads these files.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from shardcook.dataset.index.sqlitedb import open_read_only
from shardcook.errors import DuplicateKeyError
from shardcook.layouts.names import OURS_DIR

__all__ = [
    "ROWS_DIR",
    "append_rows",
    "compact",
    "local_object",
    "name_object",
    "part_summary",
    "record_object",
    "rows_match",
    "rows_name",
    "start_index",
]

#: Where the rows files are, inside the dataset folder.
ROWS_DIR = f"{OURS_DIR}/index"

_IDENTITY = "shard_object"
#: The page size of the `index.sqlite` the native indexer writes (a test checks it).
INDEX_PAGE_SIZE = 65536
#: The rows files' page size: small, as a shard's rows are (the indexer's 64 KiB pages would
#: make even a two-sample shard's rows 448 KiB).
ROWS_PAGE_SIZE = 4096


def rows_name(shard: str) -> str:
    """The rows file of `shard`, relative to the dataset folder."""
    return f"{ROWS_DIR}/{shard}.sqlite"


def local_object(path: Path) -> tuple[int, str]:
    """What `shard_object` names for a shard in a local folder: its size, and its modification
    time in place of an ETag (the writer's rename keeps it; rewriting the shard changes it)."""
    found = path.stat()
    return found.st_size, f"mtime:{found.st_mtime_ns}"


def compact(rows: Path) -> None:
    """Rewrites `rows` (the indexer's sqlite of one shard) with small pages."""
    with contextlib.closing(sqlite3.connect(rows)) as db:
        db.execute(f"PRAGMA page_size = {ROWS_PAGE_SIZE}")
        db.execute("VACUUM")


def record_object(rows: Path, size: int, etag: str) -> None:
    """Names, in `rows`, the object the rows describe: `size` bytes, ETag `etag`."""
    with contextlib.closing(sqlite3.connect(rows)) as db, db:
        name_object(db, size, etag)


def name_object(db: sqlite3.Connection, size: int, etag: str) -> None:
    """`record_object` in the open database `db` (its transaction)."""
    db.execute(f"CREATE TABLE IF NOT EXISTS {_IDENTITY} "
               "(size INTEGER NOT NULL, etag TEXT NOT NULL)")
    db.execute(f"DELETE FROM {_IDENTITY}")
    db.execute(f"INSERT INTO {_IDENTITY} VALUES (?, ?)", (size, etag))


def rows_match(rows: Path, size: int, etag: str | None, idx_offsets: Sequence[int] | None
               ) -> bool:
    """True when `rows` describe the object listed now (`size`, `etag`) and agree with its
    `.tar.idx` (`idx_offsets`: the samples' offsets, then the end); False for anything else,
    an unreadable file included."""
    if etag is None or idx_offsets is None:
        return False
    try:
        with contextlib.closing(open_read_only(rows)) as db:
            identity = db.execute(f"SELECT size, etag FROM {_IDENTITY}").fetchall()
            spans = db.execute("SELECT byte_offset, byte_size FROM samples "
                               "ORDER BY sample_index").fetchall()
    except sqlite3.Error:
        return False
    if identity != [(size, etag)] or not spans:
        return False
    last_offset, last_size = spans[-1]
    return [offset for offset, _ in spans] + [last_offset + last_size] == list(idx_offsets)


def start_index(target: Path, part: Path) -> None:
    """Makes `target` an empty index with the tables and indexes of `part` (Energon's, as the
    native indexer creates them) and the indexer's page size."""
    with contextlib.closing(sqlite3.connect(part)) as src:
        schema = [sql for (sql,) in src.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND tbl_name != ? ORDER BY rowid",
            (_IDENTITY,))]
    with contextlib.closing(sqlite3.connect(target)) as db:
        db.execute(f"PRAGMA page_size = {INDEX_PAGE_SIZE}")
        with db:
            for sql in schema:
                db.execute(sql)


def part_summary(part: Path, shards: Sequence[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """The sample count of each of `shards` (the part's `tar_file_id` 0, 1, ...) and the part
    names `part` holds."""
    with contextlib.closing(open_read_only(part)) as db:
        counts = dict(db.execute("SELECT tar_file_id, COUNT(*) FROM samples GROUP BY tar_file_id"))
        names = [n for (n,) in db.execute("SELECT DISTINCT part_name FROM sample_parts")]
    return [(shard, counts.get(i, 0)) for i, shard in enumerate(shards)], names


def append_rows(target: Path, part: Path, first_id: int, shards: Sequence[str]) -> None:
    """Appends `part`'s rows to `target` in their order, `tar_file_id` shifted by `first_id`
    (`shards` names every shard of the index, for the error).

    Raises:
        DuplicateKeyError: a key of `part` is already in `target`, naming both shards.
    """
    with contextlib.closing(sqlite3.connect(target)) as db:
        db.execute("ATTACH DATABASE ? AS part", (str(part),))
        try:
            with db:
                db.execute("INSERT INTO samples SELECT tar_file_id + ?, sample_key, sample_index, "
                           "byte_offset, byte_size FROM part.samples ORDER BY rowid", (first_id,))
                db.execute("INSERT INTO sample_parts SELECT tar_file_id + ?, sample_index, "
                           "part_name, content_byte_offset, content_byte_size "
                           "FROM part.sample_parts ORDER BY rowid", (first_id,))
        except sqlite3.IntegrityError:
            key, first, second = db.execute(
                "SELECT p.sample_key, s.tar_file_id, p.tar_file_id + ? FROM part.samples p "
                "JOIN samples s ON s.sample_key = p.sample_key ORDER BY p.rowid LIMIT 1",
                (first_id,)).fetchone()
            raise DuplicateKeyError(
                f"duplicate sample key {json.dumps(key)}: in {shards[first]} and in "
                f"{shards[second]}; keys must be unique across the dataset (rename or drop one)"
            ) from None
        finally:
            db.execute("DETACH DATABASE part")
