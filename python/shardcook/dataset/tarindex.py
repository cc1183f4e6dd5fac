"""Energon's `.tar.idx` beside each shard: the byte offset of each sample's first tar header,
then the end of the last sample, as unsigned 64-bit integers (what `_native.index_shards`
writes)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import pairwise

__all__ = ["block_offsets", "idx_offsets"]


def idx_offsets(data: bytes) -> list[int] | None:
    """The offsets a `.tar.idx` holds; None when `data` is not a whole number of entries."""
    if len(data) % 8:
        return None
    return [n for (n,) in struct.iter_unpack("=Q", data)]


def block_offsets(offsets: Sequence[int]) -> bool:
    """True when the offsets increase and each is where a tar block starts (a multiple of 512)."""
    return all(b > a for a, b in pairwise(offsets)) and not any(n % 512 for n in offsets)
