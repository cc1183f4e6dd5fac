"""Energon's media tables in `index.sqlite` (`media_metadata` and `media_filters`, which
`energon prepare --media-metadata-by-*` and `energon prepare-media` write): written as Energon
writes them (`write`), and kept when finalize rebuilds the index without a media filter
(`kept`): `energon prepare` without media flags replaces only the sample tables, so a rebuilt
index holds the media rows, their filter ids and timestamps exactly as they were.

The old index is held open while the indexer replaces the file (every writer of index.sqlite
writes a new file and renames it over the old one), so its rows are copied straight from the
old file, however many there are, with nothing copied aside first.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

from shardcook.dataset.index.sqlitedb import open_read_only

__all__ = ["TABLES", "entry_count", "kept", "write"]

#: The tables Energon 7.4 keeps its media metadata in, in the order it creates them.
TABLES = ("media_metadata", "media_filters")
#: The table where SQLite keeps `media_filters`' AUTOINCREMENT counter.
_SEQUENCE = "sqlite_sequence"
#: The start of a stored `CREATE TABLE` statement, before the table's name.
_CREATE = re.compile(r"^(\s*CREATE\s+TABLE\s+)", re.IGNORECASE)
#: Energon 7.4's statements, to the whitespace (SQLite keeps their text in its schema).
_CREATE_TABLES = ("""
                CREATE TABLE IF NOT EXISTS media_metadata (
                    entry_key TEXT PRIMARY KEY,
                    metadata_type TEXT NOT NULL,
                    metadata_json TEXT NOT NULL
                )
                """, """
                CREATE TABLE IF NOT EXISTS media_filters (
                    filter_id INTEGER PRIMARY KEY AUTOINCREMENT,
                    strategy TEXT NOT NULL,
                    patterns TEXT,
                    created_at_utc TEXT DEFAULT CURRENT_TIMESTAMP,
                    UNIQUE(strategy, patterns)
                )
                """)
#: How many rows go to SQLite at a time.
_BATCH = 1000


def _schema(db: sqlite3.Connection, schema: str = "main") -> dict[str, str]:
    """The `CREATE` statement of each media table `db` holds."""
    found = dict(db.execute(f"SELECT name, sql FROM {schema}.sqlite_master WHERE type = 'table'"))
    return {name: found[name] for name in TABLES if found.get(name)}


def _open_media(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to the index at `path` when it holds media tables; None when it
    holds none, is missing or is not an SQLite file."""
    if not path.is_file():
        return None
    db = open_read_only(path)
    try:
        if _schema(db):  # reading the schema opens the file: the connection now holds it
            return db
    except sqlite3.Error:
        pass  # a damaged index: nothing in it can be kept
    db.close()
    return None


def entry_count(path: Path) -> int | None:
    """The number of media entries the index at `path` records; None when it has no media
    tables."""
    db = _open_media(path)
    if db is None:
        return None
    with contextlib.closing(db):
        tables = _schema(db)
        if "media_metadata" not in tables:
            return 0
        return int(db.execute("SELECT COUNT(*) FROM media_metadata").fetchone()[0])


def _copy(old: sqlite3.Connection, new: Path) -> None:
    """Copies the media tables of `old` (their statements, rows in order and AUTOINCREMENT
    counter) into the index at `new`, which has none. `old` is the connection held open on a
    file that may no longer have a name, so it attaches the new index, not the other way."""
    tables = _schema(old)
    sequence = old.execute(f"SELECT name, seq FROM {_SEQUENCE} WHERE name = 'media_filters'"
                           ).fetchall() if "media_filters" in tables else []
    old.execute("ATTACH DATABASE ? AS new", (f"{new.absolute().as_uri()}?mode=rw",))
    try:
        with old:
            for name, sql in tables.items():
                old.execute(_CREATE.sub(r"\1new.", sql, count=1))
                old.execute(f"INSERT INTO new.{name} SELECT * FROM main.{name} ORDER BY rowid")
            if sequence:  # the copied rows set the counter to their largest id; keep Energon's
                old.execute(f"DELETE FROM new.{_SEQUENCE} WHERE name = 'media_filters'")
                old.executemany(f"INSERT INTO new.{_SEQUENCE} (name, seq) VALUES (?, ?)",
                                sequence)
    finally:
        old.execute("DETACH DATABASE new")


@contextmanager
def kept(path: Path) -> Iterator[None]:
    """The block replaces the index at `path`; afterwards the media tables of the index that
    was there before are copied into the new one (when the block left one there)."""
    old = _open_media(path)
    if old is None:
        yield
        return
    with contextlib.closing(old):
        yield
        if path.is_file():
            _copy(old, path)


def write(path: Path, rows: Iterable[tuple[str, str, str]], strategy: str, patterns: str,
          *, reset: bool) -> int:
    """Adds `rows` (entry_key, metadata_type, metadata_json) to the index at `path` (made when
    missing) and the filter row (`strategy`, `patterns`), as Energon does: a row replaces one
    of the same key, a filter row the table has is not added twice; with `reset`, the media
    tables are emptied first. Returns the number of rows written."""
    written = 0
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        if reset:
            for name in TABLES:
                db.execute(f"DROP TABLE IF EXISTS {name}")
        for sql in _CREATE_TABLES:
            db.execute(sql)
        pending = iter(rows)
        while batch := list(islice(pending, _BATCH)):
            db.executemany("INSERT OR REPLACE INTO media_metadata "
                           "(entry_key, metadata_type, metadata_json) VALUES (?, ?, ?)", batch)
            written += len(batch)
        db.execute("INSERT OR IGNORE INTO media_filters (strategy, patterns) VALUES (?, ?)",
                   (strategy, patterns))
    return written
