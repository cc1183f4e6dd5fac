"""`Remote.open_stream` and `Remote.read`, the reads sources use: a stream gives the object's
bytes through a small buffer (seeks work), and a missing object fails as a missing local file
does (FileNotFoundError, "No such object"), so a run skips it or names it."""

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
