"""`finalize --fix-duplicates`: keys repeated across shards made unique as `energon prepare
--fix-duplicates` (Energon 7.4.1's `tar_patcher`) does it, header bytes included: when a sample key
is in two shards, every member of every shard is renamed in place to `<shard path>/<name>`, by
rewriting its header's name (and ustar prefix) fields and checksum. No data moves, so a shard is
patched only when every new name fits its header; otherwise nothing is changed."""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shardcook.errors import DatasetError

_BLOCK = 512
#: Header fields: name, size, checksum, type flag, magic, ustar prefix.
_NAME, _SIZE, _SUM, _TYPE, _MAGIC, _PREFIX = (0, 100), (124, 136), (148, 156), 156, 257, (345, 500)
#: PAX keys that set a path: a member renamed in its header alone would keep its old name.
_PAX_PATH_KEYS = frozenset({b"path", b"linkpath", b"gnu.path", b"gnu.linkpath", b"SCHILY.path",
                            b"SCHILY.linkpath"})


@dataclass(frozen=True)
class _Scan:
    """One shard: its sample keys in file order, and why it cannot be renamed in place."""

    keys: list[bytes]
    problem: str | None


def _cstr(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def _size(header: bytes) -> int:
    """The member's data size, read as Energon's patcher reads it."""
    field = header[_SIZE[0]:_SIZE[1]]
    if field[0] & 0x80:  # base-256
        return 0 if field[0] & 0x40 else int.from_bytes(bytes([field[0] & 0x3F]) + field[1:], "big")
    n = 0
    for c in field:
        if c in (0, 32):
            continue
        if not 48 <= c <= 57:
            return 0
        n = n * 8 + c - 48
    return n


def _full_path(header: bytes) -> tuple[bytes, bool]:
    """The member's path (ustar prefix joined to its name) and whether the header is ustar."""
    name = _cstr(header[_NAME[0]:_NAME[1]])
    if header[_MAGIC:_MAGIC + 5] != b"ustar" or header[_MAGIC + 5] not in (0, 32):
        return name, False
    prefix = _cstr(header[_PREFIX[0]:_PREFIX[1]])
    if prefix and name:
        return prefix + b"/" + name, True
    return prefix or name, True


def _split_ustar(path: bytes) -> tuple[bytes, bytes] | None:
    """(prefix, name) fields for `path`, split at the last '/' that leaves a prefix of at most
    155 bytes; None when it does not fit."""
    if len(path) <= 100:
        return b"", path
    cut = max((i for i, c in enumerate(path[:156]) if c == 0x2F), default=-1)
    if cut == -1 or len(path) - cut - 1 > 100:
        return None
    return path[:cut], path[cut + 1:]


def _sample_key(path: bytes) -> bytes:
    """The key Energon's patcher groups a member by: the path up to the first dot after the last
    slash (empty when there is none)."""
    slash = path.rfind(b"/")
    dot = path.find(b".", (slash if slash >= 0 else 0) + 1)
    return path[:dot] if dot > 0 else b""


def _pax_sets_path(data: bytes) -> bool:
    i = 0
    while i < len(data):
        space = data.find(b" ", i)
        if space < 0:
            break
        length = int(data[i:space]) if data[i:space].isdigit() else _BLOCK
        record = data[i:i + length]
        if i + length > len(data) or not record.endswith(b"\n"):
            break
        key = record[space - i + 1:].split(b"=", 1)[0]
        if b"=" in record[space - i + 1:] and key in _PAX_PATH_KEYS:
            return True
        i += length
    return False


def _headers(data: mmap.mmap | bytes, name: str) -> list[tuple[int, int]]:
    """(offset, data size) of every header up to the end-of-archive block."""
    found: list[tuple[int, int]] = []
    position = 0
    while True:
        if position + _BLOCK > len(data):
            raise DatasetError(f"shard {name} ends before its end-of-archive block; "
                               "--fix-duplicates renames only whole tar files")
        header = data[position:position + _BLOCK]
        if not any(header):
            return found
        size = _size(header)
        found.append((position, size))
        position += _BLOCK + -(-size // _BLOCK) * _BLOCK


def _scan(path: Path, name: str, prefix: bytes) -> _Scan:
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        keys: list[bytes] = []
        problem = None
        for position, size in _headers(data, name):
            header = data[position:position + _BLOCK]
            kind = header[_TYPE:_TYPE + 1]
            if kind in (b"L", b"K"):
                return _Scan(keys, f"shard {name} has GNU long-name members")
            if kind in (b"x", b"g"):
                if _pax_sets_path(data[position + _BLOCK:position + _BLOCK + size]):
                    problem = problem or f"shard {name} names members in PAX headers"
                continue
            full, ustar = _full_path(header)
            key = _sample_key(full)
            if key and (not keys or keys[-1] != key):
                keys.append(key)
            fits = _split_ustar(prefix + full) is not None if ustar else len(prefix + full) <= 100
            if not fits:
                problem = problem or (f"shard {name}'s member {full.decode(errors='replace')!r} "
                                      "would get a name longer than its header holds")
        if problem is None and len(set(keys)) != len(keys):
            problem = f"shard {name} holds a key twice (its members are not contiguous)"
        return _Scan(keys, problem)


def _checksum(header: bytearray) -> None:
    total = sum(header[:_SUM[0]]) + 8 * 32 + sum(header[_SUM[1]:])
    header[_SUM[0]:_SUM[1]] = b"%06o\0 " % total


def _rename(path: Path, name: str, prefix: bytes) -> None:
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as data:
        for position, _ in _headers(data, name):
            header = bytearray(data[position:position + _BLOCK])
            if bytes(header[_TYPE:_TYPE + 1]) in (b"x", b"g"):
                continue
            full, ustar = _full_path(bytes(header))
            fields = _split_ustar(prefix + full) if ustar else (b"", prefix + full)
            assert fields is not None  # the scan checked every name fits
            header[_NAME[0]:_NAME[1]] = fields[1].ljust(100, b"\0")
            if ustar:
                header[_PREFIX[0]:_PREFIX[1]] = fields[0].ljust(155, b"\0")
            _checksum(header)
            data[position:position + _BLOCK] = bytes(header)
        data.flush()


def fix_duplicates(root: Path, shards: Sequence[str]) -> bool:
    """Renames every member of `shards` (paths under `root`) to `<shard>/<name>` when a sample key
    is in more than one of them; True when it did. Keys repeated only inside one shard are left
    for the index to refuse, as Energon leaves them.

    Raises:
        DatasetError: keys repeat across shards but a shard cannot be renamed in place (nothing
            was changed).
    """
    owners: dict[bytes, str] = {}
    repeated: tuple[bytes, str, str] | None = None
    problems = []
    for name in shards:
        scan = _scan(root / name, name, f"{name}/".encode())
        if scan.problem:
            problems.append(scan.problem)
        for key in set(scan.keys):
            first = owners.setdefault(key, name)
            if first != name and repeated is None:
                repeated = (key, first, name)
    if repeated is None:
        return False
    if problems:
        key, first, second = repeated
        raise DatasetError(
            f"key {key.decode(errors='replace')!r} is in both {first} and {second}, but "
            f"--fix-duplicates cannot rename the members in place: {problems[0]}; nothing was "
            "changed")
    for name in shards:
        _rename(root / name, name, f"{name}/".encode())
    return True
