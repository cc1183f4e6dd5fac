"""HTTP downloads for `ingest`: MLCommons manifests (a `.uri` file holding the base URL beside a
`.md5` file of `MD5 FILENAME` lines, as Primus reads them) and files fetched with requests over
http(s) only, retried by tenacity with exponential backoff and given up when stalled. pooch
(`retrieve`) writes each file to a temporary name beside it, checks its MD5 and gives it its name
only when whole and right. A URL's password is shown as `***` (`storage.redact`) in every
message; only the download itself uses it."""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pooch
import requests
import urllib3
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from shardcook.config.ingest import Retry
from shardcook.errors import ConfigError, ErrorKind, ShardcookError
from shardcook.storage.urls import redact

log = logging.getLogger(__name__)
# pooch says every download on stderr; ingest's log and report say what matters
pooch.get_logger().setLevel(logging.WARNING)

#: A transfer that moves fewer bytes than this in a stall window (`Retry.stall_s`) is stalled.
STALL_BYTES = 64 << 10
#: The only URL schemes ingest downloads from.
SCHEMES = ("http", "https")
#: `identity`: the bytes kept are the bytes the manifest's MD5 is of, never a compressed body.
HEADERS = {"User-Agent": "shardcook", "Accept-Encoding": "identity"}
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


class _HttpError(OSError):
    """The server answered with an error status."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP Error {status}: {reason}")
        self.status = status


class _Md5Mismatch(Exception):
    pass


#: What a failed transfer raises: requests' errors are OSErrors, urllib3's (a body cut short, a
#: read timed out, while the body streams) are not.
TRANSFER_ERRORS = (OSError, urllib3.exceptions.HTTPError)


def _said(e: BaseException) -> str:
    """`e` as a reason (redacted): a connection that failed says why, not requests' summary of
    its pool, and a body cut short says so, not the tuple urllib3 raises."""
    cause = e.args[0] if isinstance(e, requests.ConnectionError) and e.args else None
    if isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
        e = cause.reason
    if isinstance(e, urllib3.exceptions.ProtocolError) and e.args:
        return redact(str(e.args[0]))
    return redact(str(e) or type(e).__name__)


def _retryable(e: BaseException) -> bool:
    if isinstance(e, _HttpError):
        return e.status == 429 or 500 <= e.status < 600
    if isinstance(e, ValueError):  # requests' refusal of a URL (a redirect to `file:`)
        return False
    return isinstance(e, (*TRANSFER_ERRORS, _Md5Mismatch))


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
    through any other scheme (`file:`, `ftp:`, `data:`)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in SCHEMES or not parts.netloc:
        raise ConfigError(f"{what} is {redact(repr(url))}, not an http(s) address; ingest "
                          "downloads only over http and https")
    return url


def _get(url: str, stall_s: float, stop: threading.Event, sink: Callable[[bytes], object],
         ) -> None:
    """One GET of `url`, its body handed to `sink` as it arrives; given up when stalled, and
    with DownloadError("cancelled") once `stop` is set."""
    with requests.get(url, headers=HEADERS, stream=True, timeout=stall_s) as resp:
        if resp.status_code >= 400:
            raise _HttpError(resp.status_code, resp.reason)
        progress = _Progress(stall_s)
        # read1: what has arrived, so a trickle is noticed (a full chunk may never come)
        while chunk := resp.raw.read1(CHUNK):
            if stop.is_set():
                raise DownloadError("cancelled")
            progress.add(len(chunk))
            sink(chunk)


def fetch_text(url: str, retry: Retry) -> str:
    """A small text resource (a manifest), at most `MAX_TEXT_BYTES`, retried like a file."""
    def keep(chunk: bytes) -> None:
        data.extend(chunk)
        if len(data) > MAX_TEXT_BYTES:
            raise ConfigError(f"{redact(url)} is larger than {MAX_TEXT_BYTES:,} bytes, too large "
                              "for a manifest; check the address")

    try:
        for attempt in _attempts(retry, url):
            with attempt:
                data = bytearray()
                _get(url, retry.stall_s, threading.Event(), keep)
                return bytes(data).decode("utf-8")
    except (*TRANSFER_ERRORS, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {redact(url)} ({_said(e)}); check the address") from None
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
        log.warning("%s: %s; retry %d of %d", redact(url), _said(failure) if failure else "failed",
                    state.attempt_number, retry.attempts - 1)

    return Retrying(stop=stop_after_attempt(retry.attempts), sleep=sleep, reraise=True,
                    wait=wait_exponential(multiplier=retry.base_delay_s, max=retry.max_delay_s),
                    retry=retry_if_exception(_retryable), before_sleep=say)


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
        raise ConfigError(f"manifest_url {redact(repr(manifest_url))} must end in .uri or .md5 "
                          "(MLCommons publishes both side by side)")
    base = http_url(fetch_text(f"{stem}.uri", retry).strip(),
                    f"the base URL in {redact(stem)}.uri")
    return base.rstrip("/"), parse_md5_manifest(fetch_text(f"{stem}.md5", retry),
                                                f"{redact(stem)}.md5")


def download(url: str, dest: Path, md5: str | None, retry: Retry,
             cancel: threading.Event | None = None) -> None:
    """Downloads `url` to `dest` through a temporary file beside it (pooch's, removed when an
    attempt fails), checking its MD5; `dest` appears only when whole and right. Setting `cancel`
    stops it between chunks.

    Raises:
        DownloadError: every attempt failed (its message gives the last reason), or cancelled.
    """
    stop = cancel or threading.Event()
    tries = 0

    def fetch(url: str, output_file: str, _: object) -> None:
        with open(output_file, "wb") as f:
            _get(url, retry.stall_s, stop, f.write)

    try:
        for attempt in _attempts(retry, url, stop):
            with attempt:
                tries += 1
                if stop.is_set():
                    raise DownloadError("cancelled")
                try:
                    pooch.retrieve(url, known_hash=f"md5:{md5}" if md5 else None,
                                   fname=dest.name, path=dest.parent, downloader=fetch)
                except ValueError as e:
                    if isinstance(e, TRANSFER_ERRORS):  # requests' InvalidURL is one too
                        raise
                    # pooch's only ValueError: the hash of what was downloaded is not `md5`
                    raise _Md5Mismatch(f"the MD5 of what was downloaded is not the manifest's "
                                       f"{md5}") from None
    except (*TRANSFER_ERRORS, _Md5Mismatch) as e:
        raise DownloadError(f"{_said(e)} (after {tries} attempt(s))") from None
