"""A new layout is one declaration plus one registry line: a toy layout (`png` + `cls` +
`meta.json`), registered only for this test with its cooker and task encoder defined here, is
written, finalized, validated, previewed and read through `get_diffusion_loader` (Energon) with
no other change to shardcook."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import shardcook
import torch
from megatron.energon import Cooker, DefaultTaskEncoder, Sample, basic_sample_keys, stateless
from megatron.energon.edataclass import edataclass
from PIL import Image
from shardcook.energon import get_diffusion_loader, task_encoder_for
from shardcook.errors import ShardcookError
from shardcook.layouts import LAYOUTS, Layout
from shardcook.preview import preview

TOY = Layout(
    name="toy",
    encoding="toy",
    parts=("png", "cls", "meta.json"),
    required=("png", "cls"),
    cooker=f"{__name__}:cook_toy",
    task_encoder=f"{__name__}:ToyTaskEncoder",
    preview="shardcook.preview:raw_picture",
)


@edataclass
class ToySample(Sample):
    image: torch.Tensor
    label: int


@stateless
def cook_toy(crude: dict[str, Any]) -> ToySample:
    pixels = np.asarray(Image.open(io.BytesIO(crude["png"])).convert("RGB"))
    return ToySample(**basic_sample_keys(crude), image=torch.from_numpy(pixels.copy()),
                     label=int(crude["cls"]))


class ToyTaskEncoder(DefaultTaskEncoder[ToySample, ToySample, Any, Any]):
    decoder = None
    cookers = [Cooker(cook_toy, has_subflavors={"encoding": TOY.encoding})]  # noqa: RUF012


def png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((6, 8, 3), i * 20, dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def write_toy(root: Path, n: int = 8) -> None:
    with shardcook.ShardWriter(str(root), shard_size=4) as w:
        for i in range(n):
            w.write(f"{i:010d}", [("png", png(i)), ("cls", str(i % 3).encode()),
                                  ("meta.json", json.dumps({"n": i}).encode())])


def test_unregistered_toy_is_refused(tmp_path):
    """Without its registry line the toy layout is unknown: the line is what makes it work."""
    write_toy(tmp_path / "toy")
    with pytest.raises(ShardcookError, match="toy"):
        shardcook.finalize(tmp_path / "toy", encoding=TOY.encoding, split=(1, 0, 0))


def test_toy_layout_from_its_registry_line_alone(tmp_path, monkeypatch):
    monkeypatch.setitem(LAYOUTS, TOY.name, TOY)
    root = tmp_path / "toy"
    write_toy(root)
    shardcook.finalize(root, encoding=TOY.encoding, split=(1, 0, 0))

    report = shardcook.validate(root, deep=True)
    assert report.ok, report.problems

    sheet = preview(root, tmp_path / "sheet.png", count=4)
    assert Image.open(sheet).size[0] > 0

    assert isinstance(task_encoder_for(root), ToyTaskEncoder)
    loader = get_diffusion_loader(root, batch_size=2, num_workers=0, shuffle_buffer_size=None,
                                  max_samples_per_sequence=None)
    batch = next(iter(loader))
    assert batch.image.shape == (2, 6, 8, 3)
    assert {int(label) for label in batch.label} <= {0, 1, 2}


def test_toy_missing_part_is_a_validate_problem(tmp_path, monkeypatch):
    """validate reads `required` from the registry entry too."""
    monkeypatch.setitem(LAYOUTS, TOY.name, TOY)
    root = tmp_path / "toy"
    with shardcook.ShardWriter(str(root), shard_size=4) as w:
        for i in range(4):
            w.write(f"{i:010d}", [("png", png(i)), ("meta.json", b"{}")])
    shardcook.finalize(root, encoding="generic", split=(1, 0, 0))
    report = shardcook.validate(root, encoding=TOY.encoding)
    assert not report.ok and any("cls" in p for p in report.problems), report.problems
