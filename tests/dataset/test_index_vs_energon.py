"""`build_index` against the reference: `energon prepare` on a copy of the same shards must write
the same `.tar.idx` bytes, `.info.json`, split.yaml and index.sqlite rows."""

from __future__ import annotations

import tarfile

import pytest
from shardcook import DuplicateKeyError, build_index, finalize

from tests.helpers.raw import energon_captions
from tests.helpers.shards import (
    assert_same_index,
    energon_prepare,
    tarfile_shard,
    write_shards,
)


def test_our_shards_with_ratio_split(tmp_path, twin):
    ours = tmp_path / "ours"
    write_shards(ours, n_shards=7, per_shard=5)
    theirs = twin(ours)
    result = build_index(ours, split=(0.6, 0.2, 0.2))
    ref = energon_prepare(theirs, "--split-ratio", "0.6,0.2,0.2")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert_same_index(ours, theirs)
    assert result.num_samples == 35
    assert [len(result.splits[s]) for s in ("train", "val", "test")] == [4, 1, 2]


def test_foreign_tars_with_long_names_metadata_folders_and_nesting(tmp_path, twin):
    ours = tmp_path / "ours"
    long = "x" * 110
    for shard in range(4):
        fmt = tarfile.GNU_FORMAT if shard % 2 else tarfile.PAX_FORMAT
        members = [("__meta__/info.json", b"{}"), ("folder", None)]
        for i in range(3):
            key = f"{long}{shard}_{i}"
            members += [
                (f"folder/{key}.jpg", b"j" * (shard * 300 + i)),
                (f"folder/{key}.txt", b"t"),
            ]
        if shard == 0:  # a sample with key __info__ (Energon does not skip it), so only once
            members.append(("__info__.json", b'{"shard": 0}'))
        tarfile_shard(ours / f"part{shard // 2}" / f"shard-{shard:03d}.tar", members, fmt)
    theirs = twin(ours)
    build_index(ours, split="8,1,1")
    ref = energon_prepare(theirs, "--split-ratio", "8,1,1")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert_same_index(ours, theirs)


def test_shuffled_split_matches_shuffle_tars(tmp_path, twin):
    ours = tmp_path / "ours"
    write_shards(ours, n_shards=10, per_shard=2)
    theirs = twin(ours)
    build_index(ours, split=(0.5, 0.3, 0.2), shuffle_seed=42, sqlite=False)
    ref = energon_prepare(theirs, "--split-ratio", "0.5,0.3,0.2", "--shuffle-tars")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert_same_index(ours, theirs, sqlite=False)
    assert not (ours / ".nv-meta" / "index.sqlite").exists()


def test_split_patterns_with_braces_and_backslashes(tmp_path, twin):
    ours = tmp_path / "ours"
    write_shards(ours, n_shards=6, per_shard=2)
    theirs = twin(ours)
    # Brace expansion removes the backslash, so `\.` reaches the regex as `.`: kept as Energon
    # has it.
    patterns = {"train": "0000{00..03}\\.tar", "val": "00000[45].tar"}
    build_index(ours, split_parts=patterns)
    ref = energon_prepare(
        theirs, *[a for n, p in patterns.items() for a in ("--split-parts", f"{n}:{p}")]
    )
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert_same_index(ours, theirs)


def test_energon_loader_reads_every_sample_of_our_index(tmp_path):
    ours = tmp_path / "ours"
    write_shards(ours, n_shards=3, per_shard=4)
    finalize(ours, validate=False)
    seen = energon_captions(ours, "train")
    assert seen == {f"{i:010d}": f"caption {i}" for i in range(12)}


def test_duplicate_keys_are_refused_like_energon_but_clearly(tmp_path, twin):
    ours = tmp_path / "ours"
    write_shards(ours, n_shards=2, per_shard=3)
    with __import__("shardcook").ShardWriter(ours, first_shard=2) as w:
        w.write("0000000001", {"txt": b"again"})
    theirs = twin(ours)
    with pytest.raises(DuplicateKeyError) as e:
        build_index(ours)
    assert (
        "0000000001" in str(e.value)
        and "000000.tar" in str(e.value)
        and "000002.tar" in str(e.value)
    )
    assert not list(ours.glob("*.idx")) and not (ours / ".nv-meta" / ".info.json").exists()
    ref = energon_prepare(theirs, "--split-ratio", "1,0,0")
    assert ref.returncode == 1 and "duplicate" in ref.stdout.lower()


def test_interleaved_members_of_one_key_are_a_duplicate(tmp_path):
    tarfile_shard(tmp_path / "s.tar", [("a.txt", b"1"), ("b.txt", b"2"), ("a.jpg", b"3")])
    with pytest.raises(DuplicateKeyError, match="not contiguous"):
        build_index(tmp_path)
