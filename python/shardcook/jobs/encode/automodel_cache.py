"""AutoModel's diffusion cache written from a finished run's shards (`encode --layout
automodel`'s finalize): each sample's cache file at `<out>/<WxH>/<md5>.pt` (`.meta` for video),
then `metadata_shard_NNNN.json` (AutoModel's entries, in input order, `METADATA_SHARD_SIZE` a
file) and last `metadata.json`, which names them; AutoModel's loaders read nothing else. Every
file is replaced atomically, so a finalize run again writes the same bytes.

Once every file is written and its size checked, `.shardcook/automodel_cache.json` records the
cache, and each shard is rewritten without its cache files (`slim_shard`): its samples keep their
metadata entries, so the run's records stay true (a unit is done while its marker and shard are
there) and a cache of millions of samples is on disk once, not twice. A later finalize (a rerun
of the same command) finds the record and writes nothing, only slims shards a killed finalize
left whole."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

from shardcook._native import ShardWriter, read_shard
from shardcook.errors import DatasetError
from shardcook.files import write_atomic
from shardcook.layouts.automodel import (
    CACHE_PART,
    CACHE_RECORD,
    ENTRY_PART,
    METADATA_FILE,
    METADATA_SHARD_SIZE,
    metadata_shard_name,
)


def _entry(root: Path, parts: Mapping[str, bytes], shard: str) -> dict[str, Any]:
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
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)
    # the shard is deleted once the cache is recorded: a short file must stop that here
    if path.stat().st_size != len(data):
        raise DatasetError(f"{path} holds {path.stat().st_size} bytes after writing "
                           f"{len(data)}; check the disk and rerun the same command.")
    return {"cache_file": str(path), **entry}


def write_cache(root: Path, shards: Sequence[str], identity: Mapping[str, Any],
                extra: Mapping[str, Any]) -> int:
    """The cache of `shards` (in order) under `root`; `identity` gives metadata.json's
    processor, model_name and model_type, `extra` its closing fields. Returns its samples."""
    root = root.absolute()
    entries = [_entry(root, sample.parts, shard)
               for shard in shards for sample in read_shard(root / shard)]
    names = []
    for n, start in enumerate(range(0, len(entries), METADATA_SHARD_SIZE)):
        names.append(metadata_shard_name(n))
        write_atomic(root / names[-1], json.dumps(
            entries[start:start + METADATA_SHARD_SIZE], indent=2).encode("utf-8"))
    metadata = {**identity, "total_items": len(entries), "num_shards": len(names),
                "shard_size": METADATA_SHARD_SIZE, "shards": names, **extra}
    write_atomic(root / METADATA_FILE, json.dumps(metadata, indent=2).encode("utf-8"))
    return len(entries)


def recorded_cache(root: Path) -> int | None:
    """The samples of the cache a finalize recorded under `root`, None when none did."""
    try:
        record = json.loads((root / CACHE_RECORD).read_bytes())
        return int(record["total_items"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        raise DatasetError(f"{root / CACHE_RECORD} is damaged; rerun encode with "
                           "--overwrite.") from None


def slim_shard(path: Path) -> None:
    """Rewrites the shard at `path` with each sample's metadata entry alone (it is already so
    when its first sample has no cache file part), replacing it atomically."""
    samples = read_shard(path)
    first = next(samples, None)
    if first is None or CACHE_PART not in first.parts:
        return
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


def finish_cache(root: Path, shards: Sequence[str], identity: Mapping[str, Any],
                 extra: Mapping[str, Any]) -> tuple[int, bool]:
    """The cache of a finished run: written from `shards` (`write_cache`), recorded, then the
    shards slimmed; or, when a finalize recorded it already, only any shards left whole slimmed.
    Returns (its samples, whether it was written now)."""
    root = root.absolute()
    recorded = recorded_cache(root)
    done = recorded if recorded is not None else write_cache(root, shards, identity, extra)
    if recorded is None:
        write_atomic(root / CACHE_RECORD, json.dumps(
            {"total_items": done, "metadata": METADATA_FILE}).encode("utf-8"))
    for shard in shards:
        slim_shard(root / shard)
    return done, recorded is None
