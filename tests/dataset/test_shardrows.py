"""The index rows a bucket run records per shard (`dataset/index/shardrows.py`): they are the native
indexer's, name the object they describe, and are used only while it is unchanged."""

from __future__ import annotations

import sqlite3
import struct

from shardcook import ShardWriter, _native
from shardcook.dataset.index import shardrows

from tests.helpers.dataset import raw_parts


def _offsets(idx) -> list[int]:
    return [n for (n,) in struct.iter_unpack("=Q", idx.read_bytes())]


def test_rows_describe_one_object_and_merge_into_the_indexers_index(tmp_path):
    with ShardWriter(tmp_path, shard_size=3) as w:
        for i in range(6):
            w.write(f"{i:010d}", raw_parts(i))
    shards = ["000000.tar", "000001.tar"]
    whole = tmp_path / "whole.sqlite"
    _native.index_shards(tmp_path, shards, whole)
    with sqlite3.connect(whole) as db:
        assert db.execute("PRAGMA page_size").fetchone() == (shardrows.INDEX_PAGE_SIZE,)

    rows = []
    for shard in shards:
        part = tmp_path / f"{shard}.rows.sqlite"
        _native.index_shards(tmp_path, [shard], part)
        shardrows.compact(part)
        shardrows.record_object(part, (tmp_path / shard).stat().st_size, "etag-" + shard)
        shardrows.record_object(part, (tmp_path / shard).stat().st_size, "etag-" + shard)
        rows.append(part)
    size, offsets = (tmp_path / shards[0]).stat().st_size, _offsets(tmp_path / "000000.tar.idx")
    assert rows[0].stat().st_size < 64 * 1024
    assert shardrows.rows_match(rows[0], size, "etag-000000.tar", offsets)
    assert not shardrows.rows_match(rows[0], size, "another", offsets)
    assert not shardrows.rows_match(rows[0], size, None, offsets)
    assert not shardrows.rows_match(rows[0], size + 512, "etag-000000.tar", offsets)
    assert not shardrows.rows_match(rows[0], size, "etag-000000.tar", offsets[:-1])
    assert not shardrows.rows_match(rows[0], size, "etag-000000.tar", None)
    assert not shardrows.rows_match(tmp_path / "000000.tar.idx", size, "etag-000000.tar", offsets)

    merged = tmp_path / "merged.sqlite"
    shardrows.start_index(merged, rows[0])
    for i, part in enumerate(rows):
        shardrows.append_rows(merged, part, i, shards)
    assert shardrows.part_summary(rows[1], shards[1:]) == (
        [("000001.tar", 3)], ["jpg", "txt", "meta.json"])

    def dump(path):
        with sqlite3.connect(path) as db:
            return (db.execute("PRAGMA page_size").fetchone(),
                    db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall(),
                    db.execute("SELECT * FROM samples ORDER BY rowid").fetchall(),
                    db.execute("SELECT * FROM sample_parts ORDER BY rowid").fetchall())

    assert dump(merged) == dump(whole)
