"""A run's output folder is never inside another dataset (a folder holding `.nv-meta/` or a
shardcook run's manifest) nor inside a `.nv-meta`/`.shardcook` folder: raw, encode and chatml
refuse it in one sentence, exit 2, before anything is written, locally and in a bucket. The
dataset around it keeps every byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.helpers.chatml import turns, write_images, write_jsonl
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.encode import encode_args
from tests.helpers.raw import make_folder, run_cli

INSIDE_RECORDS = "is inside a {folder} folder, which holds a dataset's own records; choose a " \
                 "folder outside it."
INSIDE_DATASET = "is inside the dataset {dataset!r}, whose finalize and validate would then " \
                 "meet this run's shards; choose a folder outside it."


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """An image folder, a chatml JSONL, a finalized dataset and an unfinalized run."""
    root = tmp_path_factory.mktemp("place")
    src = make_folder(root / "in", 4, photos=0)
    names = write_images(root / "chat", 3, photos=0)
    jsonl = write_jsonl(root / "chat" / "data.jsonl", [
        {"id": f"r{i}", "image": n, "conversations": turns(1)} for i, n in enumerate(names)])
    common = ["--input-dir", str(src), "--image-size", "32", "--shard-size", "2", "--quiet"]
    run_cli("raw", *common, "--output-dir", str(root / "ds"))
    run_cli("raw", *common, "--output-dir", str(root / "run"), "--no-finalize")
    return src, jsonl, root


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _command(kind: str, src: Path, jsonl: Path, out: str, model: Path | None) -> list[str]:
    if kind == "raw":
        return ["raw", "--input-dir", str(src), "--output-dir", out, "--image-size", "32"]
    if kind == "chatml":
        return ["chatml", "--input", str(jsonl), "--output-dir", out, "--val-fraction", "0"]
    assert model is not None
    return encode_args(model, src, Path(out))


@pytest.mark.parametrize("kind", ["raw", "chatml", "encode"])
@pytest.mark.parametrize("where, expected", [
    ("ds/sub", INSIDE_DATASET.format(dataset="ds")),
    ("ds/a/b", INSIDE_DATASET.format(dataset="ds")),
    ("run/sub", INSIDE_DATASET.format(dataset="run")),
    ("ds/.nv-meta/x", INSIDE_RECORDS.format(folder=".nv-meta")),
    ("ds/.shardcook/x", INSIDE_RECORDS.format(folder=".shardcook")),
    ("elsewhere/.shardcook/progress", INSIDE_RECORDS.format(folder=".shardcook")),
])
def test_an_output_folder_inside_a_dataset_is_refused(inputs, request, kind, where, expected):
    src, jsonl, root = inputs
    model = request.getfixturevalue("tiny_flux") if kind == "encode" else None
    before = _hashes(root)
    out = root / where
    r = cli(*_command(kind, src, jsonl, str(out), model))
    assert r.code == 2
    dataset = where.split("/")[0]
    assert one_error_line(r) == f"error: --output-dir {str(out)!r} " + expected.replace(
        repr(dataset), repr(str(root / dataset)))
    assert _hashes(root) == before
    assert not out.exists()


def test_a_dataset_beside_another_is_written(inputs):
    """A sibling of a dataset, and a run into the dataset folder itself (its resume), are fine."""
    src, jsonl, root = inputs
    for out in (root / "sibling", root / "ds"):
        run_cli(*_command("raw", src, jsonl, str(out), None), "--shard-size", "2", "--quiet")


def _objects(store) -> dict[str, str]:
    return {key: hashlib.sha256(store.get(key)).hexdigest() for key in store.keys("")}


@pytest.mark.parametrize("where, dataset", [("ds/sub", "ds"), ("ds/a/b", "ds"),
                                            ("run/sub", "run"), ("ds/.nv-meta/x", None),
                                            ("top/.shardcook/x", None)])
def test_a_bucket_folder_inside_a_dataset_is_refused(inputs, s3_store, where, dataset):
    src, jsonl, root = inputs
    s3_store.upload_folder(root / "ds", "ds")
    s3_store.upload_folder(root / "run", "run")
    before = _objects(s3_store)
    url = s3_store.url(where)
    r = cli(*_command("raw", src, jsonl, url, None))
    assert r.code == 2
    expected = (INSIDE_DATASET.format(dataset=s3_store.url(dataset)) if dataset else
                INSIDE_RECORDS.format(folder=next(p for p in where.split("/")
                                                  if p.startswith("."))))
    assert one_error_line(r) == f"error: --output-dir {url!r} {expected}"
    assert _objects(s3_store) == before
