"""The `preencoded_numpy` (MLPerf Flux.1) layout's checks and facts: each tensor part a `.npy` of
uint16 (bfloat16 bits) read without pickle, shapes that agree within a sample and across a split,
and the json sidecar's `timestep` (an integer in [0, 8), carried by all or none of a split)."""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from shardcook.dataset.check.tensorinfo import TensorInfo
from shardcook.layouts.mlperf import (
    JSON_PART,
    LOGVAR_PART,
    MEAN_PART,
    TENSOR_PARTS,
    TENSOR_RANKS,
    TIMESTEP_COLUMN,
    TIMESTEPS,
)

#: What the stored uint16 bits are.
STORED_DTYPE = "uint16"
SHOWN_DTYPE = "bfloat16"
#: Enough bytes for any `.npy` header these parts have (numpy pads headers to 64 or 4096).
HEADER_BYTES = 4096


def npy_header(data: bytes) -> TensorInfo | None:
    """Shape and dtype from a `.npy` header (numpy's own parser, which reads the header as a
    literal and never unpickles), or None when `data` is not one."""
    from numpy.lib import format as npy

    stream = io.BytesIO(data)
    try:
        version = npy.read_magic(stream)
        read = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
        if read is None:
            return None
        shape, fortran, dtype = read(stream)
    except (ValueError, OSError, SyntaxError, TypeError):
        return None
    if fortran:
        return None
    return TensorInfo(tuple(int(n) for n in shape), str(dtype))


def npy_problem(data: bytes, deep: bool) -> tuple[TensorInfo | None, str | None]:
    """The part's shape, or why it is not a uint16 `.npy` (when `deep`, the whole array is read
    with `allow_pickle=False` and its length checked)."""
    info = npy_header(data)
    if info is None:
        return None, "is not a .npy array"
    if info.dtype != STORED_DTYPE:
        return None, f"holds {info.dtype}, not uint16 (bfloat16 bits)"
    if deep:
        import numpy as np

        try:
            np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            return None, f"is not a readable .npy array ({str(e).splitlines()[0]})"
    return info, None


def sidecar_timestep(data: bytes) -> tuple[int | None, str | None]:
    """The json sidecar's `timestep` (None when absent), or why the sidecar or the value is
    wrong."""
    try:
        meta = json.loads(data)
    except (ValueError, RecursionError):
        return None, f"part {JSON_PART} is not valid JSON"
    if not isinstance(meta, dict):
        return None, f"part {JSON_PART} is not a JSON object"
    if TIMESTEP_COLUMN not in meta:
        return None, None
    t = meta[TIMESTEP_COLUMN]
    if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < TIMESTEPS:
        return None, (f"part {JSON_PART}'s {TIMESTEP_COLUMN} is {t!r}, not an integer in "
                      f"[0, {TIMESTEPS})")
    return t, None


def check_mlperf(parts: Mapping[str, bytes], manifest: Mapping[str, Any],
                 deep: bool) -> list[str]:
    """Each tensor part a uint16 `.npy` of its rank (T5 `[L, D]`, CLIP `[D]`, mean and logvar
    `[C, H, W]` of one shape); the sidecar's timestep, where present, in [0, 8)."""
    problems = []
    shapes: dict[str, tuple[int, ...]] = {}
    for name in TENSOR_PARTS:
        if name not in parts:
            continue
        info, why = npy_problem(parts[name], deep)
        if why:
            problems.append(f"part {name} {why}")
        elif info is not None:
            if len(info.shape) != TENSOR_RANKS[name]:
                problems.append(f"part {name} has shape {list(info.shape)}, not of rank "
                                f"{TENSOR_RANKS[name]}")
            shapes[name] = info.shape
    if MEAN_PART in shapes and LOGVAR_PART in shapes and shapes[MEAN_PART] != shapes[LOGVAR_PART]:
        problems.append(f"part {LOGVAR_PART} has shape {list(shapes[LOGVAR_PART])} but "
                        f"{MEAN_PART} has {list(shapes[MEAN_PART])}")
    if JSON_PART in parts:
        _, why = sidecar_timestep(parts[JSON_PART])
        if why:
            problems.append(why)
    return problems


def _members(root: Path, shards: Sequence[str]) -> Iterator[tuple[str, str, str, bytes]]:
    """(shard, key, part, head) for the tensor and json members of the shards: a tensor's first
    `HEADER_BYTES` bytes, a json part whole; other data is seeked over."""
    for shard in shards:
        with tarfile.open(root / shard) as tar:
            for member in tar:
                base = member.name.rpartition("/")[2]
                key, _, part = base.partition(".")
                if not member.isfile() or (part not in TENSOR_PARTS and part != JSON_PART):
                    continue
                f = tar.extractfile(member)
                if f is None:
                    continue
                yield shard, key, part, f.read() if part == JSON_PART else f.read(HEADER_BYTES)


def check_mlperf_split(root: Path, split: str, shards: Sequence[str]) -> list[str]:
    """Across one split: each tensor part has one shape in every sample, and `timestep` is
    carried by all samples or by none (a mix would mix two validation estimators)."""
    first: dict[str, tuple[str, tuple[int, ...]]] = {}
    problems: list[str] = []
    with_t: list[str] = []
    without_t: list[str] = []
    try:
        for shard, key, part, head in _members(root, shards):
            if part == JSON_PART:
                t, why = sidecar_timestep(head)
                if why is None:
                    (without_t if t is None else with_t).append(key)
                continue
            info = npy_header(head)
            if info is None:
                continue  # the per-sample check names it
            seen = first.setdefault(part, (key, info.shape))
            if seen[1] != info.shape and len(problems) < 10:
                problems.append(f"{shard}: sample {key} part {part} has shape {list(info.shape)} "
                                f"but sample {seen[0]} of the {split} split has {list(seen[1])}")
    except (OSError, tarfile.TarError) as e:
        return [*problems, f"the {split} split cannot be read: {e}"]
    if with_t and without_t:
        problems.append(f"the {split} split mixes samples with a {TIMESTEP_COLUMN} "
                        f"({len(with_t)}, e.g. {with_t[0]}) and without one ({len(without_t)}, "
                        f"e.g. {without_t[0]}); re-ingest it so all or none carry one")
    return problems


def timestep_histogram(root: Path, shards: Sequence[str]) -> dict[int, int]:
    """How many samples of the shards carry each `timestep` (read from the json sidecars alone;
    empty when none does)."""
    counts: Counter[int] = Counter()
    for _, _, part, head in _members(root, shards):
        if part == JSON_PART:
            t, _ = sidecar_timestep(head)
            if t is not None:
                counts[t] += 1
    return dict(sorted(counts.items()))


def describe_npy(data: bytes) -> str | None:
    """`bfloat16[shape] (uint16 .npy)` for a part holding uint16 `.npy` bytes, else None."""
    info = npy_header(data)
    if info is None or info.dtype != STORED_DTYPE:
        return None
    return f"{SHOWN_DTYPE}{list(info.shape)} (uint16 .npy)"
