"""`Store`: the one interface to a folder's bytes, local (`local.LocalStore`) or in object
storage (`bucket.Remote`, through the Multi-Storage Client): list, stat, read (whole, a range, a
stream), put (whole or not at all; or only when the name is free), delete, and a probe that the
folder takes writes. Names are relative to the folder and `/`-separated; `child(name)` is how
messages show one.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import NamedTuple, Protocol

__all__ = ["Listed", "Store"]


class Listed(NamedTuple):
    """An object as a listing shows it (a local file's `etag` is None)."""

    name: str
    size: int
    etag: str | None


class Store(Protocol):
    """A folder's bytes (see the module)."""

    def child(self, name: str) -> str:
        """The path or URL of `name`, for messages."""
        ...

    def listing(self, prefix: str = "") -> Iterator[Listed]:
        """Every object under the folder whose name starts with `prefix`, recursively, in
        lexicographic order of their names."""
        ...

    def names(self, prefix: str = "") -> Iterator[str]:
        """`listing(prefix)`'s names."""
        ...

    def stat(self, name: str) -> Listed:
        """Object `name`'s size and ETag (FileNotFoundError when there is none)."""
        ...

    def exists(self, name: str) -> bool:
        ...

    def read(self, name: str) -> bytes:
        """The whole object (FileNotFoundError when it is gone, OSError when unreadable)."""
        ...

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        ...

    def open_stream(self, name: str, buffer_size: int = 8 << 20) -> io.BufferedReader:
        """A sequential reader of the object (FileNotFoundError when there is none)."""
        ...

    def write_bytes(self, name: str, data: bytes | str) -> None:
        """Puts the object: it appears whole under `name`, or not at all."""
        ...

    def create(self, name: str, data: bytes | str) -> bool:
        """Puts the object only when `name` does not exist yet; of several callers at once
        exactly one gets True (the one that created it)."""
        ...

    def upload(self, local_path: str | os.PathLike[str], name: str) -> None:
        """Puts a local file as object `name`, as `write_bytes` does."""
        ...

    def download(self, name: str, local_path: str | os.PathLike[str]) -> None:
        ...

    def delete(self, name: str) -> None:
        """Removes object `name` (FileNotFoundError when there is none)."""
        ...

    def probe_write(self, folder: str) -> None:
        """Writes and deletes an empty object in subfolder `folder`: proof that the folder
        takes writes and deletes, before any work."""
        ...
