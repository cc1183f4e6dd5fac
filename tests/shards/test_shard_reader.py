"""read_shard and count_samples on tars we did not write: Energon's grouping and skip rules, and
a clear error (file and byte offset) for every kind of damage."""

from __future__ import annotations

import re
import tarfile

import pytest
from shardcook import ShardError, ShardWriter, count_samples, read_shard

from tests.helpers.shards import tarfile_shard


def test_grouping_and_skipping_match_energon(tmp_path):
    shard = tmp_path / "s.tar"
    tarfile_shard(
        shard,
        [
            ("__meta__", b"m"),  # skipped: metadata
            ("__meta__/x.json", b"m"),  # skipped: inside a metadata folder
            ("dir", None),  # skipped: not a regular file
            ("__info__.json", b"{}"),  # a sample with key __info__, as in Energon
            ("a.jpg", b"1"),
            ("a.txt", b"2"),
            ("noext", b"3"),  # skipped: no part name
            ("b.latents.pth", b"4"),
            ("sub/c.txt", b"5"),  # key with its folder
        ],
    )
    assert list(read_shard(shard)) == [
        ("__info__", {"json": b"{}"}),
        ("a", {"jpg": b"1", "txt": b"2"}),
        ("b", {"latents.pth": b"4"}),
        ("sub/c", {"txt": b"5"}),
    ]
    assert count_samples(shard) == 4


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_long_names_in_every_tar_format(tmp_path, fmt):
    shard = tmp_path / "s.tar"
    # USTAR stores up to 255 bytes through its prefix field; GNU and PAX have extension headers.
    long_dir = "d" * 90 + "/" + "e" * 60
    tarfile_shard(shard, [(f"{long_dir}/k.txt", b"x"), (f"{long_dir}/k.json", b"{}")], fmt)
    assert list(read_shard(shard)) == [(f"{long_dir}/k", {"txt": b"x", "json": b"{}"})]


@pytest.mark.parametrize("name", ["/abs/k.txt", "../k.txt", "a/../../k.txt"])
def test_names_that_escape_the_folder_are_refused(tmp_path, name):
    shard = tmp_path / "s.tar"
    tarfile_shard(shard, [("ok.txt", b"1"), (name, b"2")])
    with pytest.raises(ShardError, match=re.escape("absolute or contains '..'")):
        list(read_shard(shard))


def good_shard(tmp_path):
    with ShardWriter(tmp_path) as w:
        for i in range(3):
            w.write(f"k{i}", {"txt": b"x" * 600})
    return tmp_path / "000000.tar"


def damaged(tmp_path, how):
    path = good_shard(tmp_path)
    data = bytearray(path.read_bytes())
    if how == "empty":
        data = bytearray()
    elif how == "not a tar":
        data = bytearray(b"GIF89a" + b"\x01" * 1000)
    elif how == "truncated in data":
        data = data[: 2048 + 100]  # inside the second member's data
    elif how == "truncated at a header":
        data = data[: 1536 + 100]
    elif how == "no end block":
        data = data[: 3 * 1536]
    elif how == "bad checksum":
        data[1536 + 5] ^= 0xFF  # the second member's name, inside its header
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "how, message, offset",
    [
        ("empty", "empty file", 0),
        ("not a tar", "not a tar file", 0),
        ("truncated in data", "runs past the end", 1536),
        ("truncated at a header", "truncated tar header", 1536),
        ("no end block", "without the tar end-of-archive block", 4608),
        ("bad checksum", "bad tar header checksum", 1536),
    ],
)
def test_damage_is_an_error_naming_file_and_offset(tmp_path, how, message, offset):
    path = damaged(tmp_path, how)
    for reader in (lambda p: list(read_shard(p)), count_samples):
        with pytest.raises(ShardError) as e:
            reader(path)
        assert message in str(e.value)
        assert str(path) in str(e.value) and f"at byte {offset}" in str(e.value)


def test_gzip_shards_get_a_clear_error(tmp_path):
    import gzip

    path = good_shard(tmp_path)
    gz = tmp_path / "shard.tgz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(ShardError, match="gzip-compressed tar shards are not supported"):
        count_samples(gz)


def test_missing_file_is_an_io_error(tmp_path):
    with pytest.raises(OSError, match=re.escape("nope.tar")):
        count_samples(tmp_path / "nope.tar")
