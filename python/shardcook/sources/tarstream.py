"""WebDataset samples read from a tar stream (a tar in object storage) with the rules the Rust
reader (rust/tar/) applies to a local file: regular members only, `__…__` metadata skipped, a
member name split into key and part by Energon's `split_name_re`, consecutive members of one key
grouped into a sample, a name that is absolute or holds `..` refused, and a tar without its
end-of-archive block refused as truncated.

The Rust reader needs a local file (it asks for the file's length and seeks in it), so a tar in a
bucket is parsed here with Python's `tarfile`, the parser Energon itself reads tars with, over a
sequential ranged reader: no tar is ever downloaded whole. `sample_offsets` walks the headers once
(the data is skipped); `read_samples` then starts at any sample's offset, so a work unit reads
only its own samples. tests/storage/test_tar_stream.py checks that both readers agree.
"""

from __future__ import annotations

import re
import tarfile
from array import array
from collections.abc import Iterator
from typing import BinaryIO

from shardcook.errors import ShardError

__all__ = ["TarSample", "read_samples", "sample_offsets"]

#: Energon's rules (megatron-energon 7.4.1, flavors/webdataset/config.py), as rust/tar/names.rs.
SPLIT_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
SKIP_META = re.compile(r"__[^/]*__($|/)")
BLOCK = 512

#: (key, {part: bytes}) in member order; a part that appears twice keeps its last bytes.
TarSample = tuple[str, dict[str, bytes]]


def _escapes(name: str) -> bool:
    return name.startswith("/") or ".." in name.split("/")


class _Window:
    """The bytes of `f` from `base` on, as a file of their own (tarfile reads from 0)."""

    def __init__(self, f: BinaryIO, base: int):
        self.f, self.base = f, base
        f.seek(base)

    def read(self, size: int = -1) -> bytes:
        return self.f.read(size)

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == 0:
            return self.f.seek(self.base + pos) - self.base
        return self.f.seek(pos, whence) - self.base

    def tell(self) -> int:
        return self.f.tell() - self.base


def _members(f: BinaryIO, where: str, base: int
             ) -> Iterator[tuple[str, str, tarfile.TarInfo, tarfile.TarFile]]:
    """(key, part, member, tar) of each member from byte `base` on that belongs to a sample."""
    window = _Window(f, base)
    try:
        with tarfile.open(fileobj=window, mode="r:") as tar:  # type: ignore[call-overload]
            while True:
                info = tar.next()
                if info is None:
                    break
                tar.members.clear()  # keep no headers: a tar may hold millions of members
                named = _sample_member(info, where, base)
                if named is not None:
                    yield named[0], named[1], info, tar
            end = tar.offset
    except tarfile.TarError as e:
        raise ShardError(f"{where} is not a tar shard that can be read ({e})") from None
    window.seek(end)
    if window.read(BLOCK) != bytes(BLOCK):
        raise ShardError(f"{where} at byte {base + end}: the tar ends without its "
                         "end-of-archive block (truncated?)")


def _sample_member(info: tarfile.TarInfo, where: str, base: int) -> tuple[str, str] | None:
    """(key, part) of a member that belongs to a sample, None for one Energon skips."""
    if not info.isreg():
        return None
    if info.issparse():
        raise ShardError(f"{where} at byte {base + info.offset}: GNU sparse members are not "
                         "supported")
    if _escapes(info.name):
        raise ShardError(f"{where} at byte {base + info.offset}: member name {info.name!r} is "
                         "absolute or contains '..'; refusing it")
    if SKIP_META.match(info.name):
        return None
    split = SPLIT_NAME.match(info.name)
    return None if split is None else (split[1], split[2])


def sample_offsets(f: BinaryIO, where: str) -> array[int]:
    """The byte offset of each sample's first header, reading headers only.

    Raises:
        ShardError: the stream is not a whole tar, or a member name escapes its folder.
    """
    offsets: array[int] = array("q")
    key = None
    for k, _, info, _ in _members(f, where, 0):
        if k != key:
            offsets.append(info.offset)
            key = k
    return offsets


def read_samples(f: BinaryIO, where: str, offset: int) -> Iterator[TarSample]:
    """The samples from the one starting at byte `offset` (from `sample_offsets`) on.

    Raises:
        ShardError: as `sample_offsets`, or a member's data is cut short.
    """
    key: str | None = None
    parts: dict[str, bytes] = {}
    for k, part, info, tar in _members(f, where, offset):
        if k != key and key is not None:
            yield key, parts
            parts = {}
        key = k
        member = tar.extractfile(info)
        assert member is not None  # a regular member
        try:
            parts[part] = member.read()
        except tarfile.TarError as e:
            raise ShardError(f"{where} at byte {offset + info.offset}: {e}") from None
    if key is not None:
        yield key, parts
