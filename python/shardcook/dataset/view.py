"""A dataset as the dataset commands see it: a local folder `root` holding its files, `name`
naming it in messages, and its `Fetch`: how shard bytes come under `root` for the steps that
read them and how what a command wrote there becomes the dataset's. A local folder is its own
root (`dataset.inplace.InPlace`); a dataset in any other store is seen through a scratch folder
(`dataset.fetched.Fetched`). `dataset.location` makes the view of a command's argument.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from shardcook.dataset.check import scans as checks
from shardcook.dataset.inplace import InPlace

__all__ = ["DatasetView", "Fetch"]


class Fetch(Protocol):
    """What differs between a dataset in a local folder and one fetched from a store; the
    `DatasetView` methods of the same names say what each does."""

    def fetched(self, shards: Sequence[str], *, first_sample: bool = False
                ) -> AbstractContextManager[None]: ...

    def read_range(self, shard: str, start: int, end: int) -> bytes: ...

    def windows(self, shards: Sequence[str]) -> Iterator[list[str]]: ...

    def shard_object(self, shard: str) -> tuple[int, str] | None: ...

    def verify_shards(self, shards: Sequence[tuple[str, int | None]]) -> list[str]: ...

    def index_shards(self, shards: Sequence[str], sqlite_path: Path | None
                     ) -> tuple[list[tuple[str, int]], list[str]]: ...

    def check_writable(self) -> None: ...

    def rewritten(self, shard: str, now: bool) -> None: ...

    def publish(self) -> None: ...

    @property
    def location(self) -> Path | str: ...

    def shown(self, text: str) -> str: ...


class DatasetView:
    """What the dataset code needs beyond a folder's files. `root` is the folder the code reads
    and writes; `name` is how messages name the dataset; `fetch` is a local folder's own
    (`InPlace`) unless given."""

    def __init__(self, root: Path, name: str, fetch: Fetch | None = None) -> None:
        self.root = root
        self.name = name
        self.fetch: Fetch = fetch if fetch is not None else InPlace(root)

    def fetched(self, shards: Sequence[str], *, first_sample: bool = False
                ) -> AbstractContextManager[None]:
        """`shards`' bytes are under `root` inside the block (with `first_sample`, at least
        their first sample: enough for a reader that stops there)."""
        return self.fetch.fetched(shards, first_sample=first_sample)

    def read_range(self, shard: str, start: int, end: int) -> bytes:
        """Bytes `start`..`end` of `shard` (one sample, by its `.tar.idx` offsets), without
        fetching the rest of it."""
        return self.fetch.read_range(shard, start, end)

    def windows(self, shards: Sequence[str]) -> Iterator[list[str]]:
        """`shards` in their order, in groups whose bytes are under `root` while the group is
        being handled (until the next one is asked for)."""
        return self.fetch.windows(shards)

    def shard_object(self, shard: str) -> tuple[int, str] | None:
        """The shard as a run's records name it (`shardrows.local_object` for a file; a
        fetched one's size and ETag in the listing): its size and what tells a rewritten copy;
        None when there is none to name."""
        return self.fetch.shard_object(shard)

    def verify_shards(self, shards: Sequence[tuple[str, int | None]]) -> list[str]:
        """Problems of the shards (with the sample counts `.info.json` gives) against their
        `.tar.idx` files, and keys in two places: a fresh scan of every shard whose bytes are
        here; a fetched one's not here checked against its `.tar.idx` and size alone."""
        return self.fetch.verify_shards(shards)

    def verify_index(self, counts: Mapping[str, int], expected: bool,
                     samples_only_ok: bool) -> list[str]:
        """index.sqlite's problems against `.info.json`'s `counts`, every row counted (see
        `checks.sqlite_problems`)."""
        return checks.sqlite_problems(self.root, counts, expected, samples_only_ok)

    def index_shards(self, shards: Sequence[str], sqlite_path: Path | None
                     ) -> tuple[list[tuple[str, int]], list[str]]:
        """Writes each shard's `.tar.idx` (and index.sqlite at `sqlite_path`); returns the
        sample count of each shard in order and the part names seen (see `_native.index_shards`)."""
        return self.fetch.index_shards(shards, sqlite_path)

    def check_writable(self) -> None:
        """Raises ConfigError when the dataset cannot be written (a folder's writes say so
        themselves, where they happen)."""
        self.fetch.check_writable()

    def rewritten(self, shard: str, now: bool) -> None:
        """Makes `shard` as a step rewrote it under `root`, in the window now in hand, the
        dataset's (`now`: the step rewrote it; else an earlier run did, which may have stopped
        before this call ended): in a folder it is already; a fetched view uploads it (when
        `now`), then deletes the shard's `.tar.idx` and recorded rows in the store, which
        described its bytes before."""
        self.fetch.rewritten(shard, now)

    def publish(self) -> None:
        """Makes what a command wrote under `root` the dataset's."""
        self.fetch.publish()

    @property
    def location(self) -> Path | str:
        """The dataset as the user gave it: this folder, or the URL."""
        return self.fetch.location

    def shown(self, text: str) -> str:
        """`text` (a message, a problem) naming the dataset as the user gave it."""
        return self.fetch.shown(text)
