"""`validate --deep` on `preencoded_numpy` (MLPerf Flux.1) datasets: each finding of the layout's
checks (a part that is not uint16 .npy, a pickled .npy, ranks, mean/logvar shapes, a timestep
out of range, one shape per split, timesteps on all samples or none) is one sentence."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from shardcook import ShardWriter
from shardcook.dataset import finalize, info, validate

from tests.helpers.mlperf import npy_bytes


def _part(shape: tuple[int, ...], dtype: type = np.uint16) -> bytes:
    return npy_bytes(np.zeros(shape, dtype=dtype))


def _sample(n: int, timestep: int | None = None, **override: bytes) -> dict[str, bytes]:
    meta: dict[str, object] = {"key": f"k{n}"}
    if timestep is not None:
        meta["timestep"] = timestep
    parts = {"t5.bytes": _part((4, 8)), "clip.bytes": _part((8,)),
             "mean.bytes": _part((2, 2, 2)), "logvar.bytes": _part((2, 2, 2)),
             "json": json.dumps(meta).encode()}
    parts.update(override)
    return parts


def _dataset(root: Path, samples: list[dict[str, bytes]]) -> Path:
    with ShardWriter(root, shard_size=len(samples), prefix="val-shard-") as w:
        for n, parts in enumerate(samples):
            w.write(f"k{n}", parts)
    finalize(root, encoding="preencoded_numpy", split_parts={"val": "val-shard-.*"},
             validate=False)
    return root


def _pickled() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([None, 1], dtype=object), allow_pickle=True)
    return buf.getvalue()


CASES = [
    ({"t5.bytes": _part((4, 8), np.float32)}, "part t5.bytes holds float32, not uint16"),
    ({"clip.bytes": b"not numpy"}, "part clip.bytes is not a .npy array"),
    ({"mean.bytes": _pickled()}, "part mean.bytes holds object, not uint16"),
    ({"clip.bytes": _part((2, 4))}, "part clip.bytes has shape [2, 4], not of rank 1"),
    ({"logvar.bytes": _part((2, 2, 3))},
     "part logvar.bytes has shape [2, 2, 3] but mean.bytes has [2, 2, 2]"),
    ({"json": b'{"key": "k1", "timestep": 8}'}, "timestep is 8, not an integer in [0, 8)"),
    ({"json": b'{"key": "k1", "timestep": true}'}, "timestep is True, not an integer"),
    ({"t5.bytes": _part((5, 8))},
     "sample k1 part t5.bytes has shape [5, 8] but sample k0 of the val split has [4, 8]"),
    ({"json": b'{"key": "k1"}'},
     "the val split mixes samples with a timestep (2, e.g. k0) and without one (1, e.g. k1)"),
]


@pytest.mark.parametrize(("override", "finding"), CASES)
def test_deep_validation_names_each_finding(tmp_path, override, finding):
    root = _dataset(tmp_path / "ds", [_sample(0, 3), _sample(1, 5, **override), _sample(2, 5)])
    report = validate(root, deep=True)
    assert not report.ok
    assert any(finding in p for p in report.problems), report.problems


def test_a_sound_dataset_validates_and_info_counts_timesteps(tmp_path):
    root = _dataset(tmp_path / "ds", [_sample(0, 3), _sample(1, 5), _sample(2, 5)])
    report = validate(root, deep=True)
    assert report.ok, report.problems
    summary = info(root)
    assert summary.val_timesteps == {3: 1, 5: 2}
    assert "val timesteps: 3: 1, 5: 2" in summary.lines()
    assert summary.parts["mean.bytes"] == "bfloat16[2, 2, 2] (uint16 .npy)"


def test_train_split_without_timesteps_validates(tmp_path):
    root = _dataset(tmp_path / "ds", [_sample(0), _sample(1)])
    assert validate(root, deep=True).ok
