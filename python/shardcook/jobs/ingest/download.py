"""HTTP downloads for `ingest`: MLCommons manifests (a `.uri` file holding the base URL beside a
`.md5` file of `MD5 FILENAME` lines, as Primus reads them) and files fetched with urllib over
http(s) only, retried by tenacity with exponential backoff, given up when stalled,
MD5-verified, and given their name only when whole."""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from shardcook.config.ingest import Retry
from shardcook.errors import ConfigError, ErrorKind, ShardcookError

log = logging.getLogger(__name__)

#: A transfer that moves fewer bytes than this in a stall window (`Retry.stall_s`) is stalled.
STALL_BYTES = 64 << 10
#: The only URL schemes ingest downloads from.
SCHEMES = ("http", "https")
USER_AGENT = "shardcook"
#: A manifest (`.uri`, `.md5`) larger than this is refused.
MAX_TEXT_BYTES = 64 << 20
CHUNK = 1 << 20


class DownloadError(ShardcookError):
    """A file could not be downloaded whole with the right MD5 after every retry."""

    kind: ErrorKind = "download"


@dataclass(frozen=True)
class ManifestEntry:
    md5: str
    name: str


def _retryable(e: BaseException) -> bool:
    if isinstance(e, urllib.error.HTTPError):
        return e.code == 429 or 500 <= e.code < 600
    return isinstance(e, (urllib.error.URLError, http.client.HTTPException, OSError,
                          _Md5Mismatch))


class _Md5Mismatch(Exception):
    pass


class _Stalled(TimeoutError):
    """A transfer moved too little for too long (retried like a socket timeout)."""


class _Progress:
    """Notices a stalled transfer: fewer than `STALL_BYTES` in any `window_s`."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.start = time.monotonic()
        self.moved = 0

    def add(self, n: int) -> None:
        self.moved += n
        now = time.monotonic()
        if now - self.start < self.window_s:
            return
        if self.moved < STALL_BYTES:
            raise _Stalled(f"stalled: {self.moved} bytes in {now - self.start:.0f} s")
        self.start, self.moved = now, 0


def http_url(url: str, what: str) -> str:
    """`url` when it is an http(s) address with a host, else ConfigError: ingest reads nothing
    through urllib's other schemes (`file:`, `ftp:`, `data:`)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in SCHEMES or not parts.netloc:
        raise ConfigError(f"{what} is {url!r}, not an http(s) address; ingest downloads only "
                          "over http and https")
    return url


def fetch_text(url: str, retry: Retry) -> str:
    """A small text resource (a manifest), retried like a file."""
    try:
        for attempt in _attempts(retry, url):
            with attempt:
                req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
                with urllib.request.urlopen(req, timeout=retry.stall_s) as resp:
                    return _read_text(resp, url, retry.stall_s)
    except (urllib.error.URLError, http.client.HTTPException, OSError,
            UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {url} ({e}); check the address") from None
    raise AssertionError("unreachable")


def _attempts(retry: Retry, url: str, stop: threading.Event | None = None) -> Retrying:
    """`retry.attempts` tries of what fails retryably (`_retryable`), the delay doubling from
    `retry.base_delay_s` up to `retry.max_delay_s`; the last failure is raised as it is. Setting
    `stop` ends a delay at once with DownloadError("cancelled")."""
    def sleep(seconds: float) -> None:
        if (stop or threading.Event()).wait(seconds):
            raise DownloadError("cancelled")

    def say(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        log.warning("%s: %s; retry %d of %d", url, str(failure) or type(failure).__name__,
                    state.attempt_number, retry.attempts - 1)

    return Retrying(stop=stop_after_attempt(retry.attempts), sleep=sleep, reraise=True,
                    wait=wait_exponential(multiplier=retry.base_delay_s, max=retry.max_delay_s),
                    retry=retry_if_exception(_retryable), before_sleep=say)


def _read_text(resp: http.client.HTTPResponse, url: str, stall_s: float) -> str:
    """A manifest's body, at most `MAX_TEXT_BYTES`, given up on when stalled."""
    progress = _Progress(stall_s)
    data = bytearray()
    while chunk := resp.read1(CHUNK):
        progress.add(len(chunk))
        data += chunk
        if len(data) > MAX_TEXT_BYTES:
            raise ConfigError(f"{url} is larger than {MAX_TEXT_BYTES:,} bytes, too large for a "
                              "manifest; check the address")
    return bytes(data).decode("utf-8")


def safe_name(name: str) -> str:
    """`name` when it is a plain file name inside the download folder, else ConfigError: a
    manifest that names `../x`, `/x` or `a/b` is refused, never followed."""
    path = PurePosixPath(name)
    if (not name or "\\" in name or "\x00" in name or path.is_absolute() or len(path.parts) != 1
            or name in (".", "..")):
        raise ConfigError(f"the manifest names {name!r}, which is not a plain file name; "
                          "it is refused so nothing is written outside the download folder")
    return name


def parse_md5_manifest(text: str, source: str) -> list[ManifestEntry]:
    """`MD5 FILENAME` lines, sorted by name (the shard order), names checked by `safe_name`."""
    entries = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(None, 1)
        md5 = fields[0].lower()
        if len(fields) != 2 or len(md5) != 32 or any(c not in "0123456789abcdef" for c in md5):
            raise ConfigError(f"{source} line {n} is not `MD5 FILENAME`; fix the manifest")
        entries.append(ManifestEntry(md5, safe_name(fields[1].strip())))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source} names a file twice; fix the manifest")
    return sorted(entries, key=lambda e: e.name)


def fetch_manifest(manifest_url: str, retry: Retry) -> tuple[str, list[ManifestEntry]]:
    """(base URL, entries) from an MLCommons manifest URL ending in `.uri` or `.md5`: the
    `.uri` file holds the base URL, the `.md5` file the entries."""
    stem, dot, suffix = http_url(manifest_url, "manifest_url").rpartition(".")
    if not dot or suffix not in ("uri", "md5"):
        raise ConfigError(f"manifest_url {manifest_url!r} must end in .uri or .md5 (MLCommons "
                          "publishes both side by side)")
    base = http_url(fetch_text(f"{stem}.uri", retry).strip(), f"the base URL in {stem}.uri")
    return base.rstrip("/"), parse_md5_manifest(fetch_text(f"{stem}.md5", retry), f"{stem}.md5")


def md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, dest: Path, md5: str | None, retry: Retry, scratch: Path,
             cancel: threading.Event | None = None) -> None:
    """Downloads `url` to `dest` through a file of the same name in `scratch` (another folder,
    so no name a manifest lists can be a partial download's), checking the MD5 while it streams
    and the size of what is kept; `dest` appears only when whole and right. Setting `cancel`
    stops it between chunks.

    Raises:
        DownloadError: every attempt failed (its message gives the last reason), or cancelled.
    """
    assert scratch.resolve() != dest.parent.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    part = scratch / dest.name
    stop = cancel or threading.Event()
    tries = 0
    try:
        for attempt in _attempts(retry, url, stop):
            with attempt:
                tries += 1
                if stop.is_set():
                    raise DownloadError("cancelled")
                try:
                    size = _fetch_to(url, part, md5, retry.stall_s, stop)
                    if part.stat().st_size != size:  # what is kept is what was checked
                        raise _Md5Mismatch(f"{part} holds {part.stat().st_size} bytes, not the "
                                           f"{size} downloaded")
                except BaseException:
                    part.unlink(missing_ok=True)
                    raise
                os.replace(part, dest)
    except (urllib.error.URLError, http.client.HTTPException, OSError, _Md5Mismatch) as e:
        raise DownloadError(f"{str(e) or type(e).__name__} (after {tries} attempt(s))") from None


def _fetch_to(url: str, part: Path, md5: str | None, stall_s: float,
              stop: threading.Event) -> int:
    """One attempt: `url`'s body into `part`, its MD5 checked; returns its size."""
    digest = hashlib.md5(usedforsecurity=False)
    progress = _Progress(stall_s)
    size = 0
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(req, timeout=stall_s) as resp, open(part, "wb") as f:
        while chunk := resp.read1(CHUNK):
            if stop.is_set():
                raise DownloadError("cancelled")
            progress.add(len(chunk))
            digest.update(chunk)
            f.write(chunk)
            size += len(chunk)
    if md5 is not None and digest.hexdigest() != md5:
        raise _Md5Mismatch(f"MD5 {digest.hexdigest()} is not the manifest's {md5}")
    return size
