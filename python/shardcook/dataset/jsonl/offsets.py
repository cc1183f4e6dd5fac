"""The index of a JSONL dataset, `NAME.jsonl.idx`, byte for byte as `energon prepare NAME.jsonl`
writes it: each record's start offset, then the file's size, as little-endian uint64.

Energon's rules, from its line-by-line scan: a line is what ends at `\\n` (or at the end of the
file); a line of ASCII whitespace alone is blank; any other line must start with `{` and end
with `}` once that whitespace is stripped. Record 0 starts at 0 (leading blank lines are its),
every other record where its line starts, so a blank line belongs to the record before it.

The scan here finds the same offsets a chunk at a time with numpy: the newlines at once, and the
lines that plainly hold an object (`{` first, `}` or `}\\r` last) at once; only the others
(blank, indented, not an object) are looked at one by one.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from shardcook.errors import DatasetError

__all__ = ["INDEX_DTYPE", "record_offsets"]

#: One entry of the index.
INDEX_DTYPE = np.dtype("<u8")
#: Bytes read at a time: the scan's memory is a few times this (more is slower: the
#: arrays of a larger chunk fall out of the CPU's caches).
CHUNK_BYTES = 1 << 20
_OPEN, _CLOSE, _CR, _LF = (ord(c) for c in "{}\r\n")


def record_offsets(stream: BinaryIO, name: str, chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """The index of the JSONL text `stream` reads (to its end): the records' start offsets and
    then its size, `INDEX_DTYPE`.

    Raises:
        DatasetError: a line is not a JSON object, or there is no record at all (Energon's
            own scan fails there too); `name` is how the sentence names the file.
    """
    found: list[np.ndarray] = []
    base = lines = 0  # the file offset of `held`'s first byte, and the lines before it
    held: list[bytes] = []  # read, not yet scanned: no newline in it, or after the last one
    while chunk := stream.read(chunk_bytes):
        held.append(chunk)
        if b"\n" not in chunk:  # a long line: join its pieces once, when it ends
            continue
        data = b"".join(held)
        buf = np.frombuffer(data, np.uint8)
        ends = np.flatnonzero(buf == _LF)
        found.append(_line_records(data, buf, ends, base, lines, name))
        cut = int(ends[-1]) + 1
        held, base, lines = [data[cut:]], base + cut, lines + len(ends)
    pending = b"".join(held)
    if pending:  # a last line without a newline
        last = np.array([len(pending)], np.int64)
        found.append(_line_records(pending, np.frombuffer(pending, np.uint8), last, base, lines,
                                   name))
    starts = np.concatenate(found) if found else np.empty(0, np.int64)
    if not len(starts):
        raise DatasetError(f"{name} holds no JSON record; a JSONL dataset has one JSON object "
                           "per line.")
    starts[0] = 0
    return np.append(starts, base + len(pending)).astype(INDEX_DTYPE)


def _line_records(data: bytes, buf: np.ndarray, ends: np.ndarray, base: int, lines: int,
                  name: str) -> np.ndarray:
    """The file offsets of the lines ending at `ends` (each a newline's offset in `data`, or
    the end of `data`) that hold a record; `data` starts at offset `base`, after `lines`
    lines."""
    starts = np.empty(len(ends), np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    # an empty line reads its own newline as `first`, so it never passes; an index clipped at
    # 0 is one of a line too short for the test that reads it, which `first` fails the same way
    first = buf[starts]
    last, before_last = buf[np.maximum(ends - 1, 0)], buf[np.maximum(ends - 2, 0)]
    record = (first == _OPEN) & ((last == _CLOSE) | ((last == _CR) & (before_last == _CLOSE)))
    for n in np.flatnonzero(~record).tolist():
        text = data[starts[n]:ends[n]].strip()
        if not text:
            continue
        if not (text.startswith(b"{") and text.endswith(b"}")):
            raise DatasetError(
                f"{name} line {lines + n + 1:,} (byte {base + int(starts[n]):,}) is not a JSON "
                f"object: it starts {text[:40]!r}; each line of a JSONL dataset holds one "
                "{...} object, or nothing.")
        record[n] = True
    found: np.ndarray = starts[record] + base
    return found
