"""The AutoModel cache's finalize step (`automodel_cache.finish_cache`) on an output folder in
each store: a local folder, a bucket (the test S3 server) and memory. The same shards give the
same cache, each entry naming its file where it is; every shard is slimmed to its metadata
entries, in the store too, where its `.tar.idx` and recorded rows (which described it whole)
are gone; a rerun writes nothing; a record that cannot be read is damaged in a folder and, in a
bucket, tried again before the run stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shardcook import ShardWriter, _native
from shardcook._native import read_shard
from shardcook.dataset.index.shardrows import rows_name
from shardcook.dataset.location import dataset_view
from shardcook.errors import DatasetError
from shardcook.jobs.encode.automodel_cache import finish_cache, recorded_cache
from shardcook.layouts.automodel import CACHE_PART, CACHE_RECORD, ENTRY_PART, METADATA_FILE
from shardcook.storage import remote
from shardcook.storage.location import Location
from shardcook.storage.memory import MemoryStore

IDENTITY = {"processor": "flux", "model_name": "tiny", "model_type": "flux"}
EXTRA = {"caption_field": "internvl", "max_pixels": 4096}


def _run_output(folder: Path) -> list[str]:
    """A finished run's shards: two, of three and two samples, a cache file and an entry
    apiece; returns the shards' names."""
    with ShardWriter(folder, shard_size=3) as writer:
        for i in range(5):
            name = f"{32 + 16 * (i % 2)}x32/{i:032x}.pt"
            entry = {"cache_name": name, "entry": {"image_path": f"/in/{i}.jpg", "bucket_id": i}}
            writer.write(f"{i:010d}", [(CACHE_PART, bytes([i]) * (100 + i)),
                                       (ENTRY_PART, json.dumps(entry).encode())])
    shards = ["000000.tar", "000001.tar"]
    _native.index_shards(folder, shards, None)  # each shard's .tar.idx, as a run writes it
    (folder / rows_name(shards[0])).parent.mkdir(parents=True)
    for shard in shards:
        (folder / rows_name(shard)).write_bytes(b"rows of the whole shard")
    return shards


def _files(place: Location) -> dict[str, bytes]:
    return {name: place.store.read(name) for name in place.store.names()}


def _finished(place: Location, shards: list[str], tmp: Path) -> tuple[int, bool]:
    with dataset_view(place, scratch_dir=tmp) as view:
        return finish_cache(place.store, view, shards, IDENTITY, EXTRA)


def _places(s3_store, tmp_path: Path) -> list[Location]:
    local = tmp_path / "out"
    shards = _run_output(local)
    assert shards == ["000000.tar", "000001.tar"]
    memory = MemoryStore("memory://m").folder("out")
    bucket = Location(s3_store.url("out"), remote(s3_store.url("out"), "t"))
    for path in sorted(local.rglob("*")):
        if path.is_file():
            for store in (memory, bucket.store):
                store.write_bytes(path.relative_to(local).as_posix(), path.read_bytes())
    return [Location(str(local)), bucket, Location(memory.url, memory)]


def test_each_store_gets_the_same_cache_and_slimmed_shards(s3_store, tmp_path):
    shards = ["000000.tar", "000001.tar"]
    places = _places(s3_store, tmp_path)
    before = _files(places[0])
    seen = []
    for place in places:
        assert _finished(place, shards, tmp_path) == (5, True)
        files = _files(place)
        assert _finished(place, shards, tmp_path) == (5, False)  # a rerun writes nothing
        assert _files(place) == files
        named = [place.store.absolute().child(f"{32 + 16 * (i % 2)}x32/{i:032x}.pt")
                 for i in range(5)]
        for name in [n for n in files if n.startswith("metadata_shard_")]:
            entries = json.loads(files[name])
            assert [e["cache_file"] for e in entries] == named
            files[name] = files[name].replace(named[0].removesuffix(
                f"32x32/{0:032x}.pt").encode(), b"@/")
        for shard in shards:
            (tmp_path / "shard.tar").write_bytes(files[shard])
            samples = list(read_shard(tmp_path / "shard.tar"))
            assert [list(s.parts) for s in samples] == [[ENTRY_PART]] * len(samples)
            assert len(files[shard]) < len(before[shard])
        seen.append(files)
    local, bucket, memory = seen
    assert bucket == memory
    # a folder's shards are slimmed in place, their index files left as they were; a store's
    # index files, which described the shards whole, are gone
    whole = {f"{s}.idx" for s in shards} | {rows_name(s) for s in shards}
    assert {n: local[n] for n in whole} == {n: before[n] for n in whole}
    assert {n: d for n, d in local.items() if n not in whole} == bucket
    assert json.loads(bucket[METADATA_FILE])["total_items"] == 5
    assert json.loads(bucket[CACHE_RECORD]) == {"total_items": 5, "metadata": METADATA_FILE}


def test_a_rerun_deletes_the_index_a_killed_finalize_left_of_a_slimmed_shard(s3_store,
                                                                              tmp_path):
    """A finalize stopped after uploading a slimmed shard, before deleting its `.tar.idx`: the
    rerun, which finds the shard slim already, deletes it, as the first would have."""
    shards = ["000000.tar", "000001.tar"]
    place = _places(s3_store, tmp_path)[1]
    assert _finished(place, shards, tmp_path) == (5, True)
    place.store.write_bytes("000000.tar.idx", b"the index of the shard before it was slimmed")
    assert _finished(place, shards, tmp_path) == (5, False)
    assert not place.store.exists("000000.tar.idx")


def test_a_record_a_folder_cannot_read_is_damaged(tmp_path):
    out = Location(str(tmp_path / "out"))
    (tmp_path / "out" / CACHE_RECORD).mkdir(parents=True)  # a folder where the record goes
    with pytest.raises(DatasetError) as e:
        recorded_cache(out.store)
    assert str(e.value) == (f"{tmp_path}/out/{CACHE_RECORD} is damaged; rerun encode with "
                            "--overwrite.")
