"""A new backend is one `Store` class: `storage.memory.MemoryStore`, objects in this process's
memory, is read by the input folder as a local folder is, with no caller asking which store it
has."""

from __future__ import annotations

import pytest
from shardcook.sources.folder import open_folder
from shardcook.storage.location import Location
from shardcook.storage.memory import MemoryStore

FILES = {"a.jpg": b"A", "b.txt": b"B", ".hidden": b"H", "images/c.jpg": b"C",
         "images/deep/d.jpg": b"D"}


def _answers(folder) -> list[object]:
    where = folder.where("images/../a.jpg")
    with folder.open("images/c.jpg") as f:
        streamed = f.read()
    return [folder.exists(), folder.is_file_itself(), folder.files(), folder.files("images"),
            folder.is_dir("images"), folder.is_dir("nope"), folder.is_file("images/../b.txt"),
            folder.is_file("images"), folder.inside("images/../a.jpg"), folder.inside("../x"),
            folder.inside("/etc/passwd"), where.removeprefix(folder.root),
            folder.read(where), streamed, folder.locate("images/c.jpg").removeprefix(folder.root),
            folder.unsafe()]


def test_a_memory_store_is_an_input_folder_as_a_local_folder_is(tmp_path):
    local = tmp_path / "in"
    memory = MemoryStore("memory://bench")
    for name, data in FILES.items():
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(data)
        memory.write_bytes(f"in/{name}", data)
    there = Location("memory://bench/in", memory.folder("in"))
    assert not there.is_local
    folders = [open_folder(local, "--input-dir"), open_folder(there, "--input-dir")]
    assert _answers(folders[0]) == _answers(folders[1]) == [
        True, False, ["a.jpg", "b.txt"], ["c.jpg"], True, False, True, False, True, False, False,
        "/a.jpg", b"A", b"C", "/images/c.jpg", []]


def test_a_memory_store_puts_whole_creates_once_and_fails_as_a_file_does():
    store = MemoryStore()
    assert store.create("x/a", b"1") and not store.create("x/a", b"2")
    assert store.read("x/a") == b"1" and list(store.names("x/")) == ["x/a"]
    store.probe_write("x")
    assert list(store.names()) == ["x/a"]
    store.delete("x/a")
    with pytest.raises(FileNotFoundError):
        store.read("x/a")
    with pytest.raises(FileNotFoundError):
        store.delete("x/a")
