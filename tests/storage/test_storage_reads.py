"""`Remote.open_stream` and `Remote.read`, the reads sources use: a stream gives the object's
bytes through a small buffer (seeks work), and a missing object fails as a missing local file
does (FileNotFoundError, "No such object"), so a run skips it or names it. A local folder and a
bucket answer the `storage.Store` interface alike."""

from __future__ import annotations

import os

import pytest
from shardcook.storage import remote


def test_a_stream_reads_the_object_through_its_buffer(s3_store):
    data = os.urandom(300_000)
    s3_store.put("d/blob", data)
    folder = remote(s3_store.url("d"), "--input-dir")
    with folder.open_stream("blob", buffer_size=65536) as f:
        assert f.read(10) == data[:10]
        f.seek(200_000)
        assert f.read(70_000) == data[200_000:270_000]
        f.seek(5)
        assert f.read() == data[5:]
    assert folder.read("blob") == data


def test_a_missing_object_reads_as_a_missing_file(s3_store):
    folder = remote(s3_store.url("d"), "--input-dir")
    for read in (folder.read, folder.open_stream):
        with pytest.raises(FileNotFoundError) as e:
            read("gone")
        assert e.value.strerror == "No such object"
        assert e.value.filename == s3_store.url("d/gone")


def test_a_local_folder_and_a_bucket_answer_the_store_interface_alike(s3_store, tmp_path):
    """`storage.Store`: the same calls on a local folder (`LocalStore`) and on a folder in the
    bucket (`Remote`) give the same answers."""
    from shardcook.storage.local import LocalStore

    stores = [LocalStore(tmp_path / "local"), remote(s3_store.url("folder"), "--test")]
    seen = []
    for store in stores:
        store.write_bytes("b/two.bin", b"0123456789")
        store.write_bytes("a.txt", "one")
        (tmp_path / "up").write_bytes(b"uploaded")
        store.upload(tmp_path / "up", "b/up.bin")
        store.probe_write(".shardcook")
        store.download("b/two.bin", tmp_path / "down")
        answers = [[(n.name, n.size) for n in store.listing()], list(store.names("b/")),
                   store.stat("b/two.bin").size, store.exists("a.txt"), store.exists("nope"),
                   store.read("a.txt"), store.read_range("b/two.bin", 3, 4),
                   store.open_stream("b/up.bin", 4).read(), (tmp_path / "down").read_bytes()]
        store.delete("a.txt")
        answers.append(list(store.names()))
        with pytest.raises(FileNotFoundError):
            store.read("a.txt")
        seen.append(answers)
    assert seen[0] == seen[1]
    assert seen[0][:3] == [[("a.txt", 3), ("b/two.bin", 10), ("b/up.bin", 8)],
                           ["b/two.bin", "b/up.bin"], 10]
