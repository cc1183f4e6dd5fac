"""The input folder (`sources.folder.Folder`) is one class over a `storage.Store`: the same
files in a local folder and in a bucket give the same listing, names and bytes, and only what
the store says differs (reads ahead in a bucket, names leading out of the folder, symlinks and
FIFOs locally)."""

from __future__ import annotations

import os

import pytest
from shardcook.sources.folder import Folder, OutsideFolder, open_folder
from shardcook.storage import remote
from shardcook.storage.local import LocalStore

FILES = {"a.jpg": b"A", "b.txt": b"B", ".hidden": b"H", "images/c.jpg": b"C",
         "images/deep/d.jpg": b"D"}


def _answers(folder: Folder) -> list[object]:
    where = folder.where("images/../a.jpg")
    with folder.open("images/c.jpg") as f:
        streamed = f.read()
    return [folder.exists(), folder.is_file_itself(), folder.files(), folder.files("images"),
            folder.is_dir("images"), folder.is_dir("nope"), folder.is_file("images/../b.txt"),
            folder.is_file("images"), folder.inside("images/../a.jpg"), folder.inside("../x"),
            folder.inside("/etc/passwd"), where.removeprefix(folder.root),
            folder.read(where), streamed, folder.locate("images/c.jpg").removeprefix(folder.root),
            folder.unsafe()]


def test_a_local_folder_and_a_bucket_are_one_input_folder(s3_store, tmp_path):
    local = tmp_path / "in"
    for name, data in FILES.items():
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(data)
        s3_store.put(f"in/{name}", data)
    folders = [open_folder(local, "--input-dir"), open_folder(s3_store.url("in"), "--input-dir")]
    assert _answers(folders[0]) == _answers(folders[1]) == [
        True, False, ["a.jpg", "b.txt"], ["c.jpg"], True, False, True, False, True, False, False,
        "/a.jpg", b"A", b"C", "/images/c.jpg", []]
    # what the stores say differs: a bucket's files are read ahead, a local one's when needed
    assert [f.threads for f in folders] == [1, 16]
    assert folders[0].preload(folders[0].where("a.jpg")) is None
    assert folders[1].preload(folders[1].where("a.jpg")) == b"A"
    # a record's name leading out of the folder: a local path as written, refused in a bucket
    assert folders[0].locate("../x.jpg") == str(local / "../x.jpg")
    with pytest.raises(OutsideFolder):
        folders[1].locate("../x.jpg")


def test_a_bucket_is_listed_once_and_a_deleted_object_reads_as_a_missing_file(s3_store):
    for name, data in FILES.items():
        s3_store.put(f"in/{name}", data)
    folder = Folder(remote(s3_store.url("in"), "--input-dir"))
    assert folder.files() == ["a.jpg", "b.txt"]
    s3_store.put("in/new.jpg", b"N")
    folder.store.delete("a.jpg")
    assert folder.files() == ["a.jpg", "b.txt"]  # the one listing
    with pytest.raises(FileNotFoundError):
        folder.read(folder.where("a.jpg"))


def test_a_local_folder_refuses_a_symlink_out_of_it_and_a_fifo(tmp_path):
    (tmp_path / "secret").write_bytes(b"S")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "link").symlink_to(tmp_path / "secret")
    os.mkfifo(tmp_path / "in" / "fifo")
    folder = Folder(LocalStore(tmp_path / "in"))
    assert folder.is_file("link") and not folder.inside("link")
    for read in (lambda: folder.read(folder.where("fifo")), lambda: folder.open("fifo")):
        with pytest.raises(OSError, match="not a regular file"):
            read()
