"""A folder in object storage through NVIDIA's Multi-Storage Client, the client
Megatron-Energon itself opens such datasets with, so the same profiles (`MSC_CONFIG`,
`~/.msc_config.yaml`) and credentials serve both. `check_url` refuses a URL that cannot work
(unknown scheme, missing profile, missing client package) in one sentence before anything is
read or written; `Remote` is a folder in a bucket with the few operations shardcook needs,
each one MSC call, and `retried` how a call is tried again; `Listing` is its files as a reader
sees them, listed once.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import posixpath
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

from tenacity import RetryCallState, Retrying, stop_after_attempt, wait_exponential

from shardcook.errors import ConfigError, ShardcookIOError
from shardcook.storage.messages import access_problem, describe_error, profile_problem
from shardcook.storage.msc import provider_of
from shardcook.storage.rustreads import RustReads
from shardcook.storage.store import Listed, normalized
from shardcook.storage.urls import SCHEMES, as_text, bad_segment, redact, segment_named, url_scheme

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Tries per store call, and the wait before the second (doubled before each later one).
TRIES = 3
FIRST_BACKOFF_SECONDS = 0.5


def retried(what: str, call: Callable[[], T],
            failed: Callable[[Exception], str] | None = None) -> T:
    """`call()`, a call to object storage, tried `TRIES` times with doubling waits between (a
    request can fail once and pass the next time: a dropped connection, a throttled store);
    `what` names the call and its store (`uploading 000003.tar to msc://profile/data`).

    Raises:
        ShardcookIOError: the last try failed, in one sentence: `failed(error)` when given,
            else one saying the run stopped.
    """
    def say(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("%s failed (%s); trying again in %.1f s", what,
                    describe_error(error) if error else "?", wait)

    try:
        return Retrying(stop=stop_after_attempt(TRIES), reraise=True, before_sleep=say,
                        wait=wait_exponential(multiplier=FIRST_BACKOFF_SECONDS))(call)
    except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
        raise ShardcookIOError(failed(e) if failed is not None else (
            f"{what} failed {TRIES} times ({describe_error(e)}); the run stopped, keeping the "
            "units recorded so far: rerun the same command to resume.")
        ) from None


def check_url(value: object, what: str) -> str:
    """`value` as a URL string once it is known that MSC can open it (see `_checked`)."""
    return _checked(value, what)[0]


def _checked(value: object, what: str) -> tuple[str, tuple[Any, str]]:
    """`value` as a URL string, and MSC's client for it and the path inside it.

    Raises:
        ConfigError: the scheme is not one MSC reads, the URL went through a local path (one
            slash after the scheme), its path has an empty, `.` or `..` segment (one trailing
            `/` is allowed), the `msc://` profile is not configured, or the client package for
            the store is not installed.
    """
    scheme = url_scheme(value)
    text = as_text(value)
    shown = redact(text)
    if scheme not in SCHEMES:
        raise ConfigError(
            f"{what} {shown!r} is a URL ({scheme}://); shardcook reads and writes local paths "
            f"and {', '.join(s + '://' for s in SCHEMES)} URLs through the Multi-Storage Client."
        )
    if not text.startswith(f"{scheme}://"):
        raise ConfigError(f"{what} {shown!r} is not a whole URL; write it as {scheme}://...")
    rest = text[len(scheme) + 3:]
    if not rest.split("/", 1)[0]:
        what_is_missing = "profile" if scheme == "msc" else "bucket"
        raise ConfigError(f"{what} {shown!r} names no {what_is_missing}; write "
                          f"{scheme}://{what_is_missing.upper()}/path.")
    segment = bad_segment(rest.removesuffix("/"))
    if segment is not None:
        raise ConfigError(
            f"{what} {shown!r} has {segment_named(segment)}, which the store keeps in the object "
            "names while Energon reads the folder it resolves to; write the path without '.', "
            "'..' or empty segments.")
    return text, _client(text, what)


def _client(url: str, what: str) -> tuple[Any, str]:
    """MSC's storage client for `url` and the path inside it, or one sentence why not."""
    try:
        import multistorageclient as msc
    except ImportError:
        raise ConfigError(f"{what} {redact(url)!r} needs the Multi-Storage Client: "
                          "pip install 'multi-storage-client[boto3]'.") from None
    try:
        return msc.resolve_storage_client(url)
    except ImportError as e:
        raise ConfigError(
            f"{what} {redact(url)!r}: the store's client package is missing ({e.name or e}); "
            "install it, for S3: pip install 'multi-storage-client[boto3]'."
        ) from None
    except Exception as e:  # noqa: BLE001 - MSC raises ValueError, KeyError, RuntimeError ...
        raise ConfigError(profile_problem(url, what, e)) from None


#: How long `Remote.create` waits on a store without conditional writes before it reads back.
CREATE_SETTLE_SECONDS = 1.0


class Remote:
    """A folder in object storage, a `store.Store`: `url` has no trailing slash; names are
    relative to it. Its client is resolved once, when first used (or given by `remote`), and
    shared with the folders made from it (`parent`)."""

    readers = 16

    def __init__(self, url: str, resolved: tuple[Any, str] | None = None) -> None:
        self.url = url
        self._resolved = resolved

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"Remote({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Remote) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def child(self, name: str) -> str:
        """The URL of `name` (a relative path inside this folder)."""
        return f"{self.url}/{name.lstrip('/')}"

    def where(self, name: str) -> str:
        """The URL of `name` normalized (`a/../b` is `b`; a `..` past the bucket stays at it)."""
        scheme, _, rest = self.url.partition("://")
        store, _, path = rest.partition("/")
        return f"{scheme}://{store}{posixpath.normpath('/' + posixpath.join(path, name))}"

    def inside(self, name: str) -> bool:
        norm = normalized(name)
        return not (name.startswith("/") or norm == ".." or norm.startswith("../"))

    def reach(self, name: str) -> str | None:
        return self.where(name) if self.inside(name) else None

    def refusal(self, what: str, name: str, error: OSError) -> str:
        return access_problem(what, self.where(name), "read", error) or describe_error(error)

    def contents(self, what: str) -> Listing:
        return Listing(self, what)

    def all_names(self, what: str) -> list[str]:
        """Every object name under this folder, or one sentence why the store cannot list it
        (no credentials, no such bucket, no connection); `what` names the folder.

        Raises:
            ConfigError: the listing failed.
        """
        try:
            return list(self.names())
        except Exception as e:  # noqa: BLE001 - MSC and boto3 raise many kinds; one sentence
            raise ConfigError(access_problem(what, self.url, "read", e) or
                              f"{what} {self.url!r} cannot be listed ({describe_error(e)}); "
                              "check the URL and the store's credentials.") from None

    @property
    def segments(self) -> list[str]:
        """The folder's path inside its bucket or profile, as segments."""
        path = self.url.partition("://")[2].partition("/")[2]
        return path.split("/") if path else []

    @property
    def name(self) -> str:
        """The folder's last segment ("" for a bucket's or profile's root)."""
        return self.segments[-1] if self.segments else ""

    def parent(self) -> Remote | None:
        """The folder this one is in, on the same client; None for a bucket's or profile's
        root."""
        scheme, _, rest = self.url.partition("://")
        store, _, path = rest.partition("/")
        if not path:
            return None
        client, root = self._root()
        above = path.rpartition("/")[0]
        return Remote(f"{scheme}://{store}" + (f"/{above}" if above else ""),
                      (client, root.rpartition("/")[0]))

    def above(self) -> Iterator[Remote]:
        """The folders above this one, nearest first, up to the bucket's or profile's root."""
        folder = self.parent()
        while folder is not None:
            yield folder
            folder = folder.parent()

    def _root(self) -> tuple[Any, str]:
        if self._resolved is None:
            self._resolved = _client(self.url, "The URL")
        return self._resolved

    def rust_reads(self, at_once: int) -> RustReads | None:
        """Ranged reads of this folder's objects on MSC's Rust client, many at once, when the
        profile turns that client on (see `rustreads`); None otherwise."""
        return RustReads.of(self._root()[0], lambda name: self._resolve(name)[1], at_once)

    def _resolve(self, name: str) -> tuple[Any, str]:
        client, root = self._root()
        # as the client resolves a URL: repeated slashes are one
        return client, re.sub(r"/+", "/", f"{root}/{name}" if root else name).lstrip("/")

    def exists(self, name: str) -> bool:
        """Whether object `name` exists: one HEAD. (MSC's `is_file` lists `name/` as well
        when there is no object, a second round trip that a file's answer does not need.)"""
        client, path = self._resolve(name)
        try:
            return bool(client.info(path, strict=False).type == "file")
        except FileNotFoundError:
            return False

    def what_is(self, name: str = "") -> Literal["folder", "file"] | None:
        """The first name of a listing under `name/` (a folder), else a HEAD of the object
        `name` (for "": of the object in the folder above named as this one)."""
        norm = normalized(name)
        try:
            if next(self.names(f"{norm}/" if norm else ""), None) is not None:
                return "folder"
            if norm:
                return "file" if self.exists(norm) else None
            above = self.parent()
            return "file" if above is not None and above.exists(self.name) else None
        except Exception as e:
            raise OSError(errno.EIO, f"cannot look at it ({describe_error(e)})",
                          self.where(name)) from e

    def failure(self, what: str, name: str, doing: Literal["read", "write"],
                error: BaseException) -> str:
        url = self.where(name)
        return access_problem(what, url, doing, error) or (
            f"cannot {doing} {url} ({describe_error(error)}).")

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """`call()` tried again with doubling waits (`retried`)."""
        return retried(what, call)

    def write_bytes(self, name: str, data: bytes | str) -> None:
        """Writes the object in one PUT: it appears whole or not at all."""
        client, path = self._resolve(name)
        client.write(path, data.encode() if isinstance(data, str) else data)

    def create(self, name: str, data: bytes | str) -> bool:
        """Writes the object only when `name` does not exist yet: a conditional PUT
        (`If-None-Match: *`), which the store refuses when the name is taken, so of several
        callers at once exactly one gets True. MSC's client has no such call, so it is made on
        the client's storage provider (`msc.provider_of`); where there is none (a client with a
        metadata provider, a store that refuses the condition), see
        `_create_by_reading_back`."""
        client, path = self._resolve(name)
        body = data.encode() if isinstance(data, str) else data
        provider = provider_of(client)
        if provider is None:
            return self._create_by_reading_back(name, body)
        try:
            return provider.put_if_absent(path, body)
        except NotImplementedError:
            return self._create_by_reading_back(name, body)

    def _create_by_reading_back(self, name: str, body: bytes) -> bool:
        """`create` on a store without conditional writes: `body` is written when the name is
        free and read back after `CREATE_SETTLE_SECONDS`; the caller whose bytes are there then
        created it (callers racing for one name write different bytes: a claim names its
        holder). With read-after-write consistency (S3's) two callers both win only if one
        stalls for longer than that pause between its look and its write."""
        import time

        if self.exists(name):
            return False
        self.write_bytes(name, body)
        time.sleep(CREATE_SETTLE_SECONDS)
        return self.read(name) == body

    def open_stream(self, name: str, buffer_size: int = 8 << 20) -> io.BufferedReader:
        """A sequential reader of the object: one ranged GET of `buffer_size` bytes each time
        its buffer runs dry (a seek inside the buffer costs nothing), so neither memory nor disk
        ever holds the whole object.

        Raises:
            FileNotFoundError: the object does not exist.
        """
        client, path = self._resolve(name)
        # memory_load_limit=0 and no prefetch: MSC's ranged reader, not a download
        try:
            raw = client.open(path, "rb", disable_read_cache=True, memory_load_limit=0,
                              prefetch_file=False)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "No such object", self.child(name)) from None
        return io.BufferedReader(raw, buffer_size)

    def read(self, name: str) -> bytes:
        """The whole object, failing as a local file read does, so a caller that turns an
        unreadable file into a skip does the same for an object.

        Raises:
            FileNotFoundError: the object does not exist (it may have been deleted since it
                was listed).
            OSError: it cannot be read.
        """
        client, path = self._resolve(name)
        try:
            return bytes(client.read(path))
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "No such object", self.child(name)) from None
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise OSError(errno.EIO, f"cannot read it ({describe_error(e)})",
                          self.child(name)) from None

    def probe_write(self, folder: str) -> None:
        """Writes and deletes an empty object in subfolder `folder`: proof that the credentials
        may write and delete here, before any work."""
        probe = f"{folder}/.probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.write_bytes(probe, b"")
        self.delete(probe)

    def keep_mode(self, name: str, like: str) -> None:
        """Nothing: objects have no permissions of their own."""

    def file(self, name: str) -> None:
        """None: objects are no files."""
        return None

    def absolute(self) -> Remote:
        return self

    def upload(self, local_path: str | os.PathLike[str], name: str) -> None:
        """Uploads a local file as object `name`; it appears only once complete."""
        client, path = self._resolve(name)
        client.upload_file(path, os.fspath(local_path))

    def download(self, name: str, local_path: str | os.PathLike[str]) -> None:
        client, path = self._resolve(name)
        client.download_file(path, os.fspath(local_path))

    def delete(self, name: str) -> None:
        client, path = self._resolve(name)
        client.delete(path)

    def names(self, prefix: str = "") -> Iterator[str]:
        """Every object under this folder whose name starts with `prefix`, recursively, as
        names relative to the folder, in the store's (lexicographic) order."""
        for listed in self.listing(prefix):
            yield listed.name

    def listing(self, prefix: str = "") -> Iterator[Listed]:
        """`names(prefix)` with each object's size and ETag, from the same listing."""
        client, root = self._resolve("")
        start = root.rstrip("/") + "/" if root.strip("/") else ""
        for obj in client.list(path=start + prefix):
            key = obj.key.lstrip("/")
            name = key[len(start):] if start and key.startswith(start) else key
            if obj.type != "directory" and name.startswith(prefix):
                yield Listed(name, int(obj.content_length), obj.etag or None)

    def stat(self, name: str) -> Listed:
        """Object `name`'s size and ETag (FileNotFoundError when there is none)."""
        client, path = self._resolve(name)
        info = client.info(path)
        return Listed(name, int(info.content_length), info.etag or None)

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        """`size` bytes of the object from `offset` (one ranged GET)."""
        from multistorageclient.types import Range

        client, path = self._resolve(name)
        return bytes(client.read(path, byte_range=Range(offset=offset, size=size)))


class Listing:
    """A folder in a bucket as a reader sees it, a `store.Contents`: listed once, when first
    asked; an object whose name no file can have is kept aside for `unsafe`."""

    def __init__(self, folder: Remote, what: str) -> None:
        self.folder = folder
        self.what = what
        self._names: set[str] | None = None
        self._unsafe: list[str] = []

    def _listing(self) -> set[str]:
        if self._names is None:
            names = self.folder.all_names(self.what)
            self._unsafe = [n for n in names if bad_segment(n) is not None]
            self._names = set(names).difference(self._unsafe)
        return self._names

    def is_folder(self, sub: str = "") -> bool:
        prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
        return any(n.startswith(prefix) for n in self._listing())

    def is_file_itself(self) -> bool:
        parent = self.folder.parent()
        return (not self._listing() and parent is not None
                and parent.exists(self.folder.name))

    def files(self, sub: str = "") -> list[str]:
        prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
        return sorted(n[len(prefix):] for n in self._listing()
                      if n.startswith(prefix) and "/" not in n[len(prefix):])

    def is_file(self, name: str) -> bool:
        return normalized(name) in self._listing()

    def unsafe(self) -> list[str]:
        self._listing()
        return [f"{self.folder.url}/{name}" for name in self._unsafe]  # as listed, not normalized


def remote(value: object, what: str) -> Remote:
    """The object-storage folder `value` names, its client resolved, once `check_url` passes."""
    url, resolved = _checked(value, what)
    client, path = resolved
    return Remote(url.rstrip("/"), (client, path.rstrip("/")))
