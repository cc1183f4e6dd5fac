"""`validate` on a NeMo AutoModel diffusion cache (`dataset.cachefolder`): its counts agree
(`metadata.json`, the metadata shards, the files present), every listed file is there, inside
the cache, in its bucket's folder, and no file is unlisted; the files read (every one with
`deep`, else the first of each bucket) load without running anything (`weights_only=True`) and
hold their model_type's keys (the family registry's `AutoModelCache.keys`), with the latent of
the family's rank, of its bucket's size / the VAE's downsampling and of the first file's channel
count, and text (and other) tensors of the family's ranks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from shardcook.dataset.cachefolder import (
    BUCKET_FOLDER,
    CacheFolder,
    Fetched,
    bucket_of,
    cache_path,
    load_cache_file,
)
from shardcook.encoders.models import MODELS, ModelFamily
from shardcook.errors import DatasetError
from shardcook.layouts.automodel import IMAGE_SUFFIX, METADATA_FILE, VIDEO_SUFFIX

#: How many names one problem line lists.
NAMED = 3


def _named(paths: list[str]) -> str:
    more = len(paths) - NAMED
    return ", ".join(paths[:NAMED]) + (f" and {more} more" if more > 0 else "")


def cache_problems(root: Path, deep: bool = False, fetched: Fetched | None = None
                   ) -> list[str]:
    """Every problem of the cache in `root` (`fetched`: a copy's, `CacheFolder.fetched`), one
    sentence each."""
    try:
        cache = CacheFolder.read(root, fetched)
    except DatasetError as e:
        return [str(e)]
    problems = _count_problems(cache)
    listed, entry_problems = _listed_files(cache)
    problems += entry_problems
    present = {p.resolve() for p in cache.present()}
    missing = [str(p) for p in listed if not p.is_file()]
    if missing:
        problems.append(f"{len(missing)} cache file(s) listed in the metadata shards are "
                        f"missing: {_named(missing)}")
    unlisted = sorted(str(p.relative_to(root.resolve())) for p in present - set(listed))
    if unlisted:
        problems.append(f"{len(unlisted)} cache file(s) in {root} are listed in no metadata "
                        f"shard: {_named(unlisted)}; AutoModel never reads them")
    family = cache.family
    if family is None:
        problems.append(f"{root / METADATA_FILE} names the model_type {cache.model_type!r}, "
                        f"which no family writes (known: {', '.join(_known_types())}); its "
                        "files' keys and shapes are not checked")
        return problems
    read = [(p, bucket) for p, bucket in listed.items() if p.is_file()]
    if not deep:  # the first file of each bucket
        firsts: dict[tuple[int, int] | None, tuple[Path, tuple[int, int] | None]] = {}
        for path, bucket in read:
            firsts.setdefault(bucket, (path, bucket))
        read = list(firsts.values())
    problems += FileCheck(family, cache.model_type).problems(read, cache.load)
    return problems


def _known_types() -> list[str]:
    return sorted({m.automodel.model_type for m in MODELS.values() if m.automodel is not None})


def _count_problems(cache: CacheFolder) -> list[str]:
    """metadata.json's counts against its shards'."""
    meta, problems = cache.metadata, []
    where = cache.root / METADATA_FILE
    for shard in cache.shards:
        if shard.entries is None:
            problems.append(f"metadata shard {cache.root / shard.name} is missing or not a "
                            "JSON list of entries")
    if meta.get("num_shards") != len(cache.shards):
        problems.append(f"{where} says num_shards {meta.get('num_shards')!r} but lists "
                        f"{len(cache.shards)} shard(s)")
    entries = sum(len(s.entries or []) for s in cache.shards)
    if meta.get("total_items") != entries:
        problems.append(f"{where} says total_items {meta.get('total_items')!r} but its shards "
                        f"hold {entries} entries")
    size = meta.get("shard_size")
    over = [s.name for s in cache.shards if isinstance(size, int) and len(s.entries or []) > size]
    if over:
        problems.append(f"{_named(over)} hold(s) more than shard_size {size} entries")
    return problems


def _listed_files(cache: CacheFolder) -> tuple[dict[Path, tuple[int, int] | None], list[str]]:
    """The files the entries name (resolved) with their bucket, in order, and the entries'
    problems: no cache_file, a file outside the cache, named twice, not in its bucket's folder,
    another model_type."""
    root = cache.root.resolve()
    listed: dict[Path, tuple[int, int] | None] = {}
    nameless, outside, twice, misplaced, typed = [], [], [], [], []
    for shard, entry in cache.entries():
        path = cache_path(cache.root, entry)
        if path is None:
            nameless.append(shard)
            continue
        if not path.is_relative_to(root):
            outside.append(str(entry["cache_file"]))
            continue
        bucket = bucket_of(entry)
        if path in listed:
            twice.append(str(path.relative_to(root)))
        listed[path] = bucket
        folder = BUCKET_FOLDER.match(path.parent.name)
        if bucket is None or folder is None or path.parent.parent != root or (
                (int(folder[1]), int(folder[2])) != bucket):
            misplaced.append(str(path.relative_to(root)))
        if entry.get("model_type") != cache.model_type:
            typed.append(str(path.relative_to(root)))
    problems = []
    if nameless:
        problems.append(f"{len(nameless)} entries of {_named(sorted(set(nameless)))} name no "
                        "cache_file")
    if outside:
        problems.append(f"{len(outside)} entries name a cache file outside {root}: "
                        f"{_named(outside)}; AutoModel reads each where its entry names it (was "
                        "the cache moved after it was written?)")
    if twice:
        problems.append(f"{len(twice)} cache file(s) are listed twice: {_named(twice)}")
    if misplaced:
        problems.append(f"{len(misplaced)} cache file(s) are not in the WxH folder of their "
                        f"entry's bucket_resolution: {_named(misplaced)}")
    if typed:
        problems.append(f"{len(typed)} entries record a model_type other than metadata.json's "
                        f"{cache.model_type!r}: {_named(typed)}")
    return listed, problems


class FileCheck:
    """The cache files of one family: keys, ranks, latent size and channels."""

    def __init__(self, family: ModelFamily, model_type: object) -> None:
        assert family.automodel is not None  # found by its AutoModel model_type
        self.family, self.keys, self.model_type = family, family.automodel.keys, model_type
        self.channels: int | None = None
        self.suffix = VIDEO_SUFFIX if family.input_kind == "video" else IMAGE_SUFFIX

    def problems(self, files: list[tuple[Path, tuple[int, int] | None]],
                 load: Callable[[Path], dict[str, Any]] = load_cache_file) -> list[str]:
        out = []
        for path, bucket in files:
            try:
                data = load(path)
            except DatasetError as e:
                out.append(str(e))
                continue
            out += [f"{path} {p}" for p in self.file_problems(path, data, bucket)]
        return out

    def file_problems(self, path: Path, data: dict[str, Any],
                      bucket: tuple[int, int] | None) -> list[str]:
        import torch

        keys, out = self.keys, []
        if path.suffix != self.suffix:
            out.append(f"is a {path.suffix} file; a {self.model_type} cache's files are "
                       f"{self.suffix}")
        tensors = ((keys.latent, keys.latent_rank), *keys.text, *keys.other)
        wanted = {name for name, _ in tensors} | set(keys.facts)
        allowed = wanted | {name for name, _ in keys.optional}
        missing = [k for k in (*[n for n, _ in tensors], *keys.facts) if k not in data]
        extra = [k for k in data if k not in allowed]
        if missing:
            out.append(f"lacks {', '.join(missing)} (a {self.model_type} cache file's keys)")
        if extra:
            out.append(f"holds {', '.join(map(str, extra))}, not a {self.model_type} cache "
                       "file's key")
        if "model_type" in data and data["model_type"] != self.model_type:
            out.append(f"records model_type {data['model_type']!r}, not metadata.json's "
                       f"{self.model_type!r}")
        for name, rank in (*keys.text, *keys.other, *keys.optional):
            value = data.get(name)
            if name in data and not (isinstance(value, torch.Tensor) and value.dim() == rank):
                out.append(f"{name} is {_described(value)}, not a tensor of rank {rank}")
        latent = data.get(keys.latent)
        if keys.latent in data:
            out += self._latent_problems(latent, bucket)
        return out

    def _latent_problems(self, latent: object, bucket: tuple[int, int] | None) -> list[str]:
        import torch

        name, rank = self.keys.latent, self.keys.latent_rank
        if not isinstance(latent, torch.Tensor) or latent.dim() != rank:
            return [f"{name} is {_described(latent)}, not a tensor of rank {rank}"]
        out = []
        down = self.family.sizes.downsample
        if bucket is not None:
            width, height = bucket
            want = (height // down, width // down)
            if tuple(latent.shape[-2:]) != want:
                out.append(f"{name} is {list(latent.shape)}, but its bucket {width}x{height} "
                           f"needs height and width {want[0]}x{want[1]} (the VAE downsamples "
                           f"by {down})")
        channels = int(latent.shape[self.keys.channel_axis])
        if self.channels is None:
            self.channels = channels
        elif channels != self.channels:
            out.append(f"{name} has {channels} channels where the first file's has "
                       f"{self.channels}")
        return out


def _described(value: object) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    return type(value).__name__

