"""A NeMo AutoModel cache in object storage (`encode --layout automodel --output-dir
msc://...`) seen through a local folder, for `validate` and `info`: its metadata files and
shardcook's records are copied under a scratch folder, and each cache file is a placeholder of
its size (a sparse file) until a check reads it, when it is downloaded for that read
(`CacheCopy.fetched`). The run's shards are left out: the checks read the cache, not them. The
entries there name their files by URL: the copy's metadata shards name them in the copy
(`CacheCopy.local`), and `shown` names the bucket again in what the checks say."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcook.dataset.cachefolder import BUCKET_FOLDER, CACHE_SUFFIXES
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.automodel import CACHE_RECORD
from shardcook.layouts.names import MANIFEST_JSON, OURS_DIR
from shardcook.storage import Listed, access_problem, bad_segment, credentials_of, describe_error
from shardcook.storage.store import Store

#: shardcook's records `info` shows of a cache it wrote.
RECORDS = (CACHE_RECORD, f"{OURS_DIR}/{MANIFEST_JSON}")


@dataclass
class CacheCopy:
    """The local folder `root` standing for the cache at `url` in `store`; `waiting` are the
    placeholders not downloaded yet."""

    root: Path
    url: str
    store: Store
    waiting: set[Path] = field(default_factory=set)

    def local(self, entries: list[Any]) -> list[Any]:
        """A metadata shard's entries, each `cache_file` naming a file in the bucket renamed to
        its place in the copy (anything else as it is, for the checks to judge)."""
        for entry in entries:
            name = entry.get("cache_file") if isinstance(entry, dict) else None
            if isinstance(name, str) and name.startswith(f"{self.url}/"):
                entry["cache_file"] = f"{self.root}{name[len(self.url):]}"
        return entries

    @contextmanager
    def fetched(self, path: Path) -> Iterator[None]:
        """The cache file the placeholder `path` stands for, downloaded for the block, then a
        placeholder again (so a deep check holds one file at a time); any other path as it is."""
        if path not in self.waiting:
            yield
            return
        size = path.stat().st_size
        try:
            _download(self.store, path.relative_to(self.root).as_posix(), path)
            yield
        finally:
            with open(path, "wb") as f:
                f.truncate(size)

    def shown(self, text: str) -> str:
        """`text` naming the bucket where it names the copy."""
        return text.replace(str(self.root), self.url)


def _kept(name: str) -> str | None:
    """How the copy holds object `name`: "copy" (metadata files, records), "placeholder"
    (cache files), None (left out: the run's shards and the rest of its records)."""
    if name in RECORDS or ("/" not in name and name.endswith(".json")):
        return "copy"
    folder, _, file = name.partition("/")
    if BUCKET_FOLDER.match(folder) and "/" not in file and file.endswith(CACHE_SUFFIXES):
        return "placeholder"
    return None


@contextmanager
def cache_copy(store: Store, scratch_dir: str | os.PathLike[str] | None = None
               ) -> Iterator[CacheCopy]:
    """The copy of the cache in `store` under a new folder in `scratch_dir`, removed when the
    block ends.

    Raises:
        ConfigError: the store cannot be listed.
        DatasetError: an object cannot be downloaded, or scratch cannot be written.
    """
    try:
        scratch = Path(tempfile.mkdtemp(prefix="shardcook-cache-", dir=scratch_dir)).resolve()
    except OSError as e:
        where = scratch_dir or "the temporary folder"
        raise DatasetError(f"cannot make a scratch folder in {where} ({e.strerror or e}); "
                           "give --scratch-dir a folder with room") from None
    url = str(store)
    try:
        copy = CacheCopy(scratch / "cache", url, store)
        copy.root.mkdir()
        for name, size, _ in _listing(store, url):
            how = _kept(name) if bad_segment(name) is None else None
            if how is None:
                continue
            path = copy.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if how == "copy":
                _download(store, name, path)
                _localise(copy, path)
            else:
                with open(path, "wb") as f:
                    f.truncate(size)
                copy.waiting.add(path)
        yield copy
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _localise(copy: CacheCopy, path: Path) -> None:
    """A copied metadata shard (a top-level JSON list) with its entries read against the copy
    (`CacheCopy.local`); any other file, or one that is not JSON, as it is."""
    if path.parent != copy.root:
        return
    try:
        entries = json.loads(path.read_bytes())
    except ValueError:
        return
    if isinstance(entries, list):
        path.write_text(json.dumps(copy.local(entries)), encoding="utf-8")


def _listing(store: Store, url: str) -> list[Listed]:
    try:
        return list(store.listing())
    except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
        raise ConfigError(access_problem("The dataset", url, "read", e) or
                          f"cannot list {url} ({describe_error(e)}); check the bucket, the "
                          f"path and {credentials_of(url)}") from None


def _download(store: Store, name: str, path: Path) -> None:
    try:
        store.download(name, path)
    except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
        raise DatasetError(f"cannot download {store.child(name)} ({describe_error(e)})"
                           ) from None
