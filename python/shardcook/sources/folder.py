"""The folder a source reads its files from: a local folder, or a folder in object storage
(`msc://PROFILE/path`, `s3://bucket/path`) read through `shardcook.storage`. Sources ask a
`Folder` for listings, existence and bytes, never `os` or the store directly, so one source
reads both the same way and gives the same inputs in the same order.

Names are relative to the folder and `/`-separated; `where(name)` is the file's path or URL (what
reports show and `read` takes). A remote folder is listed once, when first asked; an object
deleted after that reads as a missing file (FileNotFoundError), which the run turns into a skip.
An object whose name no file can have (`a/../b`, `a//b`) is left out of the listing and named by
`unsafe`, for the source to report.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from shardcook.errors import ConfigError
from shardcook.files import read_regular_file
from shardcook.storage import Remote, access_problem, bad_segment, describe_error
from shardcook.storage.location import Location, locate

__all__ = ["Folder", "LocalFolder", "OutsideFolder", "RemoteFolder", "open_folder", "read_ahead"]

S = TypeVar("S")
T = TypeVar("T")


class OutsideFolder(ValueError):
    """A file name leads out of the folder it must stay in."""


class Folder(Protocol):
    """A folder of input files."""

    #: The folder's absolute path or URL, for messages and manifest.json.
    root: str

    def exists(self) -> bool:
        """The folder exists (for a bucket: some object lies under it)."""

    def is_file_itself(self) -> bool:
        """The name given is a file, not a folder."""

    def where(self, name: str) -> str:
        """The path or URL of `name` (normalized: `a/../b` is `b`)."""

    def files(self, sub: str = "") -> list[str]:
        """The visible files directly in subfolder `sub` (names without the folder), sorted."""

    def is_dir(self, sub: str) -> bool:
        """`sub` is a folder holding files."""

    def is_file(self, name: str) -> bool:
        """`name` is a file (OSError when that cannot be known)."""

    def inside(self, name: str) -> bool:
        """`name` leads to a place inside the folder (no `..` out of it, not absolute; locally
        no symlink out of it either)."""

    def read(self, where: str) -> bytes:
        """The bytes at `where` (from `where(name)`). Raises OSError (FileNotFoundError when it
        is gone) with a `strerror` saying why."""

    #: How many files `read_ahead` reads at once: 1 locally (a file is read when the run loads
    #: it), more in a bucket, where each read waits on a request.
    threads: int

    def preload(self, where: str) -> bytes | None:
        """The bytes at `where` when reading them now pays (a bucket), else None (read later);
        None too when it cannot be read, so the later read reports why."""

    def open(self, name: str) -> BinaryIO:
        """A seekable reader of `name`, read sequentially (OSError when it is missing or not a
        regular file; ConfigError when the store refuses the credentials)."""

    def locate(self, name: str) -> str:
        """The path or URL of a file a record names (chatml's media): locally relative to the
        folder or absolute, as the user wrote it; in a bucket only inside the folder.

        Raises:
            OutsideFolder: the name leads out of a folder in object storage.
        """

    def unsafe(self) -> list[str]:
        """The URLs of the objects listed under a folder in object storage whose names no file
        can have (an empty, `.` or `..` segment: a client that normalizes paths reads another
        object); they are never read. Empty for a local folder."""


class LocalFolder:
    """A folder on a local file system."""

    threads = 1

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(os.path.abspath(path))
        self.root = str(self.path)
        self._real = Path(os.path.realpath(self.path))

    def exists(self) -> bool:
        return self.path.is_dir()

    def is_file_itself(self) -> bool:
        return self.path.exists() and not self.path.is_dir()

    def where(self, name: str) -> str:
        return os.path.normpath(self.path / name)

    def files(self, sub: str = "") -> list[str]:
        with os.scandir(self.path / sub) as it:
            return sorted(e.name for e in it if not e.name.startswith(".") and e.is_file())

    def is_dir(self, sub: str) -> bool:
        return (self.path / sub).is_dir()

    def is_file(self, name: str) -> bool:
        return Path(self.where(name)).is_file()

    def inside(self, name: str) -> bool:
        # where the name really leads: `..` or a symlink inside the folder may point out of it
        return Path(os.path.realpath(self.where(name))).is_relative_to(self._real)

    def read(self, where: str) -> bytes:
        return read_regular_file(where)

    def preload(self, where: str) -> bytes | None:
        return None

    def open(self, name: str) -> BinaryIO:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
        fd = os.open(self.where(name), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", self.where(name))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def locate(self, name: str) -> str:
        return str(self.path / name)

    def unsafe(self) -> list[str]:
        return []


class RemoteFolder:
    """A folder in object storage, listed once when first asked."""

    threads = 16

    def __init__(self, folder: Remote):
        self.remote = folder
        self.root = folder.url
        self._names: set[str] | None = None
        self._unsafe: list[str] = []

    def _listing(self) -> set[str]:
        """The names that can be file names; the others are kept aside for `unsafe`."""
        if self._names is None:
            names = listing(self.remote, "The input folder")
            self._unsafe = [n for n in names if bad_segment(n) is not None]
            self._names = set(names).difference(self._unsafe)
        return self._names

    def exists(self) -> bool:
        return bool(self._listing())

    def is_file_itself(self) -> bool:
        parent = self.remote.parent()
        return not self._listing() and parent is not None and parent.exists(self.remote.name)

    def where(self, name: str) -> str:
        return self.remote.where(name)

    def files(self, sub: str = "") -> list[str]:
        prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
        return sorted(n[len(prefix):] for n in self._listing() if n.startswith(prefix)
                      and "/" not in n[len(prefix):] and not n[len(prefix):].startswith("."))

    def is_dir(self, sub: str) -> bool:
        prefix = f"{sub.strip('/')}/"
        return any(n.startswith(prefix) for n in self._listing())

    def is_file(self, name: str) -> bool:
        return _normalized(name) in self._listing()

    def inside(self, name: str) -> bool:
        norm = _normalized(name)
        return not (name.startswith("/") or norm == ".." or norm.startswith("../"))

    def read(self, where: str) -> bytes:
        return self.remote.read(self._name(where))

    def preload(self, where: str) -> bytes | None:
        try:
            return self.read(where)
        except OSError:
            return None

    def open(self, name: str) -> BinaryIO:
        try:
            return self.remote.open_stream(_normalized(name), 1 << 20)
        except PermissionError as e:  # the credentials, not this object: say so, not "no file"
            raise ConfigError(access_problem("The input", self.where(name), "read", e) or
                              describe_error(e)) from None

    def locate(self, name: str) -> str:
        if not self.inside(name):
            raise OutsideFolder(f"{name!r} leads out of {self.root}")
        return self.where(name)

    def unsafe(self) -> list[str]:
        self._listing()
        return [f"{self.root}/{name}" for name in self._unsafe]  # as listed, not normalized

    def _name(self, where: str) -> str:
        assert where.startswith(self.root + "/"), f"{where} is not in {self.root}"
        return where[len(self.root) + 1:]


def read_ahead(fn: Callable[[S], T], inputs: Iterable[S], threads: int) -> Iterator[T]:
    """`map(fn, inputs)` in order, with up to `threads` calls running at once (and at most
    twice as many results waiting) when `threads` > 1; `inputs` is iterated in the caller's
    thread only."""
    if threads <= 1:
        yield from map(fn, inputs)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="shardcook-read") as pool:
        window: deque[Future[T]] = deque()
        for x in inputs:
            window.append(pool.submit(fn, x))
            if len(window) >= 2 * threads:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def listing(folder: Remote, what: str) -> list[str]:
    """Every object name under `folder`, or one sentence why the store cannot list it (no
    credentials, no such bucket, no connection).

    Raises:
        ConfigError: the listing failed.
    """
    try:
        return list(folder.names())
    except Exception as e:  # noqa: BLE001 - MSC and boto3 raise many kinds; one sentence
        raise ConfigError(access_problem(what, folder.url, "read", e) or
                          f"{what} {folder.url!r} cannot be listed ({describe_error(e)}); check "
                          "the URL and the store's credentials.") from None


def _normalized(name: str) -> str:
    norm = posixpath.normpath(name)
    return "" if norm == "." else norm


def open_folder(value: str | os.PathLike[str] | Location | Folder, what: str) -> Folder:
    """The folder `value` names (see `storage.locate`): a URL is a `RemoteFolder` (ConfigError
    in one sentence when the store cannot be opened), anything else a `LocalFolder`; a Folder
    is returned as it is."""
    if isinstance(value, (LocalFolder, RemoteFolder)):
        return value
    location = locate(value, what)
    if location.remote is not None:
        return RemoteFolder(location.remote)
    return LocalFolder(location.path)

