"""The folder a source reads its files from: a local folder, or a folder in object storage
(`msc://PROFILE/path`, `s3://bucket/path`): one `Folder` over the location's `storage.Store`.
Sources ask a `Folder` for listings, existence and bytes, never `os` or the store directly, so one
source reads both the same way and gives the same inputs in the same order; what differs between
the two is the store's to say (see `storage.store`).

Names are relative to the folder and `/`-separated; `where(name)` is the file's path or URL (what
reports show and `read` takes). A remote folder is listed once, when first asked; an object
deleted after that reads as a missing file (FileNotFoundError), which the run turns into a skip.
An object whose name no file can have (`a/../b`, `a//b`) is left out of the listing and named by
`unsafe`, for the source to report.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, TypeVar

from shardcook.errors import ConfigError
from shardcook.storage import Store
from shardcook.storage.location import Location, locate
from shardcook.storage.store import normalized

__all__ = ["Folder", "OutsideFolder", "open_folder", "read_ahead"]

S = TypeVar("S")
T = TypeVar("T")


class OutsideFolder(ValueError):
    """A file name leads out of the folder it must stay in."""


class Folder:
    """A folder of input files over its store (see the module): what is in it is its
    `contents`' to say (`storage.store.Contents`: `exists` is `is_folder()`, `is_dir` is
    `is_folder(sub)`), where a name leads its store's (`Store.where`, `inside`, `reach`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: The folder's absolute path or URL, for messages and manifest.json.
        self.root = str(store)
        #: How many files `read_ahead` reads at once (`Store.readers`).
        self.threads = store.readers
        self.contents = store.contents("The input folder")

    def exists(self) -> bool:
        return self.contents.is_folder()

    def is_file_itself(self) -> bool:
        return self.contents.is_file_itself()

    def where(self, name: str) -> str:
        return self.store.where(name)

    def files(self, sub: str = "") -> list[str]:
        """The visible files directly in subfolder `sub` (names without the folder), sorted."""
        return [name for name in self.contents.files(sub) if not name.startswith(".")]

    def is_dir(self, sub: str) -> bool:
        return self.contents.is_folder(sub)

    def is_file(self, name: str) -> bool:
        return self.contents.is_file(name)

    def inside(self, name: str) -> bool:
        return self.store.inside(name)

    def read(self, where: str) -> bytes:
        """The bytes at `where` (from `where(name)` or `locate`). Raises OSError
        (FileNotFoundError when it is gone) with a `strerror` saying why; a local file that is
        not a regular one (a FIFO, a device) is refused unread."""
        return self.store.read(where.removeprefix(self.root + "/"))

    def preload(self, where: str) -> bytes | None:
        """The bytes at `where` when reading them ahead pays (a bucket), else None (read later);
        None too when it cannot be read, so the later read reports why."""
        if self.threads <= 1:
            return None
        try:
            return self.read(where)
        except OSError:
            return None

    def open(self, name: str) -> BinaryIO:
        """A seekable reader of `name`, read sequentially (OSError when it is missing or not a
        regular file; ConfigError when the store refuses the credentials)."""
        try:
            return self.store.open_stream(normalized(name), 1 << 20)
        except PermissionError as e:  # the credentials, not this object: say so, not "no file"
            problem = self.store.refusal("The input", name, e)
            if problem is None:
                raise
            raise ConfigError(problem) from None

    def locate(self, name: str) -> str:
        """The path or URL of a file a record names (chatml's media): locally relative to the
        folder or absolute, as the user wrote it; in a bucket only inside the folder.

        Raises:
            OutsideFolder: the name leads out of a folder in object storage.
        """
        found = self.store.reach(name)
        if found is None:
            raise OutsideFolder(f"{name!r} leads out of {self.root}")
        return found

    def unsafe(self) -> list[str]:
        return self.contents.unsafe()


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


def open_folder(value: str | os.PathLike[str] | Location | Folder, what: str) -> Folder:
    """The folder `value` names (see `storage.locate`; ConfigError in one sentence when its
    store cannot be opened), over its store named from anywhere (`Store.absolute`); a Folder
    is returned as it is."""
    if isinstance(value, Folder):
        return value
    return Folder(locate(value, what).store.absolute())
