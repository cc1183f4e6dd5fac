"""A few inputs with a --split: without --shard-size, shards small enough that every split with a
non-zero ratio gets one, the inputs split as one input per shard would split them; a
--shard-size the user set is kept, and a split it cannot cut refused."""

from __future__ import annotations

import itertools

import pytest
import yaml
from shardcook import validate
from shardcook.dataset.index.splits import fit_shard_size, inputs_by_split, split_by_ratio

from tests.helpers.raw import energon_parts, make_folder, manifest, run_cli, shard_hashes

SPLIT = "0.9,0.1,0"
CHOSEN = ("INFO: --split 0.9,0.1,0 leaves the train split empty at 1,000 inputs per shard (10 "
          "inputs); writing 9 inputs per shard instead: 2 shards, 9 train and 1 val inputs, as "
          "one input per shard would split them (give --shard-size to choose the size "
          "yourself).")


@pytest.mark.parametrize(("inputs", "ratio", "size"), [
    (10, (0.9, 0.1, 0), 9),  # shards of 9 and 1
    (24, (0.9, 0.1, 0), 21),  # `shardcook demo`'s 24 images
    (1000, (0.9, 0.1, 0), 900),  # shards of 900 and 100
    (10, (8, 1, 1), 1),
    (3, (0.5, 0.5, 0), 1),
    (2000, (0.9, 0.1, 0), 1000),  # enough inputs: the size asked
    (10, (1, 0, 0), 1000),  # one split: nothing to cut
    (1, (0.9, 0.1, 0), 1),  # too few for train even one per shard: refused by the caller
])
def test_fit_shard_size(inputs, ratio, size):
    assert fit_shard_size(inputs, 1000, ratio) == size


def test_the_fit_is_the_largest_size_that_splits_as_one_input_per_shard():
    """Over many input counts and ratios: the size asked when every split with a share gets a
    shard; else the largest smaller size cutting the inputs as one per shard does, with the
    shard cut `finalize` makes (Energon's) giving each split those inputs."""
    ratios = [(0.9, 0.1, 0), (0.8, 0.1, 0.1), (8, 1, 1), (0.5, 0.5, 0), (0.98, 0.01, 0.01),
              (0.7, 0, 0.3), (1, 0, 0)]
    for n, asked, ratio in itertools.product(range(1, 130), (1, 7, 50, 1000), ratios):
        size = fit_shard_size(n, asked, ratio)
        by_input = inputs_by_split(n, 1, ratio)
        at_asked = inputs_by_split(n, asked, ratio)
        if all(got or not r for got, r in zip(at_asked, ratio, strict=True)):
            assert size == asked, (n, asked, ratio)
            continue
        assert 1 <= size <= min(asked, n), (n, asked, ratio, size)
        assert inputs_by_split(n, size, ratio) == by_input
        # a size of n or more makes the one shard n makes
        assert all(inputs_by_split(n, s, ratio) != by_input
                   for s in range(size + 1, min(asked, n) + 1))
        held = {f"{u:06d}.tar": min(size, n - u * size) for u in range(-(-n // size))}
        if by_input[0]:  # else refused before any work
            parts = split_by_ratio(list(held), ratio).parts
            assert [sum(held[s] for s in parts[name]) for name in ("train", "val", "test")
                    ] == by_input


def test_ten_photos_with_a_split_just_work(tmp_path):
    """The README's first own-data example on 10 photos: a shard size chosen and said in one
    line, recorded in the manifest, every split read back through Energon."""
    photos = make_folder(tmp_path / "photos", 10, layout="flat", photos=2)
    out = tmp_path / "out"
    r = run_cli("raw", "--input-dir", str(photos), "--output-dir", str(out), "--image-size", "64",
                "--split", SPLIT)
    assert r.stderr.splitlines()[0] == CHOSEN and r.stderr.count("INFO:") == 1, r.stderr
    assert manifest(out)["config"]["output"]["shard_size"] == 9
    split = yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())["split_parts"]
    assert split == {"train": ["000000.tar"], "val": ["000001.tar"], "test": []}
    assert validate(out).ok
    read = energon_parts(out)
    assert sorted(k for k, (s, _) in read.items() if s == "val") == ["0000000009"]
    assert len(read) == 10


def test_a_rerun_and_status_agree_with_the_size_chosen(tmp_path):
    """The size chosen is the size a rerun chooses again: a run missing a shard resumes (no
    'shard_size: 1000 -> 9' refusal), `status` names the missing unit, and the result is the
    uninterrupted run's bytes."""
    photos = make_folder(tmp_path / "photos", 10, layout="flat", photos=0)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    args = ["--input-dir", str(photos), "--image-size", "32", "--split", SPLIT, "--quiet"]
    run_cli("raw", *args, "--output-dir", str(whole))
    run_cli("raw", *args, "--output-dir", str(cut), "--no-finalize")
    (cut / ".shardcook" / "progress" / "000001.json").unlink()
    (cut / "000001.tar").unlink()
    r = run_cli("status", str(cut), check=False)
    assert "1 of 2 units are missing" in r.stdout + r.stderr, r
    run_cli("raw", *args, "--output-dir", str(cut))
    assert manifest(cut)["config"]["output"]["shard_size"] == 9
    assert "complete" in run_cli("status", str(cut)).stdout
    assert shard_hashes(cut) == shard_hashes(whole)


@pytest.mark.parametrize("how", ["flag", "config"])
def test_a_shard_size_the_user_set_is_kept(tmp_path, how):
    """--shard-size (or output.shard_size in a config file) is not overridden: a split it
    cannot cut is refused before any work, one sentence; one it can cut keeps it."""
    photos = make_folder(tmp_path / "photos", 10, layout="flat", photos=0)
    config = tmp_path / "c.yaml"

    def run(size: int, out: str):
        config.write_text(yaml.safe_dump({"output": {"shard_size": size}}))
        given = ["--shard-size", str(size)] if how == "flag" else ["--config", str(config)]
        return run_cli("raw", "--input-dir", str(photos), "--output-dir", str(tmp_path / out),
                       "--image-size", "32", "--split", SPLIT, "--quiet", *given, check=False)

    r = run(1000, "refused")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: the train split would be empty: 1 shard(s) of --shard-size 1,000 with train "
        "ratio 0.9 need at least 2 shards; give a lower --shard-size (or none, and shardcook "
        "picks one the split can cut) or raise the train ratio"]
    assert not (tmp_path / "refused").exists()
    r = run(4, "kept")
    assert r.returncode == 0 and "INFO" not in r.stderr, r.stderr
    assert manifest(tmp_path / "kept")["config"]["output"]["shard_size"] == 4
    assert sorted(p.name for p in (tmp_path / "kept").glob("*.tar")) == [
        "000000.tar", "000001.tar", "000002.tar"]


def test_too_few_inputs_even_at_one_per_shard(tmp_path):
    photos = make_folder(tmp_path / "photos", 3, layout="flat", photos=0)
    out = tmp_path / "out"
    r = run_cli("raw", "--input-dir", str(photos), "--output-dir", str(out), "--split",
                "0.1,0.9,0", check=False)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: the train split would be empty: 3 input(s) with train ratio 0.1 need at least 10 "
        "inputs, even at one input per shard; add inputs or raise the train ratio (--split)"]
    assert not out.exists()
