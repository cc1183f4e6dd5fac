"""A NeMo AutoModel diffusion cache as `validate`, `info` and `report` read it: `metadata.json`,
the metadata shards it names and their entries, and the `WxH/` folders of cache files, whoever
wrote them (`encode --layout automodel`, or AutoModel's own preprocessing tool). Reading only:
the checks are in `dataset.check.automodelcache`, the summary in `dataset.cachesummary`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcook.encoders.models import MODELS, ModelFamily
from shardcook.errors import DatasetError
from shardcook.layouts.automodel import IMAGE_SUFFIX, METADATA_FILE, VIDEO_SUFFIX

#: A bucket's folder: `<width>x<height>`.
BUCKET_FOLDER = re.compile(r"^(\d+)x(\d+)$")
CACHE_SUFFIXES = (IMAGE_SUFFIX, VIDEO_SUFFIX)
#: Brings a cache file's bytes under a local copy of a cache for the block (`dataset.cachecopy`).
Fetched = Callable[[Path], AbstractContextManager[None]]


def family_of_type(model_type: object) -> ModelFamily | None:
    """The family whose AutoModel processor records `model_type` in its files."""
    return next((m for m in MODELS.values()
                 if m.automodel is not None and m.automodel.model_type == model_type), None)


@dataclass
class Shard:
    """One metadata shard: its name, and its entries (None when it cannot be read)."""

    name: str
    entries: list[dict[str, Any]] | None


@dataclass
class CacheFolder:
    """A cache's `metadata.json` and metadata shards, read."""

    root: Path
    metadata: dict[str, Any]
    shards: list[Shard]
    #: Where `root` is a local copy of a cache in object storage; None for a local folder.
    fetched: Fetched | None = None

    @classmethod
    def read(cls, root: Path, fetched: Fetched | None = None) -> CacheFolder:
        """Raises DatasetError when `metadata.json` is not AutoModel's (a JSON object naming its
        `shards`); a shard that cannot be read has entries None."""
        path = root / METADATA_FILE
        try:
            metadata = json.loads(path.read_bytes())
        except (OSError, ValueError) as e:
            raise DatasetError(f"{path} cannot be read as JSON ({e}).") from None
        if not isinstance(metadata, dict) or not isinstance(metadata.get("shards"), list) or (
                not all(isinstance(s, str) for s in metadata["shards"])):
            raise DatasetError(f"{path} is not a NeMo AutoModel cache's metadata (a JSON object "
                               "whose `shards` lists its metadata shard files).")
        return cls(root, metadata, [Shard(name, _read_shard(root, name))
                                    for name in metadata["shards"]], fetched)

    @property
    def model_type(self) -> object:
        return self.metadata.get("model_type")

    @property
    def family(self) -> ModelFamily | None:
        return family_of_type(self.model_type)

    def entries(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(shard name, entry) of every entry of the readable shards, in order."""
        for shard in self.shards:
            for entry in shard.entries or []:
                yield shard.name, entry

    def load(self, path: Path) -> dict[str, Any]:
        """The cache file at `path` (`load_cache_file`), its bytes fetched first in a copy."""
        if self.fetched is None:
            return load_cache_file(path)
        with self.fetched(path):
            return load_cache_file(path)

    def present(self) -> list[Path]:
        """Every cache file in the `WxH/` folders, sorted."""
        return sorted(path for folder in self.root.iterdir()
                      if folder.is_dir() and BUCKET_FOLDER.match(folder.name)
                      for path in folder.iterdir()
                      if path.suffix in CACHE_SUFFIXES and path.is_file())


def _read_shard(root: Path, name: str) -> list[dict[str, Any]] | None:
    if "/" in name or name in ("", ".", ".."):
        return None
    try:
        entries = json.loads((root / name).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return None
    return entries


def cache_path(root: Path, entry: dict[str, Any]) -> Path | None:
    """The file an entry's `cache_file` names (AutoModel reads it where it is named: a relative
    name from where the trainer runs, so it is taken from the cache folder here), or None when
    it names none."""
    name = entry.get("cache_file")
    if not isinstance(name, str) or not name:
        return None
    return (root / name).resolve() if not Path(name).is_absolute() else Path(name).resolve()


def bucket_of(entry: dict[str, Any]) -> tuple[int, int] | None:
    """(width, height) of an entry's `bucket_resolution`, None when it has none."""
    value = entry.get("bucket_resolution")
    if (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        return int(value[0]), int(value[1])
    return None


def load_cache_file(path: Path) -> dict[str, Any]:
    """One cache file, loaded as AutoModel's dataloaders load it but never running a pickled
    class (`weights_only=True`).

    Raises:
        DatasetError: one sentence: the file is damaged, holds something a plain load would
            have to run, or is not a dict.
    """
    import pickle

    import torch

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        what = found.group(1) if found else "an object that is not a tensor"
        raise DatasetError(f"{path} refers to {what}, which a weights-only load refuses (nothing "
                           "in the file was run); AutoModel's dataloader refuses it too") from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DatasetError(f"{path} cannot be loaded (truncated or damaged: {first})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path} holds a {type(data).__name__}, not a cache file's dict")
    return data
