"""The stream reader of tars in object storage (`sources/tarstream.py`) reads what the Rust reader
reads from the same tar on disk: the same samples, keys, parts and bytes, with Energon's member
rules (long names, `__meta__` members, folders, names without a dot, repeated parts), from any
sample's offset on; and it refuses what the Rust reader refuses."""

from __future__ import annotations

import io
import tarfile

import pytest
from shardcook import count_samples, read_shard
from shardcook.errors import ShardcookError, ShardError
from shardcook.sources.tarstream import read_samples, sample_offsets

LONG = "d" * 120


def _member(tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE
            ) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _tar(path, members, fmt=tarfile.GNU_FORMAT):
    with tarfile.open(path, "w", format=fmt) as tar:
        for member in members:
            _member(tar, *member)
    return path


MEMBERS = [
    ("__meta__/info.json", b"{}"),  # Energon's metadata: skipped
    ("a.jpg", b"A" * 700),
    ("a.txt", b"caption a"),
    ("folder", b"", tarfile.DIRTYPE),  # not a regular file: skipped
    (f"{LONG}/b.jpg", b"B" * 1500),  # a long name (GNU header, or PAX)
    (f"{LONG}/b.txt", b"caption b"),
    ("nodot", b"x"),  # no part name: skipped
    ("c.txt", b"first"),
    ("c.txt", b"second"),  # a repeated part: the last one wins
    ("sub/.hidden", b"h"),  # a key ending with its folder's slash, as Energon's regex allows
    ("a.json", b'{"a": 1}'),  # key a again, not next to the first: a sample of its own
]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_the_stream_reader_reads_what_the_rust_reader_reads(tmp_path, fmt):
    path = _tar(tmp_path / "t.tar", MEMBERS, fmt)
    rust = [(key, dict(parts)) for key, parts in read_shard(path)]
    assert [k for k, _ in rust] == ["a", f"{LONG}/b", "c", "sub/", "a"]
    with open(path, "rb") as f:
        offsets = sample_offsets(f, str(path))
        assert len(offsets) == count_samples(path) == len(rust)
        for n, offset in enumerate(offsets):  # from any sample on
            assert list(read_samples(f, str(path), offset)) == rust[n:]


@pytest.mark.parametrize(("members", "words"), [
    ([("ok.txt", b"x"), ("../up.txt", b"y")], "'..'"),
    ([("/etc/x.txt", b"y")], "absolute"),
])
def test_a_member_escaping_its_folder_is_refused_by_both(tmp_path, members, words):
    path = _tar(tmp_path / "t.tar", members)
    with pytest.raises(ShardcookError, match="refusing it"):
        list(read_shard(path))
    with open(path, "rb") as f, pytest.raises(ShardError, match=words):
        sample_offsets(f, str(path))


def test_a_truncated_tar_is_refused_by_both(tmp_path):
    whole = _tar(tmp_path / "t.tar", MEMBERS).read_bytes()
    members_end = -(-len(whole.rstrip(b"\0")) // 512) * 512
    for cut in (members_end, 2000):  # without the end-of-archive blocks; inside a member's data
        path = tmp_path / f"cut{cut}.tar"
        path.write_bytes(whole[:cut])
        with pytest.raises(ShardcookError):
            count_samples(path)
            list(read_shard(path))
        with open(path, "rb") as f, pytest.raises(ShardError):
            list(read_samples(f, str(path), 0))
