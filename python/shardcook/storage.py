"""Object storage: URLs (`msc://PROFILE/path`, `s3://bucket/path`, `gs://`, `az://`) read and
written through NVIDIA's Multi-Storage Client, the client Megatron-Energon itself opens such
datasets with, so the same profiles (`MSC_CONFIG`, `~/.msc_config.yaml`) and credentials serve
both. Every other module asks `is_url` first and never joins a URL as a local path.

`check_url` refuses a URL that cannot work (unknown scheme, missing profile, missing client
package) in one sentence before anything is read or written; `Remote` is a folder in a bucket
with the few operations shardcook needs, each one MSC call.
"""

from __future__ import annotations

import errno
import io
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from shardcook.errors import ConfigError

__all__ = ["SCHEMES", "Listed", "Remote", "access_problem", "bad_segment", "check_url",
           "credentials_of", "describe_error", "is_url", "redact", "remote", "segment_named"]

#: The schemes MSC resolves: its own profiles, and the stores it reaches without a profile.
SCHEMES = ("msc", "s3", "gs", "az")

#: `scheme://` anywhere, or `scheme:/` at the start: what `pathlib.Path` makes of a URL
#: (`Path("s3://b/x")` is `s3:/b/x`), so a URL that went through a Path is still caught.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):/|(?P<inner>[A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(value: object) -> str | None:
    """The scheme of `value` when it is a URL (also one a `pathlib.Path` has mangled), else
    None."""
    if not isinstance(value, (str, os.PathLike)):
        return None
    text = os.fspath(value)
    if not isinstance(text, str):
        return None
    match = _URL.search(text)
    if match is None:
        return None
    return (match.group("scheme") or match.group("inner")).lower()


def is_url(value: object) -> bool:
    """True when `value` names a location by URL rather than a local path."""
    return url_scheme(value) is not None


def _text(value: object) -> str:
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else str(value)
    return text if isinstance(text, str) else repr(text)


#: `scheme://userinfo@`: the user (and password) part of a URL, up to the last `@` before the
#: host's end (a password may hold `@`).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s\"']*)@")


def redact(text: str) -> str:
    """`text` with the password of every `scheme://user:password@host` in it shown as `***`
    (`user:***@`), and a user part without a password (which may be a token) as `***@`: for
    every message that quotes a URL, an endpoint or what the client said about one."""
    def hide(match: re.Match[str]) -> str:
        user, colon, _ = match["userinfo"].partition(":")
        return f"{match['scheme']}{user + ':' if colon else ''}***@"

    return _USERINFO.sub(hide, text)


def check_url(value: object, what: str) -> str:
    """`value` as a URL string once it is known that MSC can open it.

    Raises:
        ConfigError: the scheme is not one MSC reads, the URL went through a local path (one
            slash after the scheme), its path has an empty, `.` or `..` segment (one trailing
            `/` is allowed), the `msc://` profile is not configured, or the client package for
            the store is not installed.
    """
    scheme = url_scheme(value)
    text = _text(value)
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
            "'..' or "
            "empty segments.")
    _client(text, what)
    return text


def bad_segment(path: str) -> str | None:
    """The first segment of the `/`-separated `path` that is empty, `.` or `..` (a leading `/`
    is an empty one), or None when every segment is a name. Such a path names one object in a
    store, which keeps keys as they are, and another place to anything that normalizes paths
    (Energon, a local file system)."""
    return next((part for part in path.split("/") if part in ("", ".", "..")), None)


def segment_named(segment: str) -> str:
    """`bad_segment`'s answer in words: "a '..' segment", "an empty segment (//)"."""
    return f"a {segment!r} segment" if segment else "an empty segment (//)"


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
        raise ConfigError(_profile_problem(url, what, e)) from None


def _profile(url: str) -> str | None:
    """The MSC profile an `msc://` URL names; None for other URLs."""
    return url[len("msc://"):].split("/", 1)[0] if url.startswith("msc://") else None


def _config_file() -> str:
    """The file MSC reads its profiles from."""
    return os.environ.get("MSC_CONFIG") or "~/.msc_config.yaml"


def _profile_problem(url: str, what: str, error: Exception) -> str:
    profile = _profile(url)
    if profile is not None:
        return (f"{what} {url!r}: the Multi-Storage Client cannot open profile {profile!r} "
                f"({describe_error(error)}); define it in {_config_file()} (MSC_CONFIG names "
                "the file).")
    return (f"{what} {redact(url)!r}: the Multi-Storage Client cannot open it "
            f"({describe_error(error)}).")


def describe_error(error: BaseException) -> str:
    """What the client's `error` says, on one line of at most 200 characters, for a sentence;
    a password in an endpoint it quotes is redacted."""
    text = redact(" ".join(str(error).split())) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


#: S3 error codes that refuse the credentials themselves, not what they may do.
_BAD_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
                              "ExpiredToken", "InvalidClientTokenId", "TokenRefreshRequired"})
#: What the credentials need, by what the command does there.
_NEEDED = {"read": "list and read objects there (on S3: s3:ListBucket, s3:GetObject)",
           "write": "list, write and delete objects there (on S3: s3:ListBucket, s3:PutObject, "
                    "s3:DeleteObject)"}


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and what it was raised from, in turn (the client wraps the store's errors)."""
    seen: BaseException | None = error
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def _error_code(error: BaseException) -> str | None:
    """The store's error code (`AccessDenied` ...) in `error` or what it was raised from."""
    for seen in _chain(error):
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if code:
                return str(code)
    return None


def credentials_of(url: str) -> str:
    """Whose credentials a request to `url` goes out with, for a sentence: an `msc://` URL's
    profile's, an `s3://` URL's from the AWS variables or files."""
    profile = _profile(url)
    if profile is not None:
        return f"the credentials of profile {profile!r}"
    return "the AWS credentials" if url.startswith("s3://") else "the store's credentials"


def _no_credentials(what: str, url: str) -> str:
    """The sentence for a request that found no credentials at all to go out with."""
    profile = _profile(url)
    if profile is not None:
        return (f"{what} {url!r}: profile {profile!r} names no credentials and none were found "
                "in the AWS variables or files; give the profile a credentials_provider in "
                f"{_config_file()}.")
    if url.startswith("s3://"):
        return (f"{what} {url!r}: no AWS credentials were found for this s3:// URL; set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE and the AWS "
                "credentials file), or reach the bucket through an MSC profile that holds its "
                "credentials (msc://PROFILE/path).")
    return (f"{what} {url!r}: no credentials were found for this store; set them up for its "
            "client, or reach it through an MSC profile that holds them (msc://PROFILE/path).")


def access_problem(what: str, url: str, doing: Literal["read", "write"],
                   error: BaseException) -> str | None:
    """One sentence when the store refused `error`'s request for its credentials (unknown key,
    bad secret, expired token) or their permissions, or no credentials were found to send;
    None for any other failure. `doing` is what the command needs there. Never holds a
    credential.
    """
    if any(type(seen).__name__ == "NoCredentialsError" for seen in _chain(error)):
        return _no_credentials(what, url)
    code = _error_code(error)
    profile = _profile(url)
    whose = credentials_of(url)
    where = (f"in {_config_file()}" if profile else
             "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the AWS credentials file)")
    if code in _BAD_CREDENTIALS:
        return (f"{what} {url!r}: the store refused {whose} ({code}); check the access key and "
                f"secret key {where}.")
    if code in ("AccessDenied", "AllAccessDisabled"):
        return (f"{what} {url!r}: {whose} may not {doing} there ({code}); use credentials "
                f"allowed to {_NEEDED[doing]}.")
    if isinstance(error, PermissionError):
        # a reply without a body (a HEAD's) cannot say whether the key or its rights were wrong
        return (f"{what} {url!r}: the store refused access with {whose}; check the access key "
                f"and secret key {where}, and that they are allowed to {_NEEDED[doing]}.")
    return None


class Listed(NamedTuple):
    """An object as a listing shows it."""

    name: str
    size: int
    etag: str | None


@dataclass(frozen=True)
class Remote:
    """A folder in object storage: `url` has no trailing slash; names are relative to it."""

    url: str

    def __str__(self) -> str:
        return self.url

    def child(self, name: str) -> str:
        """The URL of `name` (a relative path inside this folder)."""
        return f"{self.url}/{name.lstrip('/')}"

    def _resolve(self, name: str) -> tuple[Any, str]:
        return _client(self.child(name), "The URL")

    def exists(self, name: str) -> bool:
        client, path = self._resolve(name)
        return bool(client.is_file(path))

    def write_bytes(self, name: str, data: bytes | str) -> None:
        """Writes the object in one PUT: it appears whole or not at all."""
        client, path = self._resolve(name)
        client.write(path, data.encode() if isinstance(data, str) else data)

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

    def etag(self, name: str) -> str | None:
        """The ETag the store gives object `name` now (None where the store gives none)."""
        client, path = self._resolve(name)
        return client.info(path).etag or None

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        """`size` bytes of the object from `offset` (one ranged GET)."""
        from multistorageclient.types import Range

        client, path = self._resolve(name)
        return bytes(client.read(path, byte_range=Range(offset=offset, size=size)))


def remote(value: object, what: str) -> Remote:
    """The object-storage folder `value` names, once `check_url` passes."""
    return Remote(check_url(value, what).rstrip("/"))
