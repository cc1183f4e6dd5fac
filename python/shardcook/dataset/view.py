"""A dataset as the dataset commands see it: a local folder `root` holding its files, and the
steps that read shard bytes or publish what a command wrote, which a dataset in object storage
does its own way (`dataset.remote.RemoteView`). This class is a local folder's: its shards are
there, and what a command writes is already the dataset's. `dataset.location` makes the view of
a command's argument.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from shardcook import _native
from shardcook.dataset.check import scans as checks
from shardcook.dataset.index import shardrows

__all__ = ["DatasetView"]


class DatasetView:
    """What the dataset code needs beyond a folder's files; a local folder's implementation.

    `root` is the folder the code reads and writes; `name` is how messages name the dataset.
    """

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.name = name

    @contextmanager
    def fetched(self, shards: Sequence[str], *, first_sample: bool = False) -> Iterator[None]:
        """`shards`' bytes are under `root` inside the block (with `first_sample`, at least
        their first sample: enough for a reader that stops there)."""
        yield

    def read_range(self, shard: str, start: int, end: int) -> bytes:
        """Bytes `start`..`end` of `shard` (one sample, by its `.tar.idx` offsets), without
        fetching the rest of it."""
        with (self.root / shard).open("rb") as f:
            f.seek(start)
            return f.read(end - start)

    def windows(self, shards: Sequence[str]) -> Iterator[list[str]]:
        """`shards` in their order, in groups whose bytes are under `root` while the group is
        being handled (until the next one is asked for)."""
        if shards:
            yield list(shards)

    def shard_object(self, shard: str) -> tuple[int, str] | None:
        """The shard as a run's records name it (`shardrows.local_object`: its size and what
        tells a rewritten copy); None when there is none to name."""
        try:
            return shardrows.local_object(self.root / shard)
        except OSError:
            return None

    def verify_shards(self, shards: Sequence[tuple[str, int | None]]) -> list[str]:
        """Problems of the shards (with the sample counts `.info.json` gives) against their
        `.tar.idx` files, and keys in two places: a fresh scan of every shard."""
        verified = _native.verify_shards(self.root, list(shards))
        return [p for checked in verified.shards for p in checked.problems] + verified.problems

    def verify_index(self, counts: Mapping[str, int], expected: bool,
                     samples_only_ok: bool) -> list[str]:
        """index.sqlite's problems against `.info.json`'s `counts`, every row counted (see
        `checks.sqlite_problems`)."""
        return checks.sqlite_problems(self.root, counts, expected, samples_only_ok)

    def index_shards(self, shards: Sequence[str], sqlite_path: Path | None
                     ) -> tuple[list[tuple[str, int]], list[str]]:
        """Writes each shard's `.tar.idx` (and index.sqlite at `sqlite_path`); returns the
        sample count of each shard in order and the part names seen (see `_native.index_shards`)."""
        summary = _native.index_shards(self.root, list(shards), sqlite_path)
        return [(name, count) for name, count in summary.shards], list(summary.part_names)

    def check_writable(self) -> None:
        """Raises ConfigError when the dataset cannot be written (a folder's writes say so
        themselves, where they happen)."""

    def publish(self) -> None:
        """Makes what a command wrote under `root` the dataset's (nothing to do for a folder)."""

    @property
    def location(self) -> Path | str:
        """The dataset as the user gave it: this folder, or the URL."""
        return self.root

    def shown(self, text: str) -> str:
        """`text` (a message, a problem) naming the dataset as the user gave it."""
        return text
