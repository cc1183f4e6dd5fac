"""finalize never leaves a dataset worse than it found it: a wrong --encoding, new metadata that
does not validate, or splits Energon would misread are refused with the folder byte for byte as
it was."""

from __future__ import annotations

import re

import pytest
from shardcook import ConfigError, DatasetError, ShardWriter, build_index, finalize

from tests.helpers.dataset import cli, one_error_line, raw_parts, write_dataset
from tests.helpers.files import tree_state


@pytest.fixture
def good_raw(tmp_path):
    return write_dataset(tmp_path / "good", n_shards=3)


@pytest.mark.parametrize("encoding", ["preencoded", "chatml", "bridge-flux"])
def test_a_wrong_encoding_is_refused_before_anything_is_written(good_raw, encoding):
    before = tree_state(good_raw)
    r = cli("finalize", good_raw, "--force", "--encoding", encoding)
    assert r.code == 2
    line = one_error_line(r)
    assert f"do not fit the {encoding} encoding" in line
    assert "they fit the raw encoding: pass --encoding raw" in line
    assert tree_state(good_raw) == before
    assert cli("validate", good_raw).code == 0


def _shards_without_captions_after_the_first(d):
    """Shard 000000 of raw samples; shard 000001's samples lack their caption."""
    with ShardWriter(d, shard_size=2) as w:
        for i in range(4):
            parts = raw_parts(i)
            if i >= 2:
                del parts["txt"]
            w.write(f"{i:010d}", parts)
    return d


def test_new_metadata_that_does_not_validate_leaves_the_old_byte_for_byte(tmp_path):
    d = _shards_without_captions_after_the_first(tmp_path / "d")
    finalize(d, encoding="raw", exclude=["000001"])
    before = tree_state(d)
    with pytest.raises(DatasetError, match=r"(?s)left its metadata as it was:.*lacks the raw"):
        finalize(d, force=True, exclude=[],
                 split_parts={"train": "000000.*", "val": "000001.*"})
    assert tree_state(d) == before
    assert cli("validate", d).code == 0


def test_a_first_finalize_that_does_not_validate_writes_nothing(tmp_path):
    d = _shards_without_captions_after_the_first(tmp_path / "d")
    before = tree_state(d)
    with pytest.raises(DatasetError, match="left its metadata as it was"):
        finalize(d, encoding="raw", split_parts={"train": "000000.*", "val": "000001.*"})
    assert tree_state(d) == before


@pytest.mark.parametrize("parts, message", [
    (["train:.*", "val:000001.*"],
     "000001.tar is in both the train and the val split"),
    (["bogus:.*"], "no train split"),
    (["val:.*"], "no train split"),
])
def test_broken_splits_are_refused(good_raw, parts, message):
    before = tree_state(good_raw)
    args = [a for p in parts for a in ("--split-parts", p)]
    r = cli("finalize", good_raw, "--force", *args)
    assert r.code == 2
    assert message in one_error_line(r)
    assert tree_state(good_raw) == before


def test_build_index_refuses_a_shard_in_two_splits(tmp_path):
    d = tmp_path / "d"
    with ShardWriter(d, shard_size=2) as w:
        for i in range(4):
            w.write(f"{i:010d}", raw_parts(i))
    before = tree_state(d)
    with pytest.raises(ConfigError,
                       match=re.escape("000001.tar is in both the train and the test split")):
        build_index(d, split_parts={"train": "00000[01].*", "test": "000001.*"})
    assert tree_state(d) == before


def _named_shards(d, prefixes):
    for prefix in prefixes:
        with ShardWriter(d, shard_size=2, prefix=prefix) as w:
            for i in range(2):
                w.write(f"{prefix}{i:010d}", raw_parts(i))
    return d


@pytest.mark.parametrize("prefixes, message", [
    (["train-shard-", ""], "train-shard-000000.tar is named for its split but 000000.tar is not"),
    (["val-shard-"], "no train split"),
])
def test_shard_names_that_cannot_say_the_split_are_refused(tmp_path, prefixes, message):
    d = _named_shards(tmp_path / "d", prefixes)
    before = tree_state(d)
    with pytest.raises(ConfigError, match=message):
        finalize(d, encoding="raw")
    assert tree_state(d) == before


def test_shard_names_say_the_split_when_nothing_records_it(tmp_path):
    d = _named_shards(tmp_path / "d", ["train-shard-", "val-shard-", "test-shard-"])
    result = finalize(d, encoding="raw")
    assert result.index.splits == {"train": ["train-shard-000000.tar"],
                                   "val": ["val-shard-000000.tar"],
                                   "test": ["test-shard-000000.tar"]}


def test_a_refusal_while_indexing_leaves_the_old_index_byte_for_byte(good_raw):
    import tarfile

    tarfile.open(good_raw / "000003.tar", "w").close()  # an empty shard: found while indexing
    before = tree_state(good_raw)
    r = cli("finalize", good_raw, "--force")
    assert r.code == 2
    assert "shard 000003.tar holds no samples" in one_error_line(r)
    assert tree_state(good_raw) == before


def test_build_index_refused_while_indexing_leaves_the_old_index_byte_for_byte(good_raw):
    import tarfile

    tarfile.open(good_raw / "000003.tar", "w").close()
    before = tree_state(good_raw)
    with pytest.raises(DatasetError, match=re.escape("shard 000003.tar holds no samples")):
        build_index(good_raw, force=True)
    assert tree_state(good_raw) == before
