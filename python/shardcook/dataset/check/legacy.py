"""Datasets an older Energon indexed, and what they lack of what today's `energon prepare` writes.

What each version wrote (checked by running them): Energon 5 and earlier `.info.yaml`,
`split.yaml` and the `.tar.idx` files, no index.sqlite and no index.uuid; Energon 6 added
index.sqlite (a `samples` table only) and index.uuid; Energon 7.0 replaced `.info.yaml` with
`.info.json` and added the `sample_parts` table. Energon 7.4 still trains on all of them (it reads
`.info.yaml` when `.info.json` is absent, and training reads only the `.tar.idx` files); its
lookups by key (`energon mount`, joined datasets) need index.sqlite and index.uuid.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from shardcook.dataset import metadata
from shardcook.dataset.index.sqlitedb import open_read_only
from shardcook.layouts.names import INDEX_SQLITE, INDEX_UUID, INFO_JSON, INFO_YAML, META_DIR

#: The table index.sqlite has had from Energon 6 on, and the one Energon 7.0 added.
SAMPLES_TABLE, PARTS_TABLE = "samples", "sample_parts"


def sqlite_tables(root: Path) -> set[str] | None:
    """The tables of the dataset's index.sqlite; None when it is missing or unreadable."""
    path = root / META_DIR / INDEX_SQLITE
    if not path.is_file():
        return None
    try:
        with contextlib.closing(open_read_only(path)) as db:
            return {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error:
        return None


def older_energon_gaps(root: Path) -> list[str]:
    """What the dataset's index lacks of today's, each named as what an older Energon wrote."""
    meta = root / META_DIR
    gaps = []
    if metadata.info_file(root) == INFO_YAML:
        gaps.append(f"{INFO_YAML} instead of {INFO_JSON}")
    tables = sqlite_tables(root)
    if not (meta / INDEX_SQLITE).exists():
        gaps.append(f"no {INDEX_SQLITE}")
    elif tables is not None and SAMPLES_TABLE in tables and PARTS_TABLE not in tables:
        gaps.append(f"an {INDEX_SQLITE} without the {PARTS_TABLE} table")
    if not (meta / INDEX_UUID).exists():
        gaps.append(f"no {INDEX_UUID}")
    return gaps


def older_energon_warning(root: Path) -> str | None:
    """One sentence when an older Energon's index is missing parts of today's, else None."""
    gaps = older_energon_gaps(root)
    if not gaps:
        return None
    return (
        f"{root} has an older Energon's index or an incomplete one ({'; '.join(gaps)}): Energon "
        "trains on it as it is, but its lookups by key (`energon mount`, joined datasets) need "
        f"{INDEX_SQLITE} with the {PARTS_TABLE} table and {INDEX_UUID}; `shardcook finalize "
        f"--force {root}` upgrades it to what today's `energon prepare` writes"
    )
