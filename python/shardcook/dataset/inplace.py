"""`InPlace`: a dataset in a local folder seen as it is, a `dataset.view.DatasetView`'s `Fetch`:
its shards are there, and what a command writes is already the dataset's, so nothing is fetched
or published and each step reads the folder's files."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from shardcook import _native
from shardcook.dataset.index import shardrows

__all__ = ["InPlace", "scanned_problems"]


def scanned_problems(root: Path, shards: Sequence[tuple[str, int | None]]) -> list[str]:
    """Problems of the shards under `root` (with the sample counts `.info.json` gives) against
    their `.tar.idx` files, and keys in two places: a fresh scan of every shard."""
    verified = _native.verify_shards(root, list(shards))
    return [p for checked in verified.shards for p in checked.problems] + verified.problems


class InPlace:
    """The local folder `root`, its own view."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @contextmanager
    def fetched(self, shards: Sequence[str], *, first_sample: bool = False) -> Iterator[None]:
        yield

    def read_range(self, shard: str, start: int, end: int) -> bytes:
        with (self.root / shard).open("rb") as f:
            f.seek(start)
            return f.read(end - start)

    def windows(self, shards: Sequence[str]) -> Iterator[list[str]]:
        if shards:
            yield list(shards)

    def shard_object(self, shard: str) -> tuple[int, str] | None:
        try:
            return shardrows.local_object(self.root / shard)
        except OSError:
            return None

    def verify_shards(self, shards: Sequence[tuple[str, int | None]]) -> list[str]:
        return scanned_problems(self.root, shards)

    def index_shards(self, shards: Sequence[str], sqlite_path: Path | None
                     ) -> tuple[list[tuple[str, int]], list[str]]:
        summary = _native.index_shards(self.root, list(shards), sqlite_path)
        return [(name, count) for name, count in summary.shards], list(summary.part_names)

    def check_writable(self) -> None:
        """Nothing: a folder's writes say why they fail themselves, where they happen."""

    def rewritten(self, shard: str, now: bool) -> None:
        """Nothing: the shard rewritten under `root` is the dataset's already."""

    def publish(self) -> None:
        """Nothing: what a command wrote under `root` is the dataset's already."""

    @property
    def location(self) -> Path:
        return self.root

    def shown(self, text: str) -> str:
        return text
