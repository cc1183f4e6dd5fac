"""A new layout is one declaration plus one registry line: a toy layout (`png` + `cls` +
`meta.json`), registered only for this test, declaring no cooker or task encoder of its own, is
written, finalized, validated, previewed and read through `get_diffusion_loader` (Energon, with
the registry's default reading: every part decoded as Energon's default decoder does) with no
other change to shardcook."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
import shardcook
import torch
from PIL import Image
from shardcook.energon import (
    PartsSample,
    PartsTaskEncoder,
    RawDiffusionTaskEncoder,
    get_diffusion_loader,
    task_encoder_for,
)
from shardcook.errors import ShardcookError
from shardcook.layouts import LAYOUTS, Layout, Reading
from shardcook.layouts.base import PARTS_COOKER
from shardcook.preview import preview

TOY = Layout(
    name="toy",
    encoding="toy",
    parts=("png", "cls", "meta.json"),
    required=("png", "cls"),
    reading=Reading(preview="shardcook.preview:raw_picture"),
)


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

    assert isinstance(task_encoder_for(root), PartsTaskEncoder)
    loader = get_diffusion_loader(root, batch_size=2, num_workers=0, shuffle_buffer_size=None,
                                  max_samples_per_sequence=None)
    batch = next(iter(loader))
    assert isinstance(batch, PartsSample) and len(batch.__key__) == 2
    images = batch.parts["png"]  # decoded as Energon's default decoder does: float RGB, CHW
    assert isinstance(images, torch.Tensor) and images.shape == (2, 3, 6, 8)
    first = int(batch.__key__[0])
    assert torch.allclose(images[0], torch.full((3, 6, 8), first * 20 / 255))
    assert batch.parts["cls"] == [int(key) % 3 for key in batch.__key__]
    assert batch.parts["meta.json"] == {"n": [int(key) for key in batch.__key__]}  # dicts too


def test_the_default_reading_cooks_only_its_own_layouts(tmp_path, monkeypatch):
    """The default task encoder's cookers come from the registry: one per layout that takes the
    default reading, each for its own encoding."""
    default = [{"encoding": lay.encoding} for lay in LAYOUTS.values()
               if lay.reading.cooker == PARTS_COOKER]
    assert [c.has_subflavors for c in PartsTaskEncoder().cookers] == default
    monkeypatch.setitem(LAYOUTS, TOY.name, TOY)
    *_, cooker = PartsTaskEncoder().cookers
    assert len(PartsTaskEncoder().cookers) == len(default) + 1
    assert cooker.has_subflavors == {"encoding": TOY.encoding}
    assert not cooker.is_match({}) and not cooker.is_match({"encoding": "raw"})


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


def test_a_task_encoder_cooks_every_layout_whose_reading_names_it(monkeypatch):
    """No task encoder names its layouts: a layout naming one in its registry entry is cooked by
    it, with the options its cooker asks for."""
    raw_images = Reading(cooker="shardcook.energon.cookers:cook_raw_images",
                         cooker_options=("image_format",),
                         task_encoder="shardcook.energon:RawDiffusionTaskEncoder",
                         task_encoder_options=("image_format",))
    monkeypatch.setitem(LAYOUTS, TOY.name, dataclasses.replace(TOY, reading=raw_images))
    cookers = RawDiffusionTaskEncoder(image_format="pil").cookers
    # the cooker that also reads unmarked datasets (raw's) comes last
    assert [c.has_subflavors for c in cookers] == [{"encoding": TOY.encoding},
                                                   {"encoding": LAYOUTS["raw"].encoding}]
    crude = {"__key__": "0", "__restore_key__": (), "__subflavors__": {}, "__sources__": (),
             "png": png(1), "txt": b"a toy"}
    assert cookers[0].cook(crude).image.size == (8, 6)  # a PIL image: image_format reached it
