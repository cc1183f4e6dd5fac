"""Foreign WebDataset tars (a plain `energon prepare` job: `.cls`, `.json`, `.png` parts) finalize
with `--encoding generic` to exactly what `energon prepare --non-interactive` writes: the crude
dataset.yaml, or with `--sample-type`/`--field-map` a typed one that Energon decodes; `--help`
lists every layout of the registry."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from shardcook import validate
from shardcook.layouts import LAYOUTS

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.shards import ENERGON, assert_same_index, tarfile_shard

META = ".nv-meta"
FIELD_MAP = '{"image": "png", "label": "cls"}'


def png(i: int) -> bytes:
    pixels = np.full((6, 8, 3), i * 20, dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def foreign_tars(root: Path, extra: dict[str, bytes] | None = None) -> Path:
    """Four shards of three samples each as webdataset's writers make them: `.cls`, `.json`,
    `.png` parts (plus `extra`), keys not ours."""
    for s in range(4):
        members: list[tuple[str, bytes | None]] = []
        for i in range(3):
            n = s * 3 + i
            parts = {"cls": str(n % 5).encode(), "json": json.dumps({"n": n}).encode(),
                     "png": png(n), **(extra or {})}
            members += [(f"sample_{n:04d}.{part}", data) for part, data in parts.items()]
        tarfile_shard(root / f"train-{s:03d}.tar", members, tarfile.GNU_FORMAT)
    return root


def energon_prepare(root: Path, *args: str) -> None:
    ref = subprocess.run([*ENERGON, "prepare", "--non-interactive", "--split-ratio", "0.5,0.5,0",
                          *args, str(root)], capture_output=True, text=True, timeout=300,
                         check=False)
    assert ref.returncode == 0, ref.stdout + ref.stderr


def _dataset_yaml(root: Path) -> bytes:
    return (root / META / "dataset.yaml").read_bytes()


def test_generic_writes_what_energon_prepare_writes(tmp_path, twin):
    ours = foreign_tars(tmp_path / "ours")
    theirs = twin(ours)
    r = cli("finalize", ours, "--encoding", "generic", "--split", "0.5,0.5,0")
    assert r.code == 0, r.stdout + r.stderr
    energon_prepare(theirs, "--sample-type", "CrudeWebdataset")
    assert_same_index(ours, theirs)
    assert _dataset_yaml(ours) == _dataset_yaml(theirs)
    assert json.loads((ours / ".shardcook" / "finalize.json").read_text())["encoding"] == "generic"
    report = validate(ours)
    assert report.ok, report.problems
    # a later finalize keeps it generic without being told
    assert cli("finalize", "--force", ours).code == 0
    assert _dataset_yaml(ours) == _dataset_yaml(theirs)


def test_typed_sample_class_matches_energon_prepare_and_decodes(tmp_path, twin):
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_val_dataset

    ours = foreign_tars(tmp_path / "ours")
    theirs = twin(ours)
    r = cli("finalize", ours, "--encoding", "generic", "--split", "0.5,0.5,0",
            "--sample-type", "ImageClassificationSample", "--field-map", FIELD_MAP)
    assert r.code == 0, r.stdout + r.stderr
    energon_prepare(theirs, "--sample-type", "ImageClassificationSample", "--field-map", FIELD_MAP)
    assert_same_index(ours, theirs)
    assert _dataset_yaml(ours) == _dataset_yaml(theirs)
    assert validate(ours).ok

    class Identity(DefaultTaskEncoder):
        def batch(self, samples):
            return samples

    dataset = get_val_dataset(ours, split_part="train", batch_size=1, task_encoder=Identity(),
                              worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0))
    samples = [s for batch in get_loader(dataset) for s in batch]
    assert [s.label for s in samples] == [n % 5 for n in range(6)]
    assert [tuple(s.image.shape) for s in samples] == [(3, 6, 8)] * 6


def test_tars_that_look_like_a_layout_can_be_finalized_as_generic(tmp_path):
    root = foreign_tars(tmp_path / "ds", extra={"txt": b"a caption"})  # png + txt: raw's parts
    r = cli("finalize", root)
    assert r.code == 2 and "look like the raw layout" in one_error_line(r)
    assert not (root / META).exists()
    r = cli("finalize", root, "--encoding", "generic")
    assert r.code == 0, r.stdout + r.stderr
    assert yaml.safe_load((root / META / "dataset.yaml").read_text()) == {
        "__module__": "megatron.energon", "__class__": "CrudeWebdataset"}


def test_help_lists_every_layout_of_the_registry():
    for command in ("finalize", "validate"):
        r = cli(command, "--help")
        text = " ".join(r.stdout.split())
        for layout in LAYOUTS.values():
            assert layout.encoding in text, (command, layout.encoding)


@pytest.mark.parametrize(("args", "says"), [
    (["--field-map", "{image: png"], "error: --field-map is not valid JSON"),
    (["--field-map", '["png"]'], "error: --field-map must be a JSON object of field names"),
    (["--sample-type", "NoSuchSample"],
     "error: --sample-type NoSuchSample is not a class of megatron.energon"),
    (["--sample-type", "ImageClassificationSample"],
     "error: --sample-type ImageClassificationSample needs --field-map"),
])
def test_bad_sample_type_or_field_map_is_one_line_and_writes_nothing(tmp_path, args, says):
    root = foreign_tars(tmp_path / "ds")
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    r = cli("finalize", root, "--encoding", "generic", *args)
    assert r.code == 2
    assert one_error_line(r).startswith(says)
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before


def test_a_typed_dataset_energon_prepared_validates_and_info_shows_it(tmp_path):
    root = foreign_tars(tmp_path / "ds")
    energon_prepare(root, "--sample-type", "ImageClassificationSample", "--field-map", FIELD_MAP)
    report = validate(root)
    assert report.ok, report.problems
    r = cli("info", root, "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["dataset_type"] == "megatron.energon.ImageClassificationSample"
    r = cli("finalize", "--force", root)  # keeps the class and the field_map
    assert r.code == 0, r.stdout + r.stderr
    assert yaml.safe_load((root / META / "dataset.yaml").read_text()) == {
        "sample_type": {"__module__": "megatron.energon", "__class__": "ImageClassificationSample"},
        "field_map": json.loads(FIELD_MAP)}


def test_finalize_without_validation_does_not_import_energon(tmp_path):
    foreign_tars(tmp_path / "ds")
    code = ("import sys; from shardcook import finalize; "
            f"finalize({str(tmp_path / 'ds')!r}, encoding='generic', validate=False); "
            "print('megatron.energon' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_a_bare_npy_part_is_read_as_an_array_by_a_deep_validate(tmp_path):
    # webdataset names a member `key.npy`'s part plain `npy`: its array is read, not refused
    array = io.BytesIO()
    np.save(array, np.arange(12, dtype=np.float32).reshape(3, 4))
    root = foreign_tars(tmp_path / "ds", extra={"npy": array.getvalue()})
    r = cli("finalize", root, "--encoding", "generic", "--no-validate")
    assert r.code == 0, r.stdout + r.stderr
    report = validate(root, deep=True)
    assert report.ok, report
    broken = foreign_tars(tmp_path / "broken", extra={"npy": b"not an array"})
    assert cli("finalize", broken, "--encoding", "generic", "--no-validate").code == 0
    assert not validate(broken, deep=True).ok
