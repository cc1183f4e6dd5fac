"""Energon's `.tar.idx` beside each shard: the byte offset of each sample's first tar header,
then the end of the last sample, as unsigned 64-bit integers (what `_native.index_shards`
writes)."""

from __future__ import annotations

import os
import re
import shlex
import struct
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path

__all__ = ["block_offsets", "idx_offsets", "light_problems"]


def idx_offsets(data: bytes) -> list[int] | None:
    """The offsets a `.tar.idx` holds; None when `data` is not a whole number of entries."""
    if len(data) % 8:
        return None
    return [n for (n,) in struct.iter_unpack("=Q", data)]


def block_offsets(offsets: Sequence[int]) -> bool:
    """True when the offsets increase and each is where a tar block starts (a multiple of 512)."""
    return all(b > a for a, b in pairwise(offsets)) and not any(n % 512 for n in offsets)


def light_problems(root: Path, shards: Sequence[tuple[str, int | None]],
                   sizes: Mapping[str, int]) -> list[str]:
    """The shards' problems found without reading them: each `.tar.idx` under `root` holds as
    many entries as `.info.json` says samples (plus the end), increasing block offsets, and
    the shard (of `sizes[name]` bytes) is long enough to hold them."""
    import numpy as np

    fix = "; run `shardcook finalize --force`"
    problems = []
    for name, expected in shards:
        try:
            with open(os.path.join(root, f"{name}.idx"), "rb") as f:
                data: bytes | None = f.read()
        except OSError:
            data = None
        if data is None or len(data) % 8:
            problems.append(f"{name}: the index file {name}.idx is missing or not whole{fix}")
            continue
        offsets = np.frombuffer(data, dtype="=u8")  # numpy: millions of samples in a blink
        if expected is not None and len(offsets) != expected + 1:
            problems.append(f"{name}.idx has {len(offsets)} entries where the shard needs "
                            f"{expected + 1} (samples + 1){fix}")
        elif bool((offsets[1:] <= offsets[:-1]).any() or (offsets & 511).any()):
            problems.append(f"{name}.idx does not hold increasing tar block offsets{fix}")
        elif len(offsets) and int(offsets[-1]) + 512 > sizes[name]:
            problems.append(_cut_short(name, sizes[name], int(offsets[-1])))
    return problems


def _cut_short(name: str, size: int, end: int) -> str:
    """A shard smaller than its index: re-indexing refuses a cut tar, so the fix is to write it
    again or leave it out."""
    leave_out = shlex.quote(f"^{re.escape(name)}$")
    return (f"{name}: the shard is {size:,} bytes but its index ends at byte {end:,}: it was cut "
            "short (delete it and rerun the command that wrote the dataset, which writes only "
            "what is missing, or leave it out with `shardcook finalize --force --exclude "
            f"{leave_out}`) or replaced by a smaller tar (`shardcook finalize --force` indexes "
            "it anew)")
