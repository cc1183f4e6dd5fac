"""`shardcook info` (and `report`'s page) on a NeMo AutoModel diffusion cache: its count,
model_type, buckets, the keys of its first file (loaded with `weights_only=True`), and what
shardcook recorded when it wrote the cache (`.shardcook/automodel_cache.json` and the run's
manifest)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shardcook.dataset.cachefolder import CacheFolder, Fetched, bucket_of, cache_path
from shardcook.errors import DatasetError
from shardcook.layouts.automodel import CACHE_RECORD
from shardcook.layouts.names import MANIFEST_JSON, OURS_DIR

#: The manifest's facts `info` shows of a cache shardcook wrote.
MANIFEST_FACTS = ("shardcook_version", "model", "latent_mode", "latent_seed", "precision",
                  "stored_dtype", "latent_channels")


@dataclass
class CacheSummary:
    """What an AutoModel cache holds."""

    directory: str
    processor: object
    model_type: object
    samples: object
    #: Entries per bucket, `WxH` (`?` for an entry without one), smallest first.
    buckets: dict[str, int] = field(default_factory=dict)
    #: The first file's keys: `dtype[shape]` for tensors, else the value's type and value.
    keys: dict[str, str] = field(default_factory=dict)
    #: What shardcook recorded of the run that wrote it; None when another tool wrote it.
    written_by_shardcook: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [f"cache:       {self.directory} (NeMo AutoModel diffusion cache)",
               f"model_type:  {self.model_type} (processor {self.processor})",
               f"samples:     {self.samples:,}" if isinstance(self.samples, int)
               else f"samples:     {self.samples!r}",
               f"buckets:     {len(self.buckets)}"]
        out += [f"  {name + ':':<12} {n:,}" for name, n in self.buckets.items()]
        if self.keys:
            out.append("keys of the first file:")
            out += [f"  {name:<26} {desc}" for name, desc in self.keys.items()]
        if self.written_by_shardcook is not None:
            out.append("written by shardcook:")
            out += [f"  {name:<26} {value}" for name, value in self.written_by_shardcook.items()]
        return out


def cache_summary(root: Path, fetched: Fetched | None = None) -> CacheSummary:
    """The summary of the cache in `root` (no checks: `validate` makes them); `fetched`: a
    copy's (`CacheFolder.fetched`).

    Raises:
        DatasetError: its metadata.json is not AutoModel's.
    """
    return summarize_cache(CacheFolder.read(root, fetched))


def summarize_cache(cache: CacheFolder) -> CacheSummary:
    """The summary of `cache`, read."""
    root, meta = cache.root, cache.metadata
    buckets = Counter(f"{b[0]}x{b[1]}" if (b := bucket_of(e)) else "?"
                      for _, e in cache.entries())
    ordered = dict(sorted(buckets.items(), key=lambda kv: _pixels(kv[0])))
    return CacheSummary(directory=str(root), processor=meta.get("processor"),
                        model_type=meta.get("model_type"), samples=meta.get("total_items"),
                        buckets=ordered, keys=_first_keys(cache),
                        written_by_shardcook=_record(root))


def _pixels(bucket: str) -> tuple[int, str]:
    width, _, height = bucket.partition("x")
    return (int(width) * int(height) if width.isdigit() and height.isdigit() else 0), bucket


def _first_keys(cache: CacheFolder) -> dict[str, str]:
    first = next((cache_path(cache.root, e) for _, e in cache.entries()), None)
    if first is None:
        return {}
    try:
        data = cache.load(first)
    except DatasetError as e:
        return {"(unreadable)": str(e)}
    return describe_keys(data)


def describe_keys(data: dict[str, Any]) -> dict[str, str]:
    """A cache file's keys: `dtype[shape]` for tensors, else the value's repr, shortened."""
    import torch

    out = {}
    for name, value in data.items():
        if isinstance(value, torch.Tensor):
            out[str(name)] = f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        else:
            shown = repr(value)
            out[str(name)] = shown if len(shown) <= 60 else shown[:57] + "..."
    return out


def _record(root: Path) -> dict[str, Any] | None:
    """The record finalize wrote and the run's manifest facts; None without the record."""
    try:
        record = json.loads((root / CACHE_RECORD).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    facts = {f"recorded {name}": value for name, value in record.items()}
    try:
        manifest = json.loads((root / OURS_DIR / MANIFEST_JSON).read_bytes())
    except (OSError, ValueError):
        manifest = None
    if isinstance(manifest, dict):
        facts |= {name: manifest[name] for name in MANIFEST_FACTS if name in manifest}
        norm = manifest.get("normalisation")
        if isinstance(norm, dict) and "kind" in norm:
            facts["normalisation"] = norm["kind"]
    return facts
