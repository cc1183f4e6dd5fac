"""Shards for the tests of where a tar ends (tests/dataset/test_tar_end.py, and in a bucket
tests/storage/test_remote_tar_end.py): a header zeroed amid the members, the end-of-archive
padding real writers leave, a `.tar.idx` one sample short."""

from __future__ import annotations

import io
import json
import struct
import tarfile
from pathlib import Path

import webdataset
from shardcook import ShardWriter


def parts(i: int) -> dict[str, bytes]:
    return {"txt": f"caption {i}".encode(), "json": json.dumps({"i": i}).encode()}


def shards(d: Path, n_shards: int = 2, per_shard: int = 3) -> Path:
    """`n_shards` shards of `per_shard` samples of two members each, by our writer."""
    with ShardWriter(d, shard_size=per_shard) as w:
        for i in range(n_shards * per_shard):
            w.write(f"{i:010d}", parts(i))
    return d


def zero_second_header(shard: Path) -> tuple[int, str]:
    """Zeroes the header of the shard's second sample; returns its offset and the words that
    name it in errors."""
    with tarfile.open(shard) as tar:
        at = tar.getmembers()[2].offset  # two members a sample
    data = bytearray(shard.read_bytes())
    data[at:at + 512] = bytes(512)
    shard.write_bytes(bytes(data))
    return at, (f"{shard.name}: zeroed or damaged tar header (a zero block, but data follows "
                f"from byte {at + 512} on) at byte {at}")


def end_padded_tars(d: Path) -> dict[str, int]:
    """Six samples each as Python's tarfile (its end blocks, padded to a 10240-byte record),
    webdataset's TarWriter and our ShardWriter write them, in folder `d`; returns each tar's
    name -> the zero bytes at its end."""
    d.mkdir(parents=True)
    with tarfile.open(d / "tarfile.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(6):
            for ext, data in parts(i).items():
                info = tarfile.TarInfo(f"t{i:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with webdataset.TarWriter(str(d / "webdataset.tar")) as sink:
        for i in range(6):
            sink.write({"__key__": f"w{i:04d}", **parts(i)})
    with ShardWriter(d, shard_size=6, prefix="shardcook-") as w:
        for i in range(6):
            w.write(f"s{i:04d}", parts(i))
    zeros = {}
    for name in ("tarfile.tar", "webdataset.tar", "shardcook-000000.tar"):
        data = (d / name).read_bytes()
        zeros[name] = len(data) - len(data.rstrip(b"\0"))
    return zeros


def offsets(idx: bytes) -> list[int]:
    return [n for (n,) in struct.iter_unpack("=Q", idx)]


def without_last_entry(idx: bytes) -> bytes:
    """A well-formed `.tar.idx` one sample short: the last sample's entry gone, the end kept."""
    entries = offsets(idx)
    return struct.pack(f"={len(entries) - 1}Q", *entries[:-2], entries[-1])
