"""`energon prepare`'s flags on `finalize`, against `energon prepare` 7.4.1 itself: the renamed
shards of `--fix-duplicates`, the split of `--shuffle-tars`, the config of `--dataset-yaml-name`
and `--skip-dataset-yaml` byte for byte, and what `--tar-index-only` rewrites and keeps; plus
`--no-sample-tables`, which validate and info describe for what it is."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml
from shardcook import ShardWriter

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.shards import assert_same_index, energon_prepare, sqlite_rows

SPLIT = "0.6,0.2,0.2"
FILTER = ("EXTENSION", "")


def _shards(folder: Path) -> Path:
    """Seven shards whose keys repeat from shard to shard (as separately written shards' do)."""
    for n in range(7):
        with ShardWriter(folder, shard_size=3, first_shard=n) as w:
            for i in range(3):
                w.write(f"sample{i:04d}", {"txt": f"text {n} {i}".encode(), "json": b"{}"})
    return folder


def _ok(*args: object) -> str:
    r = cli("finalize", *args)
    assert r.code == 0 and r.escaped is None, r.stdout + r.stderr
    return r.stdout


def _tars(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tar*"))}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    """The same shards prepared by `energon prepare --fix-duplicates --shuffle-tars
    --dataset-yaml-name`, by finalize with those flags, and by finalize with the issue's
    single-flag command lines."""
    tmp = tmp_path_factory.mktemp("flags")
    source = _shards(tmp / "source")
    folders = {name: Path(shutil.copytree(source, tmp / name))
               for name in ("energon", "together", "fixed")}
    ref = energon_prepare(folders["energon"], "--split-ratio", SPLIT, "--shuffle-tars",
                          "--fix-duplicates", "--dataset-yaml-name", "crude.yaml",
                          "--num-workers", "1")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    _ok(folders["together"], "--encoding", "generic", "--split", SPLIT, "--shuffle-tars",
        "--fix-duplicates", "--dataset-yaml-name", "crude.yaml")
    _ok(folders["fixed"], "--encoding", "generic", "--split", SPLIT, "--fix-duplicates")
    # --shuffle-tars alone, on shards Energon has already renamed
    folders["shuffled"] = tmp / "shuffled"
    folders["shuffled"].mkdir()
    for name in source.glob("*.tar"):
        shutil.copy(folders["energon"] / name.name, folders["shuffled"] / name.name)
    _ok(folders["shuffled"], "--encoding", "generic", "--split", SPLIT, "--shuffle-tars",
        "--skip-dataset-yaml")
    return folders


def test_fix_duplicates_renames_members_as_energon_does(prepared):
    theirs = prepared["energon"]
    assert _tars(prepared["together"]) == _tars(theirs)
    assert_same_index(prepared["together"], theirs)
    # the command line, without --shuffle-tars: the same shards, indexes and rows
    fixed = prepared["fixed"]
    assert _tars(fixed) == _tars(theirs)
    assert (fixed / ".nv-meta/.info.json").read_text() == (theirs / ".nv-meta/.info.json"
                                                          ).read_text()
    assert sqlite_rows(fixed / ".nv-meta/index.sqlite") == sqlite_rows(
        theirs / ".nv-meta/index.sqlite")
    keys = {k for (_, k, *_) in sqlite_rows(fixed / ".nv-meta/index.sqlite")["samples"]}
    assert "000003.tar/sample0002" in keys


def test_shuffle_tars_and_the_dataset_config_flags_match_energon(prepared):
    theirs, shuffled = prepared["energon"], prepared["shuffled"]
    assert_same_index(shuffled, theirs)
    assert not (shuffled / ".nv-meta/dataset.yaml").exists()  # --skip-dataset-yaml
    together = prepared["together"]
    assert not (together / ".nv-meta/dataset.yaml").exists()
    ours = yaml.safe_load((together / ".nv-meta/crude.yaml").read_text())
    assert {k: ours[k] for k in ("__module__", "__class__")} == yaml.safe_load(
        (theirs / ".nv-meta/crude.yaml").read_text())
    refused = cli("finalize", together, "--force", "--shuffle-tars", "--shuffle-seed", "7")
    assert refused.code == 2 and "--shuffle-tars" in one_error_line(refused)


def _with_media_and_stale_idx(folder: Path) -> None:
    """Media tables as Energon makes them, and every `.tar.idx` damaged, as a reindex finds
    them."""
    db = sqlite3.connect(folder / ".nv-meta/index.sqlite")
    with db:
        db.execute("CREATE TABLE IF NOT EXISTS media_metadata (entry_key TEXT PRIMARY KEY, "
                   "metadata_type TEXT NOT NULL, metadata_json TEXT NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS media_filters (filter_id INTEGER PRIMARY KEY "
                   "AUTOINCREMENT, strategy TEXT NOT NULL, patterns TEXT, created_at_utc TEXT "
                   "DEFAULT CURRENT_TIMESTAMP, UNIQUE(strategy, patterns))")
        db.execute("INSERT INTO media_metadata VALUES ('a.jpg', 'image', '{}')")
        db.execute("INSERT INTO media_filters (strategy, patterns) VALUES (?, ?)", FILTER)
        db.execute("DELETE FROM samples WHERE tar_file_id = 1")
    db.close()
    for idx in folder.glob("*.tar.idx"):
        idx.write_bytes(b"\0" * 8)


def test_tar_index_only_rewrites_the_shard_index_and_keeps_the_rest(prepared, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(prepared["together"], ours)
    shutil.copytree(prepared["energon"], theirs)
    for folder in (ours, theirs):
        _with_media_and_stale_idx(folder)
    kept = {f: (ours / ".nv-meta" / f).read_bytes() for f in (".info.json", "split.yaml",
                                                               "crude.yaml")}
    uuid = (ours / ".nv-meta/index.uuid").read_text()
    ref = energon_prepare(theirs, "--tar-index-only", "--num-workers", "1")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    _ok(ours, "--tar-index-only")
    assert_same_index(ours, theirs)
    assert {f: (ours / ".nv-meta" / f).read_bytes() for f in kept} == kept
    assert (ours / ".nv-meta/index.uuid").read_text() != uuid
    media = "SELECT * FROM media_metadata"
    for folder in (ours, theirs):
        with sqlite3.connect(folder / ".nv-meta/index.sqlite") as db:
            assert db.execute(media).fetchall() == [("a.jpg", "image", "{}")]
    refused = cli("finalize", ours, "--tar-index-only", "--split", SPLIT)
    assert refused.code == 2 and "--split" in one_error_line(refused)


def test_no_sample_tables_keeps_media_and_validate_says_what_it_cannot_check(prepared,
                                                                             tmp_path):
    folder = tmp_path / "train-only"
    shutil.copytree(prepared["together"], folder)
    _with_media_and_stale_idx(folder)
    out = _ok(folder, "--force", "--no-sample-tables", "--dataset-yaml-name", "crude.yaml")
    assert "validated: ok" in out
    with sqlite3.connect(folder / ".nv-meta/index.sqlite") as db:
        tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"media_metadata", "media_filters", "sqlite_sequence"}
    assert_same_index(folder, prepared["energon"], sqlite=False)
    r = cli("validate", folder, "--json")
    report = json.loads(r.stdout)
    assert any("sample tables" in w for w in report["warnings"]), report
    info = cli("info", folder)
    assert "no sample tables" in info.stdout, info.stdout
    # with no media table there is no index.sqlite at all
    with sqlite3.connect(folder / ".nv-meta/index.sqlite") as db:
        db.execute("DROP TABLE media_metadata")
        db.execute("DROP TABLE media_filters")
    _ok(folder, "--force", "--no-sample-tables", "--dataset-yaml-name", "crude.yaml")
    assert not (folder / ".nv-meta/index.sqlite").exists()
