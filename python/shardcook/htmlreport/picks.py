"""Which samples the report reads, and reading them: seeded, spread evenly over the samples in
shard order, each sample read alone by its `.tar.idx` offsets (one ranged read in a bucket), so
the report reads the index and those samples, never a whole shard."""

from __future__ import annotations

import bisect
import io
import itertools
import random
import tarfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from shardcook.dataset.index.tarindex import idx_offsets
from shardcook.dataset.view import DatasetView
from shardcook.errors import ShardcookError

#: Ranged reads in flight at once (a bucket's latency is the cost, not its bandwidth).
READ_THREADS = 8


@dataclass
class Picked:
    """One sample read for the report: its parts, or why it could not be read."""

    shard: str
    index: int
    key: str = ""
    parts: dict[str, bytes] = field(default_factory=dict)
    error: str | None = None


def positions(counts: dict[str, int], shards: Sequence[str], n: int,
              seed: int) -> list[tuple[str, int]]:
    """`n` (shard, index in shard) positions: the samples of `shards` numbered in order, cut
    into `n` equal strides, one sample drawn with `seed` from each."""
    sizes = [counts.get(s, 0) for s in shards]
    ends = list(itertools.accumulate(sizes))
    total = ends[-1] if ends else 0
    n = min(n, total)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        number = rng.randrange(i * total // n, (i + 1) * total // n)
        j = bisect.bisect_right(ends, number)
        out.append((shards[j], number - (ends[j] - sizes[j])))
    return out


def split_name(name: str) -> tuple[str, str]:
    """A tar member's (sample key, part): the key ends at the first dot of the file name, as in
    Energon and WebDataset."""
    folder, _, base = name.rpartition("/")
    stem, _, part = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), part


def parse_sample(data: bytes) -> tuple[str, dict[str, bytes]]:
    """The key and parts of one sample's tar members (bytes between two `.tar.idx` offsets)."""
    key, parts = "", {}
    with tarfile.open(fileobj=io.BytesIO(data + bytes(1024)), mode="r:") as tar:
        for member in tar:
            file = tar.extractfile(member) if member.isfile() else None
            if file is None:
                continue
            key, part = split_name(member.name)
            parts[part] = file.read()
    if not parts:
        raise tarfile.TarError("no file in the sample's bytes")
    return key, parts


def _offsets(view: DatasetView, shard: str) -> list[int]:
    path = view.root / f"{shard}.idx"
    offsets = idx_offsets(path.read_bytes()) if path.is_file() else None
    if offsets is None:
        raise ShardcookError(f"{shard}'s index is missing or damaged")
    return offsets


def read(view: DatasetView, wanted: Sequence[tuple[str, int]]) -> Iterator[Picked]:
    """The samples at `wanted`, in that order; one that cannot be read says why."""
    offsets: dict[str, list[int] | str] = {}
    for shard, _ in wanted:
        if shard not in offsets:
            try:
                offsets[shard] = _offsets(view, shard)
            except (OSError, ShardcookError) as e:
                offsets[shard] = str(e)

    def one(position: tuple[str, int]) -> Picked:
        shard, index = position
        picked = Picked(shard, index)
        found = offsets[shard]
        try:
            if isinstance(found, str):
                raise ShardcookError(found)
            if index + 1 >= len(found):
                raise ShardcookError(f"{shard}'s index holds no sample {index}")
            picked.key, picked.parts = parse_sample(
                view.read_range(shard, found[index], found[index + 1]))
        except (OSError, ShardcookError, tarfile.TarError) as e:
            picked.error = str(e) or type(e).__name__
        return picked

    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        yield from pool.map(one, wanted)
