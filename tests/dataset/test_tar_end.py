"""Where a shard ends, and an index that ends too soon.

A zero block where a header belongs is the end of a tar only when nothing but zeros follows it
(the second end block and a writer's padding): a header zeroed amid the members is corruption,
which finalize, validate and count_samples name with its byte offset, where Python's tarfile (and
so `energon prepare`) stops there and indexes only the samples before it. A `.tar.idx` shorter
than the shard's headers (ours or one `energon prepare` wrote) fails validate, with or without
--deep, naming the shard. The same in a bucket: tests/storage/test_remote_tar_end.py."""

from __future__ import annotations

import json

import pytest
from shardcook import ShardError, count_samples, finalize, validate

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.shards import energon_prepare
from tests.helpers.tarend import end_padded_tars, shards, without_last_entry, zero_second_header


def test_a_zeroed_header_amid_a_shard_fails_finalize_naming_its_offset(tmp_path):
    d = shards(tmp_path / "ds")
    at, where = zero_second_header(d / "000000.tar")
    with pytest.raises(ShardError, match=f"at byte {at}$"):
        count_samples(d / "000000.tar")
    with pytest.raises(ShardError) as e:
        finalize(d, encoding="generic")
    assert where in str(e.value)
    r = cli("finalize", "--encoding", "generic", d)
    assert r.code != 0 and where in one_error_line(r)
    assert not (d / ".nv-meta").exists()


def test_validate_refuses_the_short_index_energon_prepare_writes_of_such_a_shard(tmp_path):
    """tarfile stops at the zero block: Energon's index holds the first sample only, and its
    .info.json agrees, so only the shard's own headers tell."""
    d = shards(tmp_path / "ds")
    _, where = zero_second_header(d / "000000.tar")
    r = energon_prepare(d, "--split-ratio", "1,0,0")
    assert r.returncode == 0, r.stdout + r.stderr
    info = json.loads((d / ".nv-meta" / ".info.json").read_text())
    assert info["shard_counts"]["000000.tar"] == 1  # what tarfile saw
    for deep in (False, True):
        report = validate(d, deep=deep)
        assert [p for p in report.problems if where in p], report.problems


def test_tars_with_their_writers_end_of_archive_padding_index_whole(tmp_path):
    d = tmp_path / "writers"
    zeros = end_padded_tars(d)
    assert zeros["tarfile.tar"] > 1024 and zeros["shardcook-000000.tar"] >= 1024, zeros
    result = finalize(d, encoding="generic")
    assert result.index.num_samples == 18
    assert validate(d, deep=True).ok


@pytest.mark.parametrize("by", ["shardcook", "energon"])
def test_a_short_tar_idx_fails_validate_with_and_without_deep(tmp_path, by):
    """validate reads every local shard's headers (a header scan, no data), so the check needs
    no --deep."""
    d = shards(tmp_path / "ds")
    if by == "shardcook":
        finalize(d, encoding="generic")
    else:
        r = energon_prepare(d, "--split-ratio", "1,0,0")
        assert r.returncode == 0, r.stdout + r.stderr
    idx = d / "000001.tar.idx"
    idx.write_bytes(without_last_entry(idx.read_bytes()))
    for deep in (False, True):
        report = validate(d, deep=deep)
        assert not report.ok
        assert any(p.startswith("000001.tar.idx has 3 entries where the shard needs 4")
                   for p in report.problems), report.problems
