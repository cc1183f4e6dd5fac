"""Local files, safely: `read_regular_file` reads only a regular file, at most a size cap, never
blocking on a FIFO or reading a device until memory runs out (every reader of a user's file goes
through it); `write_atomic` is the one way shardcook replaces a file, so a reader (or a killed run)
sees the old bytes or the new ones, never half of them."""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
from pathlib import Path

__all__ = ["MAX_INPUT_FILE_BYTES", "create_new", "file_kind", "read_regular_file",
           "remove_temporaries", "write_atomic"]

#: An input file larger than this is refused (no image or caption needs 1 GiB).
MAX_INPUT_FILE_BYTES = 1 << 30
#: What a read past a file's stat size asks for at a time.
_READ_PIECE = 1 << 20

_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
               (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a file that is not regular is, from its `st_mode`: "a folder", "a FIFO", ..."""
    return next((k for test, k in _FILE_KINDS if test(mode)), "not a file")


def read_regular_file(path: str | os.PathLike[str], limit: int = MAX_INPUT_FILE_BYTES) -> bytes:
    """The bytes of the regular file at `path`; anything else raises OSError whose `strerror`
    says why, so a source skips that input with the reason instead of hanging on a FIFO, reading
    /dev/zero until memory runs out, or ending the run on a path with a NUL byte.

    Raises:
        OSError: `path` holds a NUL byte, is not a regular file (folder, FIFO, device, socket),
            is larger than `limit` bytes, or cannot be opened or read.
    """
    name = os.fspath(path)
    if "\0" in str(name):
        raise OSError(errno.EINVAL, "the path contains a NUL byte")
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({file_kind(info.st_mode)})")
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"the file is larger than {limit:,} bytes")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            # read(n) allocates n bytes up front: ask for the size fstat gave (one more shows
            # growth), then for what a file larger than that holds (/proc reports 0) in pieces
            chunks = [f.read(min(info.st_size, limit) + 1)]
            size = len(chunks[0])
            while info.st_size < size <= limit and (
                    more := f.read(min(_READ_PIECE, limit + 1 - size))):
                chunks.append(more)
                size += len(more)
        data = b"".join(chunks)
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"the file is larger than {limit:,} bytes")
        return data
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | str, fsync: bool = True) -> None:
    """Writes `data` (a str as UTF-8) to a temporary name beside `path`, flushed to the disk
    unless `fsync` is false, then renames it over `path`. The temporary file is removed when
    anything fails.

    Raises:
        OSError: the folder cannot take the file (nothing is left behind).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    # beside `path`: a rename within one file system is atomic
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")  # _TEMPORARY matches it
    try:
        _write_new(tmp, payload, fsync)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def create_new(path: Path, data: bytes | str) -> bool:
    """Writes `data` as `write_atomic` does, but only when `path` does not exist yet: the whole
    file is linked to its name, which fails when the name is taken, so of several processes
    creating one file at once exactly one does. Returns whether this call created it.

    Raises:
        OSError: the folder cannot take the file (nothing is left behind).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    # one per thread too (threads race for the name as processes do); _TEMPORARY matches it
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp{os.getpid()}")
    try:
        _write_new(tmp, payload, fsync=True)
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _write_new(tmp: Path, payload: bytes, fsync: bool) -> None:
    """Writes the temporary file `tmp` whole, flushed to the disk when `fsync`; OSError when
    the file system holds another size than was written (a file that replaces another must
    not come out short)."""
    with open(tmp, "wb") as f:
        f.write(payload)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
        size = os.fstat(f.fileno()).st_size
    if size != len(payload):
        raise OSError(errno.EIO, f"{tmp} holds {size} bytes after writing {len(payload)}; "
                      "check the disk")


#: The temporary name `write_atomic` gives a file (`.NAME.tmpPID`).
_TEMPORARY = re.compile(r"\..+\.tmp([0-9]+)")


def process_running(pid: int) -> bool:
    """Whether process `pid` runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_temporaries(folder: Path) -> list[str]:
    """Removes the temporary files that `write_atomic` calls of processes no longer running left
    in `folder` (a running one's, this process's too, are kept); returns their names."""
    if not folder.is_dir() or folder.is_symlink():
        return []
    removed = []
    for path in folder.iterdir():
        match = _TEMPORARY.fullmatch(path.name)
        if (match and path.is_file() and not path.is_symlink()
                and not process_running(int(match[1]))):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return sorted(removed)
