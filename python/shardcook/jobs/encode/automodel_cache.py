"""AutoModel's diffusion cache written from a finished run's shards (`encode --layout
automodel`'s finalize): each sample's cache file at `<out>/<WxH>/<md5>.pt` (`.meta` for video),
then `metadata_shard_NNNN.json` (AutoModel's entries, in input order, `METADATA_SHARD_SIZE` a
file) and last `metadata.json`, which names them; AutoModel's loaders read nothing else. Every
file is put whole (replaced atomically in a folder, one PUT in a bucket), so a finalize run
again writes the same bytes. An entry's `cache_file` is where its file is: the absolute path in
a folder, the URL (`msc://PROFILE/path/WxH/<md5>.pt`) in a bucket.

The run's shards are read through the finalize's `DatasetView`: in place in a folder, a few at a
time under scratch for a bucket; the cache goes through the output folder's `Store`.

Once every file is written (and, in a folder, its size checked), `.shardcook/automodel_cache.json`
records the cache, and each shard is rewritten without its cache files (`slim_shard`): its
samples keep their metadata entries, so the run's records stay true (a unit is done while its
marker and shard are there) and a cache of millions of samples is stored once, not twice. A
later finalize (a rerun of the same command) finds the record and writes nothing, only slims
shards a killed finalize left whole."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

from shardcook._native import ShardWriter, read_shard
from shardcook.dataset.view import DatasetView
from shardcook.errors import DatasetError, ShardcookError
from shardcook.layouts.automodel import (
    CACHE_PART,
    CACHE_RECORD,
    ENTRY_PART,
    METADATA_FILE,
    METADATA_SHARD_SIZE,
    metadata_shard_name,
)
from shardcook.storage.store import Store


def _put(store: Store, name: str, data: bytes) -> None:
    """`name` written whole under the store's retry policy (a shard loses its cache files once
    the cache is recorded: a file written short raises, `Store.write_bytes`)."""
    store.retrying(f"writing {name} to {store}", partial(store.write_bytes, name, data))


def _where(store: Store, name: str) -> str:
    """An entry's `cache_file`: the file's absolute path, or its URL."""
    return store.absolute().child(name)


def _entry(store: Store, parts: Mapping[str, bytes], shard: str) -> dict[str, Any]:
    """A sample's cache file written, and its metadata entry with `cache_file` first."""
    try:
        meta = json.loads(parts[ENTRY_PART])
        name, entry = meta["cache_name"], meta["entry"]
        data = parts[CACHE_PART]
    except (KeyError, ValueError, TypeError):
        raise DatasetError(f"{shard} holds a sample that is not an automodel cache sample; "
                           "rerun encode with --overwrite.") from None
    if not isinstance(name, str) or name.startswith("/") or ".." in name.split("/"):
        raise DatasetError(f"{shard} names a cache file outside the cache ({name!r}).")
    _put(store, name, data)
    return {"cache_file": _where(store, name), **entry}


def write_cache(store: Store, view: DatasetView, shards: Sequence[str],
                identity: Mapping[str, Any], extra: Mapping[str, Any]) -> int:
    """The cache of `shards` (in order, read through `view`) in `store`; `identity` gives
    metadata.json's processor, model_name and model_type, `extra` its closing fields. Returns
    its samples."""
    entries = [_entry(store, sample.parts, shard)
               for window in view.windows(shards) for shard in window
               for sample in read_shard(view.root / shard)]
    names = []
    for n, start in enumerate(range(0, len(entries), METADATA_SHARD_SIZE)):
        names.append(metadata_shard_name(n))
        _put(store, names[-1], json.dumps(
            entries[start:start + METADATA_SHARD_SIZE], indent=2).encode("utf-8"))
    metadata = {**identity, "total_items": len(entries), "num_shards": len(names),
                "shard_size": METADATA_SHARD_SIZE, "shards": names, **extra}
    _put(store, METADATA_FILE, json.dumps(metadata, indent=2).encode("utf-8"))
    return len(entries)


def recorded_cache(store: Store) -> int | None:
    """The samples of the cache a finalize recorded in `store`, None when none did. The record
    is read under the store's retry policy: a failure it gives up on says so; any other
    unreadable record is damaged."""
    try:
        data = store.retrying(f"reading {CACHE_RECORD} in {store}", partial(_record, store))
    except ShardcookError:
        raise
    except OSError:
        raise _damaged(store) from None
    if data is None:
        return None
    try:
        return int(json.loads(data)["total_items"])
    except (ValueError, KeyError, TypeError):
        raise _damaged(store) from None


def _record(store: Store) -> bytes | None:
    try:
        return store.read(CACHE_RECORD)
    except FileNotFoundError:
        return None


def _damaged(store: Store) -> DatasetError:
    return DatasetError(f"{store.child(CACHE_RECORD)} is damaged; rerun encode with "
                        "--overwrite.")


def slim_shard(path: Path) -> bool:
    """Rewrites the shard at `path` with each sample's metadata entry alone (it is already so
    when its first sample has no cache file part), replacing it atomically; whether it did."""
    samples = read_shard(path)
    first = next(samples, None)
    if first is None or CACHE_PART not in first.parts:
        return False
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".slim-") as tmp:
        writer = ShardWriter(tmp, shard_size=1 << 40)
        try:
            for sample in chain([first], samples):
                writer.write(sample.key, [(ENTRY_PART, sample.parts[ENTRY_PART])])
        except BaseException:
            writer.abort()
            raise
        (written,) = writer.close()
        Path(tmp, written.name).replace(path)
    return True


def _slim_shards(view: DatasetView, shards: Sequence[str]) -> None:
    """Every shard slimmed and made the dataset's (`DatasetView.rewritten`: a fetched shard's
    slimmed copy is uploaded over it, and its `.tar.idx` and index rows, which described it
    whole, are deleted)."""
    for window in view.windows(shards):
        for shard in window:
            view.rewritten(shard, now=slim_shard(view.root / shard))


def finish_cache(store: Store, view: DatasetView, shards: Sequence[str],
                 identity: Mapping[str, Any], extra: Mapping[str, Any]) -> tuple[int, bool]:
    """The cache of a finished run in `store` (its output folder, `view` its shards): written
    from `shards` (`write_cache`), recorded, then the shards slimmed; or, when a finalize
    recorded it already, only any shards left whole slimmed. Returns (its samples, whether it
    was written now)."""
    store = store.absolute()
    recorded = recorded_cache(store)
    done = recorded if recorded is not None else write_cache(store, view, shards, identity,
                                                             extra)
    if recorded is None:
        _put(store, CACHE_RECORD, json.dumps(
            {"total_items": done, "metadata": METADATA_FILE}).encode("utf-8"))
    _slim_shards(view, shards)
    return done, recorded is None
