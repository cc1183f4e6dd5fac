"""`MemoryStore`: a folder whose objects are bytes in this process's memory, a `store.Store` and
its own `store.Contents`. It is the smallest whole store: what a new backend implements (one
class), and the store tests use to show that a caller asks the store, never which one it is."""

from __future__ import annotations

import errno
import io
import os
import posixpath
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, TypeVar

from shardcook.storage.messages import describe_error
from shardcook.storage.store import Listed, normalized

__all__ = ["MemoryStore"]

T = TypeVar("T")


class MemoryStore:
    """Objects by name under `url` (`memory://NAME`, for messages); `objects` may be shared
    with another `MemoryStore` (a folder inside it: `folder`)."""

    readers = 4

    def __init__(self, url: str = "memory://store", objects: dict[str, bytes] | None = None,
                 prefix: str = "") -> None:
        self.url = url
        self.objects = objects if objects is not None else {}
        self._prefix = prefix
        self._lock = threading.Lock()

    def __str__(self) -> str:
        return self.url

    def folder(self, sub: str) -> MemoryStore:
        """Subfolder `sub`, over the same objects."""
        return MemoryStore(self.child(sub), self.objects, self._key(sub) + "/")

    def _key(self, name: str) -> str:
        return self._prefix + normalized(name)

    def _get(self, name: str) -> bytes:
        try:
            return self.objects[self._key(name)]
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, "No such object", self.child(name)) from None

    # ---- where names lead ----------------------------------------------------------------

    @property
    def name(self) -> str:
        """The last segment of the folder's path ("" for the store's root, as a bucket's)."""
        path = self.url.partition("://")[2].partition("/")[2]
        return path.rpartition("/")[2]

    def child(self, name: str) -> str:
        return f"{self.url}/{name.lstrip('/')}"

    def where(self, name: str) -> str:
        return self.child(normalized(name))

    def inside(self, name: str) -> bool:
        norm = normalized(name)
        return not (name.startswith("/") or norm == ".." or norm.startswith("../"))

    def reach(self, name: str) -> str | None:
        return self.where(name) if self.inside(name) else None

    def refusal(self, what: str, name: str, error: OSError) -> None:
        return None

    # ---- `Contents` ------------------------------------------------------------------------

    def contents(self, what: str) -> MemoryStore:
        return self

    def is_folder(self, sub: str = "") -> bool:
        prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
        return any(True for _ in self.names(prefix))

    def is_file_itself(self) -> bool:
        return self._prefix.rstrip("/") in self.objects

    def files(self, sub: str = "") -> list[str]:
        prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
        return sorted(n[len(prefix):] for n in self.names(prefix) if "/" not in n[len(prefix):])

    def is_file(self, name: str) -> bool:
        return self.exists(name)

    def unsafe(self) -> list[str]:
        return []

    # ---- bytes -----------------------------------------------------------------------------

    def listing(self, prefix: str = "") -> Iterator[Listed]:
        with self._lock:
            found = sorted((key[len(self._prefix):], len(data)) for key, data
                           in self.objects.items() if key.startswith(self._prefix + prefix))
        for name, size in found:
            yield Listed(name, size, None)

    def names(self, prefix: str = "") -> Iterator[str]:
        for listed in self.listing(prefix):
            yield listed.name

    def stat(self, name: str) -> Listed:
        return Listed(name, len(self._get(name)), None)

    def exists(self, name: str) -> bool:
        return self._key(name) in self.objects

    def what_is(self, name: str = "") -> Literal["folder", "file"] | None:
        norm = normalized(name)
        if self.is_folder(norm):
            return "folder"
        there = self.exists(norm) if norm else self.is_file_itself()
        return "file" if there else None

    def failure(self, what: str, name: str, doing: Literal["read", "write"],
                error: BaseException) -> str:
        return f"cannot {doing} {self.where(name)} ({describe_error(error)})."

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """`call()` once: this process's memory fails for good or not at all."""
        return call()

    def read(self, name: str) -> bytes:
        return self._get(name)

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        return self._get(name)[offset:offset + size]

    def open_stream(self, name: str, buffer_size: int = 8 << 20) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(self._get(name)), buffer_size)

    def write_bytes(self, name: str, data: bytes | str) -> None:
        with self._lock:
            self.objects[self._key(name)] = data.encode() if isinstance(data, str) else data

    def create(self, name: str, data: bytes | str) -> bool:
        with self._lock:
            if self._key(name) in self.objects:
                return False
            self.objects[self._key(name)] = data.encode() if isinstance(data, str) else data
            return True

    def upload(self, local_path: str | os.PathLike[str], name: str) -> None:
        self.write_bytes(name, Path(local_path).read_bytes())

    def download(self, name: str, local_path: str | os.PathLike[str]) -> None:
        Path(local_path).write_bytes(self._get(name))

    def delete(self, name: str) -> None:
        with self._lock:
            if self.objects.pop(self._key(name), None) is None:
                raise FileNotFoundError(errno.ENOENT, "No such object", self.child(name))

    def probe_write(self, folder: str) -> None:
        probe = posixpath.join(folder, f".probe-{uuid.uuid4().hex[:8]}")
        self.write_bytes(probe, b"")
        self.delete(probe)

    def keep_mode(self, name: str, like: str) -> None:
        """Nothing: objects have no permissions."""

    def rust_reads(self, at_once: int) -> None:
        return None

    def file(self, name: str) -> None:
        return None

    def absolute(self) -> MemoryStore:
        return self
