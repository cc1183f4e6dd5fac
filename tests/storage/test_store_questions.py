"""What every `storage.Store` answers alike, a local folder (`LocalStore`), a folder in a bucket
(`Remote`, on the test S3 server) and memory (`MemoryStore`): what a name is (`what_is`), the
sentence for a failed call (`failure`), and the store's own retry policy (`retrying`): a local
disk's error is final, a bucket's call is tried again."""

from __future__ import annotations

import errno

import pytest
from shardcook.errors import ShardcookIOError
from shardcook.storage import bucket as buckets
from shardcook.storage import remote
from shardcook.storage.local import LocalStore
from shardcook.storage.memory import MemoryStore

from tests.helpers.s3server import add_profile
from tests.helpers.storeproxy import StoreProxy

FILES = {"a.txt": b"A", "d/b.txt": b"B", "d/e/c.txt": b"C"}


def _stores(s3_store, tmp_path):
    """(name, the folder `top` holding FILES, a store at any path under the same root)."""
    memory = MemoryStore("memory://m")
    made = [("local", lambda path: LocalStore(tmp_path / path)),
            ("bucket", lambda path: remote(s3_store.url(path), "t")),
            ("memory", lambda path: memory.folder(path))]
    for _, at in made:
        for name, data in FILES.items():
            at("top").write_bytes(name, data)
    return made


def test_what_a_name_is_is_answered_alike(s3_store, tmp_path):
    answers = {}
    for kind, at in _stores(s3_store, tmp_path):
        top = at("top")
        answers[kind] = [top.what_is(), top.what_is("a.txt"), top.what_is("d"),
                         top.what_is("d/e"), top.what_is("d/../a.txt"), top.what_is("nope"),
                         top.what_is("d/nope"), at("top/a.txt").what_is(),
                         at("top/d").what_is(), at("missing").what_is(),
                         at("top/a").what_is()]  # a name that only starts one ("a.txt")
    assert answers["local"] == answers["bucket"] == answers["memory"] == [
        "folder", "file", "folder", "folder", "file", None, None, "file", "folder", None, None]


def test_whether_a_file_exists_is_answered_alike_and_in_one_request(s3_store, s3_server,
                                                                      tmp_path):
    answers = {}
    for kind, at in _stores(s3_store, tmp_path):
        top = at("top")
        answers[kind] = [top.exists(n) for n in ("a.txt", "d/e/c.txt", "d", "d/", "nope", "d/x")]
    assert answers["local"] == answers["bucket"] == answers["memory"] == [
        True, True, False, False, False, False]

    # a command asks first of all whether the folder holds an AutoModel cache's metadata.json:
    # mostly it does not, and each round trip to a store far away is paid before any work
    proxy = StoreProxy(s3_server.port)
    try:
        url = add_profile(s3_store, "counted", endpoint_url=proxy.endpoint)
        top = remote(f"{url}/top", "t")
        top.exists("a.txt")  # the client's first request
        proxy.reset()
        assert not top.exists("metadata.json")
        assert top.exists("a.txt")
        assert proxy.stats()["by_method"] == {"HEAD": 2}
    finally:
        proxy.stop()


def test_a_failed_write_is_one_sentence_naming_the_file(s3_store, tmp_path):
    local = LocalStore(tmp_path / "top")
    local.write_bytes("a.txt", b"A")
    with pytest.raises(OSError) as e:
        local.write_bytes("a.txt/inside", b"x")  # a file where its folder would be
    assert local.failure("The page", "a.txt/inside", "write", e.value) == (
        f"cannot write {tmp_path}/top/a.txt/inside (File exists).")
    error = OSError(errno.EIO, "the link dropped")
    assert remote(s3_store.url("top"), "t").failure("The page", "x/y", "read", error) == (
        f"cannot read {s3_store.url('top/x/y')} ([Errno 5] the link dropped).")
    assert MemoryStore("memory://m").failure("The page", "x", "write", error) == (
        "cannot write memory://m/x ([Errno 5] the link dropped).")


def test_a_local_error_is_final_and_a_buckets_call_is_tried_again(s3_store, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setattr(buckets, "FIRST_BACKOFF_SECONDS", 0.01)
    bucket = remote(s3_store.url("top"), "t")
    calls: list[str] = []

    def read_after_two_failures(store):
        def read() -> bytes:
            calls.append(str(store))
            if len(calls) % buckets.TRIES:
                raise OSError(errno.EIO, "the link dropped")
            return store.read("a.txt")
        return read

    bucket.write_bytes("a.txt", b"A")
    assert bucket.retrying("reading a.txt", read_after_two_failures(bucket)) == b"A"
    assert len(calls) == buckets.TRIES
    for once in (LocalStore(tmp_path), MemoryStore()):
        calls.clear()
        with pytest.raises(OSError) as e:
            once.retrying("reading a.txt", read_after_two_failures(once))
        assert not isinstance(e.value, ShardcookIOError) and len(calls) == 1
    with pytest.raises(ShardcookIOError) as failed:
        bucket.retrying(f"reading nope in {bucket}", lambda: bucket.read("nope"))
    assert str(failed.value).startswith(
        f"reading nope in {bucket} failed {buckets.TRIES} times (")
