"""`Store`: the one interface to a folder's bytes, local (`local.LocalStore`) or in object
storage (`bucket.Remote`, through the Multi-Storage Client): list, stat, read (whole, a range, a
stream), put (whole or not at all; or only when the name is free), delete, and a probe that the
folder takes writes. Names are relative to the folder and `/`-separated; `child(name)` is how
messages show one.

What differs between a local folder and a bucket for a reader of input files is said by the
store: how many reads at once pay (`readers`), where a name leads (`inside`, `reach`), whose
refusal a denied read is (`refusal`), and how its files are listed (`contents`, a `Contents`).
So is what differs for any caller: what a name is there (`what_is`), the sentence for a failed
call (`failure`), and whether a failed call is tried again (`retrying`).
"""

from __future__ import annotations

import io
import os
import posixpath
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:
    from shardcook.storage.rustreads import RustReads

__all__ = ["Contents", "Listed", "Store", "normalized"]

T = TypeVar("T")


class Listed(NamedTuple):
    """An object as a listing shows it (a local file's `etag` is None)."""

    name: str
    size: int
    etag: str | None


def normalized(name: str) -> str:
    """`name` as a path inside a folder: `a/../b` is `b`, and the folder itself is ""."""
    norm = posixpath.normpath(name)
    return "" if norm == "." else norm


class Contents(Protocol):
    """A folder's files as a reader asks about them. A local folder answers each question from
    the file system; a bucket from one listing, taken when first asked, so every question sees
    the same objects, and one deleted since then reads as a missing file."""

    def is_folder(self, sub: str = "") -> bool:
        """Subfolder `sub` ("": the folder itself) exists; in a bucket: some object lies
        under it."""
        ...

    def is_file_itself(self) -> bool:
        """The folder's own name is a file, not a folder."""
        ...

    def files(self, sub: str = "") -> list[str]:
        """The names of the files directly in subfolder `sub`, hidden ones too, sorted."""
        ...

    def is_file(self, name: str) -> bool:
        """`name` (normalized: `a/../b` is `b`) is a file (OSError when that cannot be
        known)."""
        ...

    def unsafe(self) -> list[str]:
        """The URLs of the objects listed whose names no file can have (an empty, `.` or `..`
        segment: a client that normalizes paths reads another object); never read. Empty for a
        local folder."""
        ...


class Store(Protocol):
    """A folder's bytes (see the module)."""

    #: How many reads at once pay when a reader reads ahead of their use: 1 for a local folder
    #: (the file is read when it is needed), more for a bucket (each read waits on a request).
    readers: int

    @property
    def name(self) -> str:
        """The folder's last segment ("" for a bucket's or profile's root)."""
        ...

    def child(self, name: str) -> str:
        """The path or URL of `name`, for messages."""
        ...

    def where(self, name: str) -> str:
        """The path or URL of `name` normalized (`a/../b` is `b`)."""
        ...

    def inside(self, name: str) -> bool:
        """`name` leads to a place inside the folder: not absolute, no `..` out of it; locally
        no symlink out of it either."""
        ...

    def reach(self, name: str) -> str | None:
        """The path or URL a name that a record gives (chatml's media) leads to: locally
        relative to the folder or absolute, as written; in a bucket normalized, and None when
        it leads out of the folder (a client that normalizes paths would read another
        object)."""
        ...

    def refusal(self, what: str, name: str, error: OSError) -> str | None:
        """One sentence when `error`, raised reading `name`, is the store refusing its
        credentials (a bucket's); None when it is the file's own (a local file's permissions,
        said as that file's error). `what` names the folder's role."""
        ...

    def contents(self, what: str) -> Contents:
        """The folder's files for a reader (`what` names the folder in the sentence saying why
        a bucket cannot be listed)."""
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

    def what_is(self, name: str = "") -> Literal["folder", "file"] | None:
        """What `name` ("": the folder itself) is: "folder" (locally a directory; in a bucket
        or memory, some object lies under `name/`), "file" (locally anything else that is
        there; elsewhere the object `name`, for "" an object named as the folder), None when
        nothing is. In a bucket one or two requests, never a listing of the whole folder.
        OSError when the store cannot say."""
        ...

    def failure(self, what: str, name: str, doing: Literal["read", "write"],
                error: BaseException) -> str:
        """One sentence saying why `doing` object `name` failed with `error` (`what` names the
        folder's role): locally `cannot write PATH (the system's reason).`; in a bucket the
        store's refusal of the credentials or of their permissions
        (`messages.access_problem`), else `cannot write URL (the client's error).`"""
        ...

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """`call()`, an operation on this folder, under the store's own retry policy: locally
        and in memory run once (a disk's error is final, and raised as it is); in a bucket
        tried again with doubling waits (`bucket.retried`), the last failure raised as a
        ShardcookIOError saying that `what` (`reading x in msc://p/d`) failed."""
        ...

    def read(self, name: str) -> bytes:
        """The whole object (FileNotFoundError when it is gone, OSError when unreadable)."""
        ...

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        ...

    def open_stream(self, name: str, buffer_size: int = 8 << 20) -> io.BufferedReader:
        """A seekable reader of the object, read sequentially: in a bucket one ranged GET of
        `buffer_size` bytes each time its buffer runs dry; a local file keeps Python's own
        buffer, the system reading ahead. FileNotFoundError when there is none, OSError when it
        is not a regular file."""
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

    def keep_mode(self, name: str, like: str) -> None:
        """Gives object `name` the permissions of `like` where files have them (locally: as
        Energon leaves the files it writes), readable and writable by their owner; a courtesy
        that never fails. Nothing in a bucket."""
        ...

    def file(self, name: str) -> Path | None:
        """The file on this machine that object `name` is, for a tool that takes a path (an
        `flock`, a database); None where objects are no files (a bucket, memory)."""
        ...

    def rust_reads(self, at_once: int) -> RustReads | None:
        """Ranged reads of the folder's objects, `at_once` at a time, on MSC's Rust client
        where the store is a bucket whose profile turns it on (`storage.rustreads`); None
        otherwise (a local folder's and memory's reads are the store's own)."""
        ...

    def absolute(self) -> Store:
        """The same folder, named from anywhere: locally by its absolute path (the working
        folder may change while it is read), a bucket's as it is."""
        ...
