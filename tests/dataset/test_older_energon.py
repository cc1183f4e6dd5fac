"""Datasets that older Energon versions prepared (`.info.yaml` before 7.0, no index.sqlite or
index.uuid before 6.0, Energon 6's index.sqlite without `sample_parts`) validate, `info` shows
them, Energon 7.4 loads them, and `finalize --force` upgrades them to exactly what today's
`energon prepare` writes when it re-prepares the same folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from shardcook import finalize, validate

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.older_energon import FORMS, META
from tests.helpers.raw import energon_captions
from tests.helpers.shards import (
    assert_same_index,
    energon_prepare,
    write_shards,
)

SPLIT = "0.7,0.3,0"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """Shards indexed by today's `energon prepare` (CrudeWebdataset, a train and a val split)."""
    root = tmp_path_factory.mktemp("older") / "today"
    write_shards(root, n_shards=4, per_shard=3)
    ref = energon_prepare(root, "--split-ratio", SPLIT)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    return root


@pytest.fixture(params=sorted(FORMS))
def old(request, prepared, tmp_path) -> Path:
    root = tmp_path / "old"
    shutil.copytree(prepared, root)
    return FORMS[request.param](root)


def energon_keys(root: Path, split: str) -> list[str]:
    """Every sample key of a split, read by Energon's own loader."""
    return sorted(energon_captions(root, split))


def test_energon_loads_them_and_so_does_validate(old):
    assert energon_keys(old, "train") == [f"{i:010d}" for i in range(6)]
    assert energon_keys(old, "val") == [f"{i:010d}" for i in range(6, 12)]
    report = validate(old)
    assert report.ok, report.problems
    assert report.summary is not None and report.summary.samples == 12
    assert {n: s.samples for n, s in report.summary.splits.items()} == {
        "train": 6, "val": 6, "test": 0}
    has_gaps = (old / META / ".info.yaml").exists() or not (old / META / "index.uuid").exists()
    assert len([w for w in report.warnings if "older Energon" in w]) == (1 if has_gaps else 0)
    deep = validate(old, deep=True)  # repeated parts found from the tars without sample_parts
    assert deep.ok, deep.problems
    r = cli("validate", old)
    assert r.code == 0 and r.stdout.count("warning: ") == (1 if has_gaps else 0), r.stdout


def test_the_warning_names_what_is_missing(prepared, tmp_path):
    root = tmp_path / "old"
    shutil.copytree(prepared, root)
    FORMS["energon6"](root)
    [warning] = validate(root).warnings
    assert warning == (
        f"{root} has an older Energon's index or an incomplete one (.info.yaml instead of "
        ".info.json; an index.sqlite without the sample_parts table): Energon trains on it as it "
        "is, but its lookups by key (`energon mount`, joined datasets) need index.sqlite with "
        "the sample_parts table and index.uuid; `shardcook finalize --force "
        f"{root}` upgrades it to what today's `energon prepare` writes")


def test_info_shows_them(old):
    r = cli("info", old, "--json")
    assert r.code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["samples"] == 12 and summary["shards"] == 4
    assert summary["dataset_type"] == "megatron.energon.CrudeWebdataset"


def test_finalize_without_force_names_the_file_that_is_there(old):
    name = ".info.yaml" if (old / META / ".info.yaml").exists() else ".info.json"
    r = cli("finalize", old)
    assert r.code == 2
    assert one_error_line(r) == (f"error: {old} is already indexed ({META}/{name} exists); pass "
                                 "force=True (--force) to rebuild its index")


def test_finalize_force_upgrades_them_to_what_energon_prepare_writes_today(old, twin):
    theirs = twin(old)
    before = {p.relative_to(old): p.read_bytes() for p in old.glob("*.tar")}
    r = cli("finalize", "--force", old, "--split", SPLIT)
    assert r.code == 0, r.stdout + r.stderr
    ref = energon_prepare(theirs, "--split-ratio", SPLIT, "--force-overwrite")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert_same_index(old, theirs)
    for name in (".info.yaml", "index.uuid", "dataset.yaml"):
        assert (old / META / name).exists() == (theirs / META / name).exists(), name
    if (theirs / META / ".info.yaml").exists():  # Energon keeps a legacy .info.yaml in step
        assert (old / META / ".info.yaml").read_text() == (theirs / META / ".info.yaml").read_text()
    assert yaml.safe_load((old / META / "dataset.yaml").read_text()) == yaml.safe_load(
        (theirs / META / "dataset.yaml").read_text())
    assert {p.relative_to(old): p.read_bytes() for p in old.glob("*.tar")} == before
    report = validate(old)
    assert report.ok and report.warnings == [], report.problems + report.warnings


def test_finalize_force_keeps_their_splits(old):
    r = cli("finalize", "--force", old)
    assert r.code == 0, r.stdout + r.stderr
    report = validate(old)
    assert report.ok and report.warnings == [], report.problems + report.warnings
    assert report.summary is not None
    assert {n: s.shards for n, s in report.summary.splits.items()} == {"train": 2, "val": 2}


@pytest.mark.parametrize(("text", "problem"), [
    ("shard_counts: [1, 2]\n", "'shard_counts' must map shard names to sample counts, not a list"),
    ("shard_counts:\n  !!binary c2hhcmQ=: 3\n", "shard names must be text, not a bytes (b'shard')"),
])
def test_a_damaged_info_yaml_is_named(prepared, tmp_path, text, problem):
    root = tmp_path / "old"
    shutil.copytree(prepared, root)
    FORMS["energon5"](root)
    (root / META / ".info.yaml").write_text(text)
    assert validate(root).problems == [
        f"{root}/{META}/.info.yaml: {problem}; run `shardcook finalize --force {root}`"]
    r = cli("validate", root)
    assert r.code == 1 and "Traceback" not in r.stdout + r.stderr
    finalize(root, force=True)
    assert validate(root).ok


def test_an_info_yaml_that_disagrees_with_info_json_is_named(prepared, tmp_path):
    root = tmp_path / "both"
    shutil.copytree(prepared, root)
    counts = json.loads((root / META / ".info.json").read_text())["shard_counts"]
    first = min(counts)
    stale = {**counts, first: counts[first] - 1}  # what an older Energon would read
    (root / META / ".info.yaml").write_text(yaml.dump({"shard_counts": stale}))

    report = validate(root)
    assert report.problems == [
        (f"{META}/.info.yaml and {META}/.info.json disagree on the sample counts (e.g. {first}: "
        f"{counts[first] - 1} and {counts[first]}), so an Energon before 7.0 reads other counts "
        f"than a later one; run `shardcook finalize --force {root}` to rewrite both from the "
        "shards")]
    assert cli("validate", root).code == 1
    finalize(root, force=True)
    assert yaml.safe_load((root / META / ".info.yaml").read_text())["shard_counts"] == counts
    assert validate(root).ok

