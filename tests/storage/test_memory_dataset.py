"""A dataset whose store is a `MemoryStore` is finalized and validated through the same view as a
bucket's (`dataset.fetched.Fetched` asks only the store), and finalize writes there what it
writes in a local folder."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
from shardcook import ShardWriter, finalize, validate
from shardcook.dataset.index import tarindex
from shardcook.storage.location import Location
from shardcook.storage.memory import MemoryStore

from tests.helpers.dataset import raw_parts
from tests.helpers.shards import sqlite_rows

SPLIT = "0.6,0.2,0.2"


def _unfinalized(folder: Path, memory: MemoryStore) -> None:
    """Three shards of a raw dataset in `folder`, and the same files in `memory`."""
    with ShardWriter(folder, shard_size=3) as w:
        for i in range(9):
            w.write(f"{i:010d}", raw_parts(i))
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            memory.write_bytes(path.relative_to(folder).as_posix(), path.read_bytes())


def test_finalize_in_memory_writes_what_it_writes_in_a_folder(tmp_path):
    memory = MemoryStore("memory://bench")
    _unfinalized(tmp_path / "raw", memory.folder("raw"))
    there = Location("memory://bench/raw", memory.folder("raw"))

    finalize(tmp_path / "raw", encoding="raw", split=SPLIT)
    finalize(there, encoding="raw", split=SPLIT, scratch_dir=tmp_path)

    local = {p.relative_to(tmp_path / "raw").as_posix(): p.read_bytes()
             for p in (tmp_path / "raw").rglob("*") if p.is_file()}
    remote = {name[len("raw/"):]: data for name, data in memory.objects.items()}
    assert sorted(remote) == sorted(local)
    # index.uuid is new on every finalize; index.sqlite is the same rows, built another way
    differ = {".nv-meta/index.uuid", ".nv-meta/index.sqlite"}
    assert {n: d for n, d in remote.items() if n not in differ} == {
        n: d for n, d in local.items() if n not in differ}
    Path(tmp_path / "memory.sqlite").write_bytes(remote[".nv-meta/index.sqlite"])
    assert sqlite_rows(tmp_path / "memory.sqlite") == sqlite_rows(
        tmp_path / "raw/.nv-meta/index.sqlite")

    report = validate(there, scratch_dir=tmp_path)  # type: ignore[arg-type]
    assert report.ok, report.problems
    assert report.directory == "memory://bench/raw"
    on_disk = validate(tmp_path / "raw").summary
    assert report.summary == dataclasses.replace(on_disk, directory="memory://bench/raw")


class _ReadsCounted(MemoryStore):
    """A memory store that keeps each ranged read it answers: (name, offset, size)."""

    def __init__(self) -> None:
        super().__init__("memory://counted")
        self.ranges: list[tuple[str, int, int]] = []

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        self.ranges.append((name, offset, size))
        return super().read_range(name, offset, size)


def test_finalize_reads_each_first_sample_from_the_store_once(tmp_path):
    # finalize checks the encoding on the first sample, its validation reads the first sample of
    # each split twice more (the summary, the sample checks): a store far away pays each read
    counted = _ReadsCounted()
    _unfinalized(tmp_path / "raw", counted)
    finalize(Location("memory://counted", counted), encoding="raw", split=SPLIT,
             scratch_dir=tmp_path)

    splits = (tmp_path / "raw").glob("*.tar")  # one shard a split: each a split's first
    first_samples = {}
    for shard in sorted(p.name for p in splits):
        offsets = tarindex.idx_offsets(counted.objects[f"{shard}.idx"])
        first_samples[shard] = (shard, 0, offsets[1])
    assert len(first_samples) == 3
    reads = Counter(r for r in counted.ranges if r in first_samples.values())
    assert reads == Counter(first_samples.values()), counted.ranges


@pytest.mark.parametrize("folder", ["first-samples", "work", "view"])
def test_a_dataset_named_as_the_views_own_files_finalizes(tmp_path, folder):
    # the view keeps files of its own (first samples, index parts) beside the dataset's
    memory = MemoryStore("memory://bench")
    _unfinalized(tmp_path / "raw", memory.folder(folder))
    there = Location(f"memory://bench/{folder}", memory.folder(folder))
    result = finalize(there, encoding="raw", split=SPLIT, scratch_dir=tmp_path)
    assert result.validation is not None and result.validation.ok
    assert result.index.num_samples == 9
