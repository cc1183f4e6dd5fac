"""The output folder's one owner: the shard-name rule it shares with the native writer, its one
atomic write (flushed to the disk, nothing left behind), and `--overwrite` by that rule."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import shardcook
from shardcook.dataset import finalize
from shardcook.files import write_atomic
from shardcook.layouts.names import is_shard_name, shard_name, split_shard_prefix
from shardcook.output.runfolder import marker_name

from tests.helpers.energon import make_raw_dataset
from tests.helpers.files import tree_state
from tests.helpers.raw import make_folder, run_cli
from tests.helpers.runfolder import local_run_folder

NUMBERS = (0, 1, 9, 10, 999_999, 1_000_000, 1_234_567, 2**40)
PREFIXES = ("", split_shard_prefix("train"), split_shard_prefix("val"),
            split_shard_prefix("test"))


@pytest.mark.parametrize("prefix", PREFIXES)
def test_every_name_the_writer_gives_is_a_shard_name(tmp_path: Path, prefix: str):
    for number in NUMBERS:
        assert is_shard_name(shard_name(number, prefix)), (number, prefix)
    # and the names the writer really puts on disk
    with shardcook.ShardWriter(str(tmp_path), shard_size=1, prefix=prefix,
                               first_shard=999_999) as w:
        for i in range(2):
            w.write(f"{i:010d}", {"txt": b"x"})
    written = {p.name for p in tmp_path.glob("*.tar")}
    assert written == {f"{prefix}999999.tar", f"{prefix}1000000.tar"}
    assert all(is_shard_name(name) for name in written)


@pytest.mark.parametrize("name", [
    "00001.tar", "0000001.tar", "000001.tar.idx", "000001.TAR", "Train-shard-000001.tar",
    "train-shard000001.tar", "-shard-000001.tar", "x000001.tar", "000001", "train-shard-.tar",
    "\u0660\u0660\u0660\u0660\u0660\u0661.tar",  # Arabic-Indic digits: int() reads them
    "train-shard-000001.tar/", " 000001.tar",
])
def test_names_the_writer_never_gives_are_not_shard_names(name: str):
    assert not is_shard_name(name)


def test_write_atomic_replaces_whole_and_flushes_to_disk(tmp_path: Path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                 real_fsync(fd)))
    target = tmp_path / "a.json"
    target.write_text("old")
    write_atomic(target, "néw")
    assert target.read_bytes() == "néw".encode()
    assert len(synced) == 1 and synced[0].startswith(str(tmp_path / ".a.json.tmp"))
    write_atomic(target, b"\x00bytes", fsync=False)
    assert target.read_bytes() == b"\x00bytes" and len(synced) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_write_atomic_keeps_the_old_file_when_the_disk_holds_the_new_one_short(
        tmp_path: Path, monkeypatch):
    """A file system that takes fewer bytes than written (a full quota some network file
    systems report late) fails the write before the rename: the old file stays whole."""
    target = tmp_path / "metadata.json"
    target.write_text("old, whole")
    real_fstat = os.fstat

    def short(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((*st[:6], st.st_size - 1, *st[7:]))

    monkeypatch.setattr(os, "fstat", short)
    with pytest.raises(OSError, match="holds 8 bytes after writing 9"):
        write_atomic(target, b"new whole")
    assert target.read_text() == "old, whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata.json"]


def test_write_atomic_leaves_nothing_behind_when_the_rename_fails(tmp_path: Path):
    folder = tmp_path / "taken"
    (folder / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        write_atomic(folder, "text")  # a folder holding files cannot be replaced by a file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_finalize_flushes_its_metadata_to_disk(tmp_path: Path, monkeypatch):
    """finalize's files are replaced through the one atomic write, which fsyncs each."""
    root = tmp_path / "ds"
    make_raw_dataset(root, 4, shard_size=2)
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                 real_fsync(fd)))
    finalize(root, encoding="raw", force=True)
    names = {Path(p).name.split(".tmp")[0].lstrip(".") for p in synced}
    assert {"dataset.yaml", "split.yaml", "info.json", "index.uuid", "finalize.json"} <= names


def test_run_folder_records_round_trip(tmp_path: Path):
    folder = local_run_folder(tmp_path / "out")
    folder.check()
    assert folder.read_manifest() is None and folder.read_markers([0]) == {}
    folder.write_manifest({"encoding": "raw", "shards": None})
    folder.write_marker(3, {"unit": 3, "shard": None})
    assert folder.read_markers([3]) == {3: {"unit": 3, "shard": None}}
    marker = tmp_path / "out" / marker_name(3)
    assert json.loads(marker.read_text()) == {"unit": 3, "shard": None}
    folder.write_marker(4, {"unit": 4, "shard": "000004.tar"})
    assert folder.read_markers([4]) == {}  # its shard is not there: the unit is not done
    folder.write_results({"encoding": "raw", "shards": {}}, {"num_written": 0})
    assert folder.read_manifest() == {"encoding": "raw", "shards": {}}
    assert json.loads(Path(folder.report_path).read_text()) == {"num_written": 0}
    assert folder.is_ours()


def test_overwrite_deletes_a_recorded_shard_numbered_past_a_million(tmp_path: Path):
    """Unit 1,000,000 gets `1000000.tar` from the writer; `--overwrite` knows it by the writer's
    rule, so it is deleted like any other shard the run recorded, instead of refusing."""
    src = make_folder(tmp_path / "in", 2, photos=0)
    out = tmp_path / "out"
    base = ["raw", "--input-dir", str(src), "--output-dir", str(out), "--shard-size", "2",
            "--no-finalize", "--quiet"]
    run_cli(*base, "--image-size", "32")
    with shardcook.ShardWriter(str(out), shard_size=1, first_shard=1_000_000) as w:
        w.write("0000000000", {"txt": b"x"})
    manifest_path = out / ".shardcook/manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["shards"]["1000000.tar"] = 1
    manifest_path.write_text(json.dumps(manifest))
    (out / "notes.txt").write_text("mine")
    r = run_cli(*base, "--image-size", "48", "--overwrite", check=False)
    assert r.returncode == 0, r.stderr
    assert not (out / "1000000.tar").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.glob("*.tar")) == ["000000.tar"]


def test_overwrite_refuses_a_tar_named_almost_like_a_shard(tmp_path: Path):
    """`0000001.tar` (seven digits, a leading zero) is no name the writer gives: a foreign tar
    finalize would index, so nothing is deleted."""
    out = tmp_path / "out"
    folder = local_run_folder(out)
    folder.check()
    folder.write_manifest({"shards": {}})
    (out / "0000001.tar").write_bytes(b"user's")
    before = tree_state(out)
    with pytest.raises(shardcook.errors.ConfigError, match="a tar shardcook did not write"):
        folder.clear()
    assert tree_state(out) == before
