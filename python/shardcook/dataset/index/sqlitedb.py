"""Opening an index (`index.sqlite`, a shard's rows file) read-only, whatever its folder is named.

SQLite's read-only mode needs a `file:` URI, where `?`, `#` and `%` in the path would start a
query, a fragment or an escape; the path goes in percent-encoded, so a folder named `a?b#c%d`
opens the file in it, never a file named `a` in the working folder.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["open_read_only"]


def open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the SQLite file at `path` (which must exist: nothing is
    created)."""
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
