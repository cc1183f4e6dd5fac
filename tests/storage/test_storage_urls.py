"""`shardcook.storage` against a real S3 server through the Multi-Storage Client."""

from __future__ import annotations

import pytest
from shardcook.errors import ConfigError
from shardcook.storage import check_url, is_url, remote


@pytest.mark.parametrize("value", ["msc://p/x", "s3://b/x", "s3:/b/x", "gs://b", "https://h/x",
                                   "ftp://h"])
def test_urls_are_urls(value):
    assert is_url(value)


@pytest.mark.parametrize("value", ["x", "a/b", "a:b", "./msc", "/abs/path"])
def test_paths_are_not_urls(value):
    assert not is_url(value)


def test_objects_written_read_listed_and_deleted(s3_store):
    folder = remote(s3_store.url("data/set"), "--output-dir")
    folder.write_bytes("a.txt", b"alpha")
    folder.write_bytes("sub/b.txt", "beta")
    assert folder.read("a.txt") == b"alpha"
    assert list(folder.names()) == ["a.txt", "sub/b.txt"]
    assert list(folder.names("sub/")) == ["sub/b.txt"]
    assert [(o.name, o.size) for o in folder.listing("sub/")] == [("sub/b.txt", 4)]
    assert s3_store.keys() == ["data/set/a.txt", "data/set/sub/b.txt"]
    folder.delete("a.txt")
    assert not folder.exists("a.txt") and folder.exists("sub/b.txt")


def test_each_store_is_its_own_bucket(s3_store, s3_server, tmp_path,
                                                               monkeypatch):
    from tests.helpers.s3server import make_store

    remote(s3_store.url("x"), "t").write_bytes("one", b"1")
    other = make_store(s3_server, tmp_path / "o", "second-bucket-of-this-test", "secondprofile")
    for key, value in other.env.items():
        monkeypatch.setenv(key, value)
    remote(other.url("x"), "t").write_bytes("two", b"2")
    assert other.keys() == ["x/two"] and s3_store.keys() == ["x/one"]


@pytest.mark.parametrize(("url", "words"), [
    ("ftp://host/x", "ftp://"),
    ("https://host/x", "https://"),
    ("msc:/teststore/x", "not a whole URL"),
    ("msc:///x", "names no profile"),
    ("msc://nosuchprofile/x", "profile 'nosuchprofile'"),
])
def test_a_url_that_cannot_work_is_one_sentence(s3_store, url, words):
    with pytest.raises(ConfigError, match=words) as e:
        check_url(url, "--output-dir")
    assert "\n" not in str(e.value)
    assert "DO-NOT-PRINT" not in str(e.value)


def test_a_location_is_parsed_once_into_a_path_or_a_folder_in_a_bucket(s3_store, tmp_path):
    """`locate`: a local path keeps its text and has a local store; a URL's folder has its client
    resolved and knows its folders above; a Location passes through as it is, except a URL
    where only local paths are read."""
    from shardcook.storage.location import locate

    local = locate(tmp_path / "out", "--output-dir")
    assert local.is_local and local.path == tmp_path / "out"
    assert local.store.child("a") == str(tmp_path / "out" / "a")
    assert local.split() == (locate(str(tmp_path), "x"), "out")
    url = s3_store.url("data/set") + "/"
    there = locate(url, "--output-dir")
    assert not there.is_local and str(there) == url and str(there.store) == url[:-1]
    assert there.given == url
    parent, name = there.split()
    assert (str(parent), name) == (s3_store.url("data"), "set")
    assert [f.url for f in there.store.above()] == [s3_store.url("data"), s3_store.url()]
    assert there.store.where("a/../b/./c") == s3_store.url("data/set/b/c")
    assert locate(there, "y") is there
    with pytest.raises(ConfigError, match=r"--out .* is a URL \(msc://\); --out takes local"):
        locate(there, "--out", urls=False)
    with pytest.raises(ConfigError, match="read through an MSC profile"):
        locate(s3_store.s3_url("d.parquet"), "--hf-data-files",
               msc_only="Hugging Face data files in object storage are read through an MSC "
                        "profile")
