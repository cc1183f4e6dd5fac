"""ShardWriter, read_shard and count_samples: round trips through tarfile and webdataset,
determinism, and the names docs/FORMAT.md forbids."""

from __future__ import annotations

import hashlib
import tarfile

import pytest
import webdataset as wds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shardcook import InvalidNameError, ShardWriter, count_samples, read_shard

keys = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9_-]{0,20}", fullmatch=True).filter(
    lambda k: not k.startswith("__")
)
part_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}(\.[a-z0-9]{1,5}){0,2}", fullmatch=True)
samples = st.lists(
    st.tuples(keys, st.dictionaries(part_names, st.binary(max_size=1500), min_size=1, max_size=4)),
    min_size=1,
    max_size=12,
    unique_by=lambda s: s[0],
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=samples, shard_size=st.integers(1, 5))
def test_round_trip_through_tarfile_webdataset_and_read_shard(tmp_path_factory, data, shard_size):
    out = tmp_path_factory.mktemp("rt")
    with ShardWriter(out, shard_size=shard_size) as w:
        for key, parts in data:
            w.write(key, parts)
    shards = w.close()
    assert [n for n, _ in shards] == [f"{i:06d}.tar" for i in range(len(shards))]
    assert sum(c for _, c in shards) == len(data)

    ours = [s for name, _ in shards for s in read_shard(out / name)]
    assert ours == [(k, dict(p)) for k, p in data]
    assert sum(count_samples(out / name) for name, _ in shards) == len(data)

    members = []
    for name, _ in shards:
        with tarfile.open(out / name) as tar:
            for m in tar:
                assert m.isreg() and m.mode == 0o644 and m.uid == m.gid == 0 and m.mtime == 0
                assert m.uname == m.gname == ""
                members.append((m.name, tar.extractfile(m).read()))
    assert members == [(f"{k}.{p}", v) for k, parts in data for p, v in parts.items()]

    urls = [str(out / name) for name, _ in shards]
    seen = [
        (s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")})
        for s in wds.WebDataset(urls, shardshuffle=False)
    ]
    assert seen == [(k, dict(p)) for k, p in data]


def test_bytes_are_deterministic(tmp_path):
    def write(d):
        with ShardWriter(d, shard_size=3) as w:
            for i in range(7):
                w.write(f"{i:010d}", {"txt": b"x" * i, "meta.json": b"{}"})
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.glob("*.tar")}

    assert write(tmp_path / "a") == write(tmp_path / "b")


def test_long_names_get_a_pax_header_that_readers_understand(tmp_path):
    part = "p" * 120 + ".bin"
    with ShardWriter(tmp_path) as w:
        w.write("k1", {part: b"data", "txt": b"t"})
    with tarfile.open(tmp_path / "000000.tar") as tar:
        assert tar.getnames() == [f"k1.{part}", "k1.txt"]
    assert list(read_shard(tmp_path / "000000.tar")) == [("k1", {part: b"data", "txt": b"t"})]


def test_accepts_bytes_like_values_in_order(tmp_path):
    with ShardWriter(tmp_path) as w:
        w.write("a", [("z", bytearray(b"1")), ("b", memoryview(b"22"))])
    with tarfile.open(tmp_path / "000000.tar") as tar:
        assert tar.getnames() == ["a.z", "a.b"]


@pytest.mark.parametrize(
    "key, parts, message",
    [
        ("a.b", {"txt": b""}, "no '.' or '/'"),
        ("a/b", {"txt": b""}, "no '.' or '/'"),
        ("", {"txt": b""}, "empty"),
        ("__meta", {"txt": b""}, "'__'"),
        ("k", {"a/b": b""}, "no '/'"),
        ("k", {}, "no parts"),
    ],
)
def test_bad_names_are_refused_with_the_reason(tmp_path, key, parts, message):
    with ShardWriter(tmp_path) as w, pytest.raises(InvalidNameError, match=message):
        w.write(key, parts)


def test_duplicate_key_in_one_writer_is_refused(tmp_path):
    with ShardWriter(tmp_path) as w:
        w.write("k", {"txt": b"1"})
        with pytest.raises(InvalidNameError, match="already written"):
            w.write("k", {"txt": b"2"})


def test_non_bytes_part_is_a_type_error(tmp_path):
    with ShardWriter(tmp_path) as w, pytest.raises(TypeError, match="not bytes"):
        w.write("k", {"txt": "a str"})


def test_an_exception_inside_with_leaves_no_partial_shard(tmp_path):
    with pytest.raises(RuntimeError), ShardWriter(tmp_path, shard_size=2) as w:
        for i in range(3):
            w.write(f"k{i}", {"txt": b"x"})
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.glob("*.tar")) == ["000000.tar"]
    assert not list((tmp_path / ".shardcook" / "tmp").iterdir())


def test_first_shard_and_prefix_name_the_shards(tmp_path):
    with ShardWriter(tmp_path, shard_size=1, prefix="train-shard-", first_shard=7) as w:
        w.write("a", {"txt": b"1"})
        w.write("b", {"txt": b"2"})
    assert w.close() == [("train-shard-000007.tar", 1), ("train-shard-000008.tar", 1)]


def test_refuses_to_overwrite_an_existing_shard(tmp_path):
    (tmp_path / "000000.tar").write_bytes(b"")
    with ShardWriter(tmp_path) as w, pytest.raises(Exception, match="already exists"):
        w.write("a", {"txt": b"1"})
