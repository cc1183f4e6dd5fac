"""One MLCommons Arrow IPC stream file into one shard of the `preencoded_numpy` layout: each
row's four tensor columns, as stored (`.npy` bytes of uint16), become `KEY.t5.bytes`,
`KEY.clip.bytes`, `KEY.mean.bytes`, `KEY.logvar.bytes`, and `KEY.json` holds `key` and, on the
validation split, `timestep` (as Primus's and NeMo's converters write it). Bytes are passed to
the writer as views of the memory-mapped file, never copied in Python."""

from __future__ import annotations

import itertools
import json
import math
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shardcook.dataset.check.npyparts import STORED_DTYPE, npy_header
from shardcook.errors import ErrorKind, ShardcookError
from shardcook.layouts.mlperf import (
    ARROW_COLUMNS,
    JSON_PART,
    KEY_COLUMN,
    LOGVAR_PART,
    MEAN_PART,
    TENSOR_PARTS,
    TENSOR_RANKS,
    TIMESTEP_COLUMN,
    TIMESTEPS,
)
from shardcook.sources.tarstream import read_samples
from shardcook.storage.store import Store

#: Each tensor part's shape, as a split's first row set it, and `timestep` (shape `()`) when
#: that row carried one: a split's rows all carry a timestep or none do.
Shapes = dict[str, tuple[int, ...]]


class ConversionError(ShardcookError):
    """An Arrow file does not hold MLCommons's schema or values; nothing of it was kept."""

    kind: ErrorKind = "conversion"


def _views(column: Any, name: str) -> list[memoryview]:
    """Each value of a binary column as a memoryview into the Arrow buffer (zero copy)."""
    import pyarrow as pa

    if column.null_count:
        raise ConversionError(f"column {name} has {column.null_count} empty value(s)")
    if pa.types.is_binary(column.type):
        width = np.int32
    elif pa.types.is_large_binary(column.type):
        width = np.int64
    else:
        raise ConversionError(f"column {name} is {column.type}, not binary .npy bytes")
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=width)[column.offset:column.offset + len(column) + 1]
    data = memoryview(data_buf).cast("B") if data_buf is not None else memoryview(b"")
    return [data[int(a):int(b)] for a, b in itertools.pairwise(offsets)]


def _check_npy(view: memoryview, part: str, row: int) -> tuple[int, ...]:
    """The value's shape: a uint16 `.npy` of the part's rank, every dimension at least 1, whose
    header accounts for every byte."""
    name = ARROW_COLUMNS[part]
    head = bytes(view[:4096])
    info = npy_header(head)
    if info is None or info.dtype != STORED_DTYPE:
        raise ConversionError(f"row {row}: {name} is not a .npy array of uint16 "
                              f"({info.dtype if info else 'no .npy header'})")
    if len(info.shape) != TENSOR_RANKS[part] or min(info.shape, default=1) < 1:
        raise ConversionError(f"row {row}: {name} has the shape {list(info.shape)}, not "
                              f"{TENSOR_RANKS[part]} dimension(s) of at least 1")
    # magic (6), version (2), header length (2 bytes in version 1, else 4), header
    size_bytes = 2 if head[6] == 1 else 4
    header_len = 8 + size_bytes + int.from_bytes(head[8:8 + size_bytes], "little")
    want = header_len + 2 * math.prod(info.shape)  # Python ints: no overflow
    if want != len(view):
        raise ConversionError(f"row {row}: {name} holds {len(view)} bytes but its .npy header "
                              f"needs {want}")
    return info.shape


def shard_shapes(store: Store, name: str) -> Shapes:
    """The tensor shapes (and timestep) of the first sample of shard `name` in `store` that
    this module wrote (none when empty): only that sample is read, streamed from the store."""
    with store.open_stream(name) as stream:
        first = next(read_samples(stream, store.child(name), 0), None)
    if first is None:
        return {}
    parts = first[1]
    found = {p: npy_header(parts[p][:4096]) for p in TENSOR_PARTS}
    shapes = {p: info.shape for p, info in found.items() if info is not None}
    if TIMESTEP_COLUMN in json.loads(parts[JSON_PART]):
        shapes[TIMESTEP_COLUMN] = ()
    return shapes


def _check_shapes(found: Shapes, expected: Shapes, row: int) -> None:
    """logvar has mean's shape, and every part the shape of the split's first row (which
    `expected` holds, or is filled with when empty), the timestep too: a file with a timestep
    column in a split without, or the other way round, would mix them (`validate --deep`
    refuses that)."""
    if found[LOGVAR_PART] != found[MEAN_PART]:
        raise ConversionError(f"row {row}: logvar has the shape {list(found[LOGVAR_PART])}, "
                              f"mean {list(found[MEAN_PART])}; they must match")
    if not expected:
        expected.update(found)
    if (TIMESTEP_COLUMN in found) != (TIMESTEP_COLUMN in expected):
        here, there = ("a", "none") if TIMESTEP_COLUMN in found else ("no", "one")
        raise ConversionError(f"the file has {here} {TIMESTEP_COLUMN} column and the split's "
                              f"first converted file has {there}; a split's samples all carry a "
                              f"{TIMESTEP_COLUMN} or none do")
    for part, shape in found.items():
        if shape != expected[part]:
            raise ConversionError(
                f"row {row}: {ARROW_COLUMNS[part]} has the shape {list(shape)}, unlike the "
                f"split's {list(expected[part])} (its first converted row's)")


def _check_key(key: object, row: int) -> str:
    """`key` when the shard writer takes it as a sample key (the rules of `check_key` in
    rust/tar/names.rs), checked here so that a bad one fails its file, not the whole run."""
    if not isinstance(key, str) or not key:
        why = "it is not a name"
    elif "." in key or "/" in key:
        why = "it holds '.' or '/' (the first dot starts a part's name)"
    elif key.startswith("__"):
        why = "it starts with '__', which Energon skips as metadata"
    elif any(unicodedata.category(c) == "Cc" for c in key):
        why = "it holds a control character"
    else:
        return key
    raise ConversionError(f"row {row}: {KEY_COLUMN} is {key!r}, which cannot be a sample key: "
                          f"{why}")


def _timesteps(batch: Any) -> list[int] | None:
    if TIMESTEP_COLUMN not in batch.schema.names:
        return None
    values = batch.column(TIMESTEP_COLUMN).to_pylist()
    for row, t in enumerate(values):
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < TIMESTEPS:
            raise ConversionError(f"row {row}: timestep is {t!r}, not an integer in "
                                  f"[0, {TIMESTEPS})")
    return [int(t) for t in values]


def samples(path: Path, key_prefix: str, shapes: Shapes,
            ) -> Iterator[tuple[str, list[tuple[str, Any]]]]:
    """(key, parts) for each row of the Arrow IPC stream file `path`; keys are `__key__` (else
    `key_prefix` and the row number). Every row's tensors must have the shapes in `shapes`
    (filled from the first row when empty).

    Raises:
        ConversionError: a column is missing, of the wrong type, empty or not uint16 `.npy`, a
            tensor's rank or shape is wrong, a key cannot be a sample key, a timestep is out of
            range or present unlike the split's first row.
    """
    import pyarrow as pa

    try:
        source = pa.memory_map(str(path))
        reader = pa.ipc.open_stream(source)
    except (OSError, pa.ArrowInvalid) as e:
        raise ConversionError(f"not an Arrow IPC stream file ({e})") from None
    columns = [ARROW_COLUMNS[p] for p in TENSOR_PARTS]
    missing = [c for c in columns if c not in reader.schema.names]
    if missing:
        raise ConversionError(f"lacks the column(s) {', '.join(missing)} of MLCommons's schema")
    row0 = 0
    try:
        for batch in reader:
            # Arrow trusts a stream's offsets; a crafted one would read past its buffers
            batch.validate(full=True)
            views = [_views(batch.column(c), c) for c in columns]
            keys = (batch.column(KEY_COLUMN).to_pylist() if KEY_COLUMN in batch.schema.names
                    else [f"{key_prefix}{row0 + i:08d}" for i in range(batch.num_rows)])
            steps = _timesteps(batch)
            for i in range(batch.num_rows):
                parts: list[tuple[str, Any]] = [(part, values[i]) for part, values
                                                in zip(TENSOR_PARTS, views, strict=True)]
                found = {part: _check_npy(value, part, row0 + i) for part, value in parts}
                if steps is not None:
                    found[TIMESTEP_COLUMN] = ()
                _check_shapes(found, shapes, row0 + i)
                key = _check_key(keys[i], row0 + i)
                meta: dict[str, Any] = {"key": key}
                if steps is not None:
                    meta[TIMESTEP_COLUMN] = steps[i]
                parts.append((JSON_PART, json.dumps(meta).encode("utf-8")))
                yield key, parts
            row0 += batch.num_rows
    except pa.ArrowInvalid as e:
        raise ConversionError(f"the Arrow stream is damaged after row {row0} ({e})") from None
