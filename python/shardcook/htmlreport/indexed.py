"""The dataset as the report checks it: `validate`'s checks, but each shard checked against its
`.tar.idx` and its size rather than scanned (as `validate` checks a dataset in a bucket), and
index.sqlite at each shard's first and last row rather than counted, so the page reads the index
and the samples it shows, never every shard's headers nor every row of index.sqlite."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from shardcook.dataset.check.scans import sqlite_problems
from shardcook.dataset.index.tarindex import light_problems
from shardcook.dataset.view import DatasetView


class IndexedView(DatasetView):
    """`view` with the light shard and index checks; everything else is `view`'s."""

    def __init__(self, view: DatasetView) -> None:
        super().__init__(view.root, view.name, view.fetch)

    def verify_shards(self, shards: Sequence[tuple[str, int | None]]) -> list[str]:
        sizes = {name: os.stat(os.path.join(self.root, name)).st_size for name, _ in shards}
        return light_problems(self.root, shards, sizes)

    def verify_index(self, counts: Mapping[str, int], expected: bool,
                     samples_only_ok: bool) -> list[str]:
        return sqlite_problems(self.root, counts, expected, samples_only_ok, light=True)
