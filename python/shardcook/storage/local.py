"""Paths that stay local: a value that is a URL (`s3://`, `msc://`, `https://`), or longer than the
file system allows, is refused before anything is read or written where shardcook reads or writes
only local files (`--config`, `preview --out`, the blend file, model folders ...). Without this
check `--out msc://profile/x` would write a local folder named `msc:`. `LocalStore` is a local
folder's `store.Store`, and its own `store.Contents` (the file system answers each question)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Literal, TypeVar

from shardcook.errors import ConfigError
from shardcook.files import create_new, read_regular_file, write_atomic
from shardcook.storage.store import Listed
from shardcook.storage.urls import url_scheme

T = TypeVar("T")

#: Linux's limits (NAME_MAX, PATH_MAX): a longer path fails in every file call with ENAMETOOLONG.
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4095


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 120 else f"{text[:60]!r}... ({len(text):,} characters)"


def check_local_path(value: object, what: str) -> None:
    """Raises ConfigError unless `value` is a local path: a str or `os.PathLike` of str, not a
    URL, without a NUL byte, and no longer than the file system allows. `what` names the option
    or argument in the message (`--output-dir`, `path`).

    Raises:
        ConfigError: `value` is not a str or path, names an object store or web location, holds
            a NUL byte, or has a name over 255 bytes or is over 4095 bytes in all.
    """
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise ConfigError(f"{what} must be a path (a str or pathlib.Path), not "
                          f"{type(value).__name__} {value!r:.60}.")
    if "\0" in text:
        raise ConfigError(f"{what} {_shown(text)} contains a NUL byte, which no path may hold.")
    scheme = url_scheme(text)
    if scheme is not None:
        raise ConfigError(
            f"{what} {_shown(text)} is a URL ({scheme}://); {what} takes local paths only, so "
            "give a local path (a mounted bucket works)."
        )
    encoded = os.fsencode(text)
    if len(encoded) > MAX_PATH_BYTES or any(
            len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
        raise ConfigError(
            f"{what} {_shown(text)} is longer than the file system allows ({MAX_NAME_BYTES} bytes "
            f"per name, {MAX_PATH_BYTES} in all); give a shorter path."
        )


class LocalStore:
    """A local folder as a `store.Store`: each put is `files.write_atomic` (a temporary name
    beside the file, renamed), making the folders it needs, as a bucket needs none. A read takes
    an absolute path too (a file a record names outside the folder)."""

    readers = 1

    def __init__(self, root: Path) -> None:
        self.root = root

    def __str__(self) -> str:
        return str(self.root)

    @property
    def name(self) -> str:
        return self.root.name

    def child(self, name: str) -> str:
        return str(self.root / name)

    def where(self, name: str) -> str:
        return os.path.normpath(self.root / name)

    @cached_property
    def _real(self) -> Path:
        return Path(os.path.realpath(self.root))

    def inside(self, name: str) -> bool:
        # where the name really leads: `..` or a symlink inside the folder may point out of it
        return Path(os.path.realpath(self.where(name))).is_relative_to(self._real)

    def reach(self, name: str) -> str:
        return self.child(name)

    def refusal(self, what: str, name: str, error: OSError) -> None:
        return None

    def contents(self, what: str) -> LocalStore:
        return self

    def is_folder(self, sub: str = "") -> bool:
        return (self.root / sub).is_dir()

    def is_file_itself(self) -> bool:
        return self.root.exists() and not self.root.is_dir()

    def files(self, sub: str = "") -> list[str]:
        with os.scandir(self.root / sub) as it:
            return sorted(e.name for e in it if e.is_file())

    def is_file(self, name: str) -> bool:
        return Path(self.where(name)).is_file()

    def unsafe(self) -> list[str]:
        return []

    def listing(self, prefix: str = "") -> Iterator[Listed]:
        found = []
        for folder, _, files in os.walk(self.root):
            for file in files:
                path = Path(folder, file)
                name = path.relative_to(self.root).as_posix()
                if name.startswith(prefix):
                    found.append(Listed(name, path.stat().st_size, None))
        yield from sorted(found)

    def names(self, prefix: str = "") -> Iterator[str]:
        for listed in self.listing(prefix):
            yield listed.name

    def stat(self, name: str) -> Listed:
        return Listed(name, (self.root / name).stat().st_size, None)

    def exists(self, name: str) -> bool:
        return (self.root / name).is_file()

    def what_is(self, name: str = "") -> Literal["folder", "file"] | None:
        path = self.root / name
        return "folder" if path.is_dir() else "file" if path.exists() else None

    def failure(self, what: str, name: str, doing: Literal["read", "write"],
                error: BaseException) -> str:
        reason = getattr(error, "strerror", None) or error
        return f"cannot {doing} {self.child(name)} ({reason})."

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """`call()` once: a local disk's error is final."""
        return call()

    def read(self, name: str) -> bytes:
        return read_regular_file(self.root / name)

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        with open(self.root / name, "rb") as f:
            f.seek(offset)
            return f.read(size)

    def open_stream(self, name: str, buffer_size: int = 8 << 20) -> io.BufferedReader:
        path = self.where(name)
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def write_bytes(self, name: str, data: bytes | str) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)

    def create(self, name: str, data: bytes | str) -> bool:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return create_new(path, data)

    def upload(self, local_path: str | os.PathLike[str], name: str) -> None:
        self.write_bytes(name, Path(local_path).read_bytes())

    def download(self, name: str, local_path: str | os.PathLike[str]) -> None:
        shutil.copyfile(self.root / name, local_path)

    def delete(self, name: str) -> None:
        (self.root / name).unlink()

    def probe_write(self, folder: str) -> None:
        probe = f"{folder}/.probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.write_bytes(probe, b"")
        self.delete(probe)

    def keep_mode(self, name: str, like: str) -> None:
        with contextlib.suppress(OSError):
            os.chmod(self.root / name, stat.S_IMODE(os.stat(self.root / like).st_mode) | 0o600)

    def rust_reads(self, at_once: int) -> None:
        return None

    def file(self, name: str) -> Path:
        return self.root / name

    def absolute(self) -> LocalStore:
        return LocalStore(Path(os.path.abspath(self.root)))
