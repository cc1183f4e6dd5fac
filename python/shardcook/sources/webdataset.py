"""Existing WebDataset tars, read with the Rust reader: sorted tars, then their samples in order."""

from __future__ import annotations

import bisect
import glob
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shardcook._native import count_samples, read_shard
from shardcook.dataset.braces import expand_braces
from shardcook.errors import ConfigError, ShardcookError, SkipReason
from shardcook.sources.base import (
    Item,
    clean_caption,
    decode_caption,
    dotted_get,
)

IMAGE_PARTS = ("jpg", "jpeg", "png", "webp")
JSON_CAPTION_FIELDS = ("caption", "text", "prompt", "txt")


def expand_tars(pattern: str) -> list[str]:
    """Tar paths named by a glob, brace pattern or folder, sorted and without repeats.

    Raises:
        ConfigError: unbalanced braces, too many names, or a brace alternative that names no
            existing tar (a missing shard must not shrink the dataset silently).
    """
    try:
        alternatives = expand_braces(pattern)
    except ConfigError as e:
        raise ConfigError(f"--input-path: {e}.") from None
    found: set[str] = set()
    for pat in alternatives:
        if os.path.isdir(pat):
            found.update(str(p) for p in Path(pat).rglob("*.tar"))
        elif glob.has_magic(pat):
            found.update(p for p in glob.glob(pat, recursive=True) if os.path.isfile(p))
        elif os.path.isfile(pat):
            found.add(pat)
        elif len(alternatives) > 1:
            raise ConfigError(
                f"--input-path {pattern!r} names {pat!r}, which does not exist; fix the pattern "
                "or restore the file."
            )
    return sorted(found)


class WebDatasetSource:
    """Inputs = the samples of the tars in sorted path order, each tar in file order."""

    def __init__(
        self,
        input_path: str,
        max_samples: int | None = None,
        image_part: str | None = None,
        caption_field: str | None = None,
    ):
        tars = expand_tars(input_path)
        if not tars:
            raise ConfigError(f"No tar files match {input_path!r}; check --input-path.")
        self.pattern = input_path
        self.tars = tars
        self.image_part = image_part
        self.caption_field = caption_field
        self._starts: list[int] = []
        total = 0
        for tar in tars:
            self._starts.append(total)
            try:
                total += count_samples(tar)
            except ShardcookError as e:
                raise ConfigError(f"Input tar {tar!r} cannot be read ({e}); fix or remove it.") from None
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
        index = self._starts[t]
        while index < stop and t < len(self.tars):
            for key, parts in read_shard(self.tars[t]):
                if index >= stop:
                    return
                if index >= start:
                    yield self._item(index, f"{self.tars[t]}:{key}", parts)
                index += 1
            t += 1

    def _item(self, index: int, source: str, parts: dict[str, bytes]) -> Item:
        image_part = self.image_part or next((p for p in IMAGE_PARTS if p in parts), None)
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
                value = next(doc[k] for k in JSON_CAPTION_FIELDS if isinstance(doc, dict) and k in doc)
        except (KeyError, StopIteration):
            return None, "missing_caption"
        if not isinstance(value, str):
            return None, "missing_caption"
        return clean_caption(value), None
