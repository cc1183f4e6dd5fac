"""Work units (docs/FORMAT.md §4): consecutive runs of `shard_size` inputs; unit u becomes
shard u."""

from __future__ import annotations

from dataclasses import dataclass

from shardcook.layouts.names import sample_key, shard_name, split_shard_prefix

__all__ = ["SplitUnit", "WorkUnit", "plan_units", "sample_key"]


@dataclass(frozen=True)
class WorkUnit:
    """Inputs start <= i < stop, written to shard `name`."""

    unit: int
    start: int
    stop: int

    @property
    def name(self) -> str:
        """The shard this unit becomes, as the native writer names it, in `folder` if any."""
        file = shard_name(self.number, prefix=self.prefix)
        return f"{self.folder}/{file}" if self.folder else file

    @property
    def folder(self) -> str:
        """The folder of the dataset the shard goes in (ingest: its split's); "" for the top."""
        return ""

    @property
    def prefix(self) -> str:
        """The shard file prefix (`ShardWriter(prefix=...)`); chatml units override it."""
        return ""

    @property
    def number(self) -> int:
        """The shard number in the file name (`ShardWriter(first_shard=...)`)."""
        return self.unit

    @property
    def capacity(self) -> int:
        """The most samples the unit's shard may hold: one per input, unless an input holds
        many (ingest: an Arrow file's rows)."""
        return max(len(self), 1)

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class SplitUnit(WorkUnit):
    """A work unit of one split: planned inputs start <= v < stop, written to shard `number`."""

    split: str = "train"
    shard: int = 0

    @property
    def prefix(self) -> str:
        return split_shard_prefix(self.split)

    @property
    def number(self) -> int:
        return self.shard

def plan_units(num_inputs: int, shard_size: int) -> list[WorkUnit]:
    """All work units for `num_inputs` inputs."""
    if shard_size < 1:
        raise ValueError("shard_size must be at least 1")
    return [
        WorkUnit(u, a, min(a + shard_size, num_inputs))
        for u, a in enumerate(range(0, num_inputs, shard_size))
    ]

