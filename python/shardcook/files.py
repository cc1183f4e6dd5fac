"""`write_atomic`: the one way shardcook replaces a file, so a reader (or a killed run) sees the
old bytes or the new ones, never half of them."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, fsync: bool = True) -> None:
    """Writes `data` (a str as UTF-8) to a temporary name beside `path`, flushed to the disk
    unless `fsync` is false, then renames it over `path`. The temporary file is removed when
    anything fails.

    Raises:
        OSError: the folder cannot take the file (nothing is left behind).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    # beside `path`: a rename within one file system is atomic
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
