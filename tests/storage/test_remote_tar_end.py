"""tests/dataset/test_tar_end.py on a dataset in a bucket: the header walk refuses a header
zeroed amid a shard, naming the object and the byte offset, and leaves the bucket as it was; it
takes the end-of-archive padding of tarfile, webdataset and our writer for the end; validate
refuses a `.tar.idx` one sample short (--deep against the shard's headers), and an index short
of its shard in every file (ours or `energon prepare`'s) under --deep."""

from __future__ import annotations

import shutil
import tarfile

import pytest
from shardcook import ShardError, finalize, validate

from tests.helpers.shards import energon_prepare
from tests.helpers.tarend import end_padded_tars, shards, without_last_entry, zero_second_header


def test_a_zeroed_header_amid_a_shard_in_a_bucket_fails_finalize(s3_store, tmp_path):
    d = shards(tmp_path / "ds")
    _, where = zero_second_header(d / "000001.tar")
    s3_store.upload_folder(d, "zeroed")
    with pytest.raises(ShardError) as e:
        finalize(s3_store.url("zeroed"), encoding="generic", scratch_dir=tmp_path)
    assert str(e.value) == f"{s3_store.url('zeroed')}/{where}"
    assert s3_store.keys("zeroed/") == ["zeroed/000000.tar", "zeroed/000001.tar"]


def test_tars_with_their_writers_padding_index_whole_in_a_bucket(s3_store, tmp_path):
    end_padded_tars(tmp_path / "writers")
    s3_store.upload_folder(tmp_path / "writers", "writers")
    url = s3_store.url("writers")
    assert finalize(url, encoding="generic", scratch_dir=tmp_path).index.num_samples == 18
    assert validate(url, deep=True, scratch_dir=tmp_path).ok


def test_a_short_tar_idx_in_a_bucket_fails_validate(s3_store, tmp_path):
    s3_store.upload_folder(shards(tmp_path / "ds"), "short")
    url = s3_store.url("short")
    finalize(url, encoding="generic", scratch_dir=tmp_path)
    s3_store.put("short/000001.tar.idx", without_last_entry(s3_store.get("short/000001.tar.idx")))
    for deep in (False, True):
        report = validate(url, deep=deep, scratch_dir=tmp_path)
        assert any(p.startswith("000001.tar.idx has 3 entries where the shard needs 4")
                   for p in report.problems), report.problems


@pytest.mark.parametrize("by", ["shardcook", "energon"])
def test_an_index_short_of_its_shard_in_a_bucket_fails_validate_deep(s3_store, tmp_path, by):
    """What `energon prepare` writes when a shard's bytes reach it cut short (its forked workers
    were seen sharing a connection behind a slow store): `.tar.idx`, `.info.json` and
    index.sqlite agree on fewer samples than the shard holds, so only the shard's own headers
    tell, which --deep reads. finalize reads the tars themselves: its index is whole."""
    full = shards(tmp_path / "full")
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    data = (full / "000001.tar").read_bytes()
    with tarfile.open(full / "000001.tar") as tar:
        at = tar.getmembers()[4].offset  # two members a sample: the third sample's header
    (cut / "000001.tar").write_bytes(data[:at] + bytes(1024))  # a whole tar, a sample short
    if by == "shardcook":
        finalize(cut, encoding="generic", split="1,0,0")
    else:
        r = energon_prepare(cut, "--split-ratio", "1,0,0")
        assert r.returncode == 0, r.stdout + r.stderr
    (cut / "000001.tar").write_bytes(data)
    s3_store.upload_folder(cut, "short")
    url = s3_store.url("short")
    assert validate(url, scratch_dir=tmp_path).ok  # every file agrees: only the shard tells
    report = validate(url, deep=True, scratch_dir=tmp_path)
    assert any(p.startswith("000001.tar.idx has 3 entries where the shard needs 4")
               for p in report.problems), report.problems
    assert finalize(url, encoding="generic", split="1,0,0", force=True,
                    scratch_dir=tmp_path).index.num_samples == 6
    assert validate(url, deep=True, scratch_dir=tmp_path).ok
