"""HTTP downloads for `ingest`: MLCommons manifests (a `.uri` file holding the base URL beside a
`.md5` file of `MD5 FILENAME` lines, as Primus reads them) and files fetched with urllib,
retried with exponential backoff, MD5-verified, and given their name only when whole."""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from shardcook.errors import ConfigError, ShardcookError

log = logging.getLogger(__name__)

#: Per request; a stalled server is retried rather than waited on forever.
TIMEOUT_S = 300
USER_AGENT = "shardcook"
CHUNK = 1 << 20


class DownloadError(ShardcookError):
    """A file could not be downloaded whole with the right MD5 after every retry."""


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a download is retried (delay doubles, capped)."""

    attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0

    def delay(self, attempt: int) -> float:
        return float(min(self.base_delay_s * 2 ** attempt, self.max_delay_s))


@dataclass(frozen=True)
class ManifestEntry:
    md5: str
    name: str


def _retryable(e: Exception) -> bool:
    if isinstance(e, urllib.error.HTTPError):
        return e.code == 429 or 500 <= e.code < 600
    return isinstance(e, (urllib.error.URLError, http.client.HTTPException, OSError,
                          _Md5Mismatch))


class _Md5Mismatch(Exception):
    pass


def fetch_text(url: str, retry: Retry) -> str:
    """A small text resource (a manifest), retried like a file."""
    for attempt in range(retry.attempts):
        try:
            req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                return bytes(resp.read()).decode("utf-8")
        except (urllib.error.URLError, http.client.HTTPException, OSError,
                UnicodeDecodeError) as e:
            if isinstance(e, UnicodeDecodeError) or not _retryable(e) or (
                    attempt + 1 == retry.attempts):
                raise ConfigError(f"cannot read {url} ({e}); check the address") from None
            time.sleep(retry.delay(attempt))
    raise AssertionError("unreachable")


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
    stem, dot, suffix = manifest_url.rpartition(".")
    if not dot or suffix not in ("uri", "md5"):
        raise ConfigError(f"manifest_url {manifest_url!r} must end in .uri or .md5 (MLCommons "
                          "publishes both side by side)")
    base = fetch_text(f"{stem}.uri", retry).strip()
    return base.rstrip("/"), parse_md5_manifest(fetch_text(f"{stem}.md5", retry), f"{stem}.md5")


def md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, dest: Path, md5: str | None, retry: Retry,
             cancel: threading.Event | None = None) -> None:
    """Downloads `url` to `dest` via `dest`'s `.part` name, checking the MD5 while it streams;
    `dest` appears only when whole and right. Setting `cancel` stops it between chunks.

    Raises:
        DownloadError: every attempt failed (its message gives the last reason), or cancelled.
    """
    part = dest.with_name(f"{dest.name}.part")
    stop = cancel or threading.Event()
    last = ""
    for attempt in range(retry.attempts):
        try:
            digest = hashlib.md5(usedforsecurity=False)
            req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp, open(part, "wb") as f:
                while chunk := resp.read(CHUNK):
                    if stop.is_set():
                        raise DownloadError("cancelled")
                    digest.update(chunk)
                    f.write(chunk)
            if md5 is not None and digest.hexdigest() != md5:
                raise _Md5Mismatch(f"MD5 {digest.hexdigest()} is not the manifest's {md5}")
            os.replace(part, dest)
            return
        except DownloadError:
            part.unlink(missing_ok=True)
            raise
        except (urllib.error.URLError, http.client.HTTPException, OSError, _Md5Mismatch) as e:
            part.unlink(missing_ok=True)
            last = str(e) or type(e).__name__
            if not _retryable(e) or attempt + 1 == retry.attempts:
                break
            log.warning("%s: %s; retry %d of %d", url, last, attempt + 1, retry.attempts - 1)
            if stop.wait(retry.delay(attempt)):
                raise DownloadError("cancelled") from None
    raise DownloadError(f"{last} (after {attempt + 1} attempt(s))")
