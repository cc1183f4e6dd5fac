"""AutoModel's diffusion cache written from a finished run's shards (`encode --layout
automodel`'s finalize): each sample's cache file at `<out>/<WxH>/<md5>.pt` (`.meta` for video),
then `metadata_shard_NNNN.json` (AutoModel's entries, in input order, `METADATA_SHARD_SIZE` a
file) and last `metadata.json`, which names them; AutoModel's loaders read nothing else. Every
file is replaced atomically, so a finalize run again writes the same bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shardcook._native import read_shard
from shardcook.errors import DatasetError
from shardcook.files import write_atomic
from shardcook.layouts.automodel import (
    CACHE_PART,
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
