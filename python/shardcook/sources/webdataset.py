"""Existing WebDataset tars: sorted tars, then their samples in order. A local tar is read with
the Rust reader; a tar in object storage (`msc://`, `s3://` patterns) is streamed with the same
member rules (`sources/tarstream.py`), never downloaded whole."""

from __future__ import annotations

import bisect
import fnmatch
import glob
import json
import os
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from shardcook._native import count_samples, read_shard
from shardcook.braces import expand_braces
from shardcook.dataset.index.tarindex import block_offsets, idx_offsets
from shardcook.errors import ConfigError, DatasetError, ShardcookError, SkipReason
from shardcook.sources.base import (
    Item,
    clean_caption,
    decode_caption,
    dotted_get,
)
from shardcook.sources.tarstream import TarSample, read_samples, sample_offsets
from shardcook.storage import Remote, bad_segment, segment_named
from shardcook.storage.location import Location, locate

IMAGE_PARTS = ("jpg", "jpeg", "png", "webp")
#: The video parts looked for in a video model's run.
VIDEO_PARTS = ("mp4", "webm", "mov", "mkv", "avi")
JSON_CAPTION_FIELDS = ("caption", "text", "prompt", "txt")
#: Tars whose headers are counted at once (each count waits on the store, not on the CPU).
COUNT_THREADS = 8
#: A remote tar's reader buffers: small while skipping data to count, large while reading it.
COUNT_BUFFER = 1 << 20
READ_BUFFER = 8 << 20


class Tar(Protocol):
    """One input tar."""

    #: Its path or URL.
    where: str

    def count(self) -> int:
        """Its samples (ShardcookError when it is not a whole tar)."""

    def samples(self, skip: int) -> Iterator[TarSample]:
        """Its samples in order, from the `skip`-th on."""


class LocalTar:
    """A tar on the local disk, read by the Rust reader."""

    def __init__(self, path: str):
        self.where = path

    def count(self) -> int:
        return count_samples(self.where)

    def samples(self, skip: int) -> Iterator[TarSample]:
        for n, (key, parts) in enumerate(read_shard(self.where)):
            if n >= skip:
                yield key, parts


class RemoteTar:
    """A tar in object storage: where its samples start, from the `.tar.idx` beside it (Energon's
    index: each sample's offset, then the end) or else by walking its headers once; then each
    work unit's samples streamed from where they start."""

    def __init__(self, folder: Remote, name: str):
        self.folder, self.name = folder, name
        self.where = folder.child(name)
        self._offsets: array[int] = array("q")

    def count(self) -> int:
        indexed = self._indexed_offsets()
        if indexed is not None:
            self._offsets = indexed
        else:
            with self.folder.open_stream(self.name, COUNT_BUFFER) as f:
                self._offsets = sample_offsets(f, self.where)
        return len(self._offsets)

    def _indexed_offsets(self) -> array[int] | None:
        """The samples' offsets its `.tar.idx` holds, so the tar is read once, not counted
        first; None without a well-formed one (increasing tar block offsets)."""
        try:
            offsets = idx_offsets(self.folder.read(f"{self.name}.idx"))
        except OSError:  # none (FileNotFoundError) or unreadable: count from the headers
            return None
        if not offsets or not block_offsets(offsets):
            return None
        return array("q", offsets[:-1])

    def samples(self, skip: int) -> Iterator[TarSample]:
        if skip >= len(self._offsets):
            return
        try:
            with self.folder.open_stream(self.name, READ_BUFFER) as f:
                yield from read_samples(f, self.where, self._offsets[skip])
        except OSError as e:  # deleted or unreachable since it was counted
            raise DatasetError(f"Input tar {self.where!r} cannot be read any more "
                               f"({e.strerror or e}); restore it and run the same command again "
                               "to go on where this run stopped.") from None


def _missing(pattern: str, name: str) -> ConfigError:
    return ConfigError(f"--input-path {pattern!r} names {name!r}, which does not exist; fix the "
                       "pattern or restore the file.")


def expand_tars(input_path: str | Location) -> list[Tar]:
    """The tars named by a glob, brace pattern or folder (local, or a URL), sorted by path and
    without repeats.

    Raises:
        ConfigError: unbalanced braces, too many names, or a brace alternative that names no
            existing tar (a missing shard must not shrink the dataset silently); an object
            store that cannot be opened.
    """
    location = locate(input_path, "--input-path")
    pattern = location.text
    try:
        alternatives = expand_braces(pattern)
    except ConfigError as e:
        raise ConfigError(f"--input-path: {e}.") from None
    if isinstance(location.store, Remote):  # listed once; a local pattern is globbed
        return _remote_tars(location.store, pattern, alternatives)
    return [LocalTar(p) for p in _local_tars(pattern, alternatives)]


def _remote_tars(folder: Remote, pattern: str, alternatives: list[str]) -> list[Tar]:
    """The tars in a bucket (`folder` is the whole `pattern`): the folder above the first
    wildcard is listed once, and every alternative is matched against that listing (`*` stays
    inside one folder level unless the pattern has `**`)."""
    wild = min((i for i, c in enumerate(pattern) if c in "{*?["), default=len(pattern))
    if wild == len(pattern):  # one name: a folder of tars, or one tar
        tars = [n for n in folder.all_names("--input-path") if n.endswith(".tar")]
        if tars:
            return [RemoteTar(folder, n) for n in sorted(_safe_names(pattern, folder, tars))]
        parent = folder.parent()
        if parent is None or not parent.exists(folder.name):
            return []
        return [RemoteTar(parent, folder.name)]
    base: Remote | None = folder
    cut = pattern.rfind("/", 0, wild)
    while base is not None and len(base.url) > cut:  # up to the folder above the wildcard
        base = base.parent()
    assert base is not None  # the pattern names a bucket or profile, so its root is a folder
    names = set(base.all_names("--input-path"))
    found: set[str] = set()
    for alt in alternatives:
        rel = alt[len(base.url) + 1:]
        if glob.has_magic(rel):
            depth = None if "**" in rel else rel.count("/")
            found.update(n for n in names if fnmatch.fnmatchcase(n, rel)
                         and (depth is None or n.count("/") == depth))
        elif any(n.startswith(rel.rstrip("/") + "/") for n in names):
            found.update(n for n in names if n.startswith(rel.rstrip("/") + "/")
                         and n.endswith(".tar"))
        elif rel in names:
            found.add(rel)
        elif len(alternatives) > 1:
            raise _missing(pattern, alt)
    return [RemoteTar(base, n) for n in sorted(_safe_names(pattern, base, found))]


def _safe_names(pattern: str, folder: Remote, names: Iterable[str]) -> list[str]:
    """`names`, once none has an empty, `.` or `..` segment: a client that normalizes paths
    (Energon's, through MSC) would read another object under such a name."""
    names = list(names)
    for name in names:
        segment = bad_segment(name)
        if segment is not None:
            raise ConfigError(f"--input-path {pattern!r} matches {folder.url}/{name}, whose name "
                              f"has {segment_named(segment)}, which names another object to a "
                              "client that normalizes paths; rename the object or narrow the "
                              "pattern.")
    return names


def _local_tars(pattern: str, alternatives: list[str]) -> list[str]:
    found: set[str] = set()
    for pat in alternatives:
        if os.path.isdir(pat):
            found.update(str(p) for p in Path(pat).rglob("*.tar"))
        elif glob.has_magic(pat):
            found.update(p for p in glob.glob(pat, recursive=True) if os.path.isfile(p))
        elif os.path.isfile(pat):
            found.add(pat)
        elif len(alternatives) > 1:
            raise _missing(pattern, pat)
    return sorted(found)


def _count(tar: Tar) -> int:
    try:
        return tar.count()
    except ShardcookError as e:
        raise ConfigError(f"Input tar {tar.where!r} cannot be read ({e}); "
                          "fix or remove it.") from None
    except OSError as e:  # a tar in a bucket deleted since it was listed
        raise ConfigError(f"Input tar {tar.where!r} cannot be read ({e.strerror or e}); fix the "
                          "pattern or restore it.") from None


class WebDatasetSource:
    """Inputs = the samples of the tars in sorted path order, each tar in file order."""

    def __init__(
        self,
        input_path: str | Location,
        max_samples: int | None = None,
        image_part: str | None = None,
        caption_field: str | None = None,
        media_parts: tuple[str, ...] = IMAGE_PARTS,
    ):
        tars = expand_tars(input_path)
        input_path = str(input_path)
        if not tars:
            raise ConfigError(f"No tar files match {input_path!r}; check --input-path.")
        self.pattern = input_path
        self.tars = tars
        self.image_part = image_part
        self.media_parts = media_parts
        self.caption_field = caption_field
        self._starts: list[int] = []
        total = 0
        with ThreadPoolExecutor(min(COUNT_THREADS, len(tars))) as pool:
            for count in pool.map(_count, tars):
                self._starts.append(total)
                total += count
        if total == 0:
            raise ConfigError(f"The tars matching {input_path!r} hold no samples.")
        self.num_found = total
        self._len = min(total, max_samples) if max_samples is not None else total

    def __len__(self) -> int:
        return self._len

    def describe(self) -> dict[str, Any]:
        return {"type": "webdataset", "pattern": self.pattern, "tars": len(self.tars)}

    def items(self, start: int, stop: int) -> Iterator[Item]:
        start, stop = max(start, 0), min(stop, self._len)
        if start >= stop:
            return
        t = bisect.bisect_right(self._starts, start) - 1
        index = start
        while index < stop and t < len(self.tars):
            tar = self.tars[t]
            for key, parts in tar.samples(index - self._starts[t]):
                if index >= stop:
                    return
                yield self._item(index, f"{tar.where}:{key}", parts)
                index += 1
            t += 1

    def _item(self, index: int, source: str, parts: dict[str, bytes]) -> Item:
        image_part = self.image_part or next((p for p in self.media_parts if p in parts), None)
        if image_part is None or image_part not in parts:
            return Item(index, source, skip="missing_image")
        caption, skip = self._caption(parts)
        return Item(index, source, image=parts[image_part], caption=caption, skip=skip)

    def _caption(self, parts: dict[str, bytes]) -> tuple[str | None, SkipReason | None]:
        field = self.caption_field
        if field is None:
            if "txt" in parts:
                return decode_caption(parts["txt"])
            if "json" not in parts:
                return None, "missing_caption"
            field = "json"
        part, _, path = field.partition(".")
        if part not in parts:
            return None, "missing_caption"
        if part != "json":
            return decode_caption(parts[part])
        try:
            doc = json.loads(parts[part])
        except (UnicodeDecodeError, ValueError):
            return None, "missing_caption"
        try:
            if path:
                value = dotted_get(doc, path)
            else:
                value = next(doc[k] for k in JSON_CAPTION_FIELDS
                             if isinstance(doc, dict) and k in doc)
        except (KeyError, StopIteration):
            return None, "missing_caption"
        if not isinstance(value, str):
            return None, "missing_caption"
        return clean_caption(value), None
