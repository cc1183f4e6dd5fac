"""`shardcook ingest` given careless or hostile input: a file twice, a FIFO or a device, an input
inside what the run deletes, a manifest naming another URL scheme or files that are not Arrow,
names that collide with a partial download, and `.npy` headers whose shape is wrong. Each is a
one-sentence refusal (exit 2, nothing changed), a skip or a failed file recorded in report.json,
never a wrong shard."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from shardcook import read_shard
from shardcook.config.ingest import IngestConfig, IngestDataset, Retry
from shardcook.errors import ConfigError
from shardcook.jobs.ingest.download import download
from shardcook.jobs.ingest.run import run_ingest

from tests.helpers.mlperf import (
    SHAPES,
    bf16_bits,
    md5,
    npy_bytes,
    serve,
    write_arrow,
    write_arrow_set,
    write_manifest,
)

FAST = Retry(attempts=2, base_delay_s=0.01)


def _ingest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", "ingest", *args],
                          check=False, capture_output=True, text=True, timeout=300)


def _hashes(folder: Path) -> dict[str, str]:
    """Every file under `folder` by its path, with the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def _refused(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and words in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_file_given_twice_is_refused_naming_it(tmp_path):
    train = write_arrow_set(tmp_path / "in", 1, 2, timesteps=False)
    a = str(train.files[0])
    _refused(_ingest(a, a, "--output-dir", str(tmp_path / "out")), f"input {a!r} is given twice")
    link = tmp_path / "same.arrow"
    link.symlink_to(train.files[0])
    _refused(_ingest(a, str(link), "--output-dir", str(tmp_path / "out")), "given twice")
    assert not (tmp_path / "out").exists()


def test_a_fifo_or_a_device_is_named_for_what_it_is(tmp_path):
    fifo = tmp_path / "stream.arrow"
    os.mkfifo(fifo)  # reading it would wait forever for a writer
    _refused(_ingest(str(fifo), "--output-dir", str(tmp_path / "out")),
             "is a FIFO, not a regular file")
    _refused(_ingest("/dev/zero", "--output-dir", str(tmp_path / "out")),
             "is a device, not a regular file")
    _refused(_ingest(str(tmp_path), "--output-dir", str(tmp_path / "out")),  # in a folder
             f"input {str(fifo)!r} is a FIFO, not a regular file")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overwrite", [True, False])
def test_an_input_inside_what_the_run_deletes_is_refused_before_anything_is(tmp_path, overwrite):
    train = write_arrow_set(tmp_path / "in", 2, 2, timesteps=False)
    out = tmp_path / "out"
    assert _ingest(str(train.folder), "--output-dir", str(out)).returncode == 0
    # a user's file in the folder the run's downloads go to (and --overwrite clears)
    kept = out / ".shardcook" / "downloads" / "train" / "mine.arrow"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(train.files[0].read_bytes())
    before = _hashes(tmp_path)
    args = [str(kept), "--output-dir", str(out)] + (["--overwrite"] if overwrite else [])
    _refused(_ingest(*args), "which ingest deletes; move it out of the output folder first")
    assert _hashes(tmp_path) == before


@pytest.mark.parametrize("base", ["file:///etc", "file:///dev", "", "garbage", "ftp://host/x",
                                  "http://"])
def test_a_manifest_naming_another_url_scheme_is_refused(tmp_path, base):
    served = tmp_path / "served"
    train = write_arrow_set(served, 1, 2, timesteps=False)
    with serve(served) as (url, requests):
        write_manifest(served, "m", train.files, base)
        result = _ingest("--manifest-url", f"{url}/m.uri", "--output-dir", str(tmp_path / "out"))
    _refused(result, "not an http(s) address; ingest downloads only over http and https")
    assert not any(r.endswith(".arrow") for r in requests)
    assert not (tmp_path / "out").exists()


def test_a_local_manifest_with_a_file_base_url_is_refused(tmp_path):
    (tmp_path / "m.md5").write_text(f"{'a' * 32}  passwd\n")
    result = _ingest("--manifest", str(tmp_path / "m.md5"), "--base-url", "file:///etc",
                     "--output-dir", str(tmp_path / "out"))
    _refused(result, "base_url is 'file:///etc', not an http(s) address")
    assert not (tmp_path / "out").exists()


def test_manifest_entries_that_are_not_arrow_files_are_skipped_and_recorded(tmp_path):
    served = tmp_path / "served"
    train = write_arrow_set(served, 2, 3, timesteps=False)
    extra = [served / "dataset_info.json", served / "state.json"]
    for path in extra:
        path.write_text("{}")
    out = tmp_path / "out"
    with serve(served) as (base, requests):
        write_manifest(served, "m", train.files + extra, base)
        result = _ingest("--manifest-url", f"{base}/m.uri", "--output-dir", str(out))
    assert result.returncode == 0, result.stderr
    assert not any(r.endswith(".json") for r in requests)
    assert sorted(p.name for p in (out / "train").glob("*.tar")) == [
        "train-shard-000000.tar", "train-shard-000001.tar"]
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [(s["file"], s["reason"]) for s in report["skipped"]] == [
        ("dataset_info.json", "not an Arrow file"), ("state.json", "not an Arrow file")]
    assert report["num_skipped"] == 2
    assert json.loads((out / ".shardcook" / "manifest.json").read_text())["num_skipped"] == 2
    assert report["failed"] == []


def test_a_partial_download_cannot_take_another_files_name(tmp_path):
    """`x.arrow` downloading slowly while `x.arrow.part` arrives whole: each keeps its bytes."""
    served = tmp_path / "served"
    (served / "sub").mkdir(parents=True)
    slow, other = served / "x.arrow", served / "x.arrow.part"
    slow.write_bytes(b"s" * 300_000)
    other.write_bytes(b"o" * 1000)
    folder = tmp_path / "downloads"
    folder.mkdir()
    with serve(served, delays={"x.arrow": 0.5}) as (base, _):
        threads = [threading.Thread(target=download, args=(
            f"{base}/{p.name}", folder / p.name, md5(p), FAST))
            for p in (slow, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert (folder / "x.arrow").read_bytes() == slow.read_bytes()
    assert (folder / "x.arrow.part").read_bytes() == other.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["x.arrow", "x.arrow.part"]


def _header(shape: tuple[int, ...], data: bytes, descr: str = "<u2") -> bytes:
    """A `.npy` (version 1.0) whose header says `shape`, followed by `data`."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (-(len(text) + 11) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + data


def _t5_bytes() -> bytes:
    return bf16_bits(np.zeros(SHAPES["t5_encodings"], np.float32)).tobytes()


BAD_CELLS = {
    "a negative shape": ({"t5_encodings": _header((-6, -8), _t5_bytes())},
                         "t5_encodings has the shape [-6, -8]"),
    # 2 * prod wraps to the 96 bytes there in int64
    "an overflowing shape": ({"t5_encodings": _header((2**62 + 24, 2), _t5_bytes())},
                             "needs 18446744073709551840"),
    "a T5 of rank 3": ({"t5_encodings": npy_bytes(np.zeros((2, 3, 8), np.uint16))},
                       "t5_encodings has the shape [2, 3, 8], not 2 dimension(s)"),
    "a logvar unlike its mean": ({"logvar": npy_bytes(np.zeros((4, 1, 4), np.uint16))},
                                 "logvar has the shape [4, 1, 4], mean [4, 2, 2]"),
    "a mean unlike the split's": ({"mean": npy_bytes(np.zeros((4, 4, 4), np.uint16)),
                                   "logvar": npy_bytes(np.zeros((4, 4, 4), np.uint16))},
                                  "mean has the shape [4, 4, 4], unlike the split's [4, 2, 2]"),
}


@pytest.mark.parametrize("case", BAD_CELLS)
def test_a_tensor_with_a_wrong_shape_fails_its_file(tmp_path, case):
    cells, reason = BAD_CELLS[case]
    folder = tmp_path / "in"
    folder.mkdir()
    write_arrow(folder / "part-00000.arrow", 0, 3, timesteps=False)
    write_arrow(folder / "part-00001.arrow", 1, 3, timesteps=False, cells=cells)
    out = tmp_path / "out"
    result = _ingest(str(folder), "--output-dir", str(out))
    assert result.returncode == 1, result.stderr
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [(f["file"], f["stage"]) for f in report["failed"]] == [
        ("part-00001.arrow", "conversion")]
    assert reason in report["failed"][0]["reason"], report["failed"][0]["reason"]
    assert sorted(p.name for p in (out / "train").glob("*.tar")) == ["train-shard-000000.tar"]
    assert [key for key, _ in read_shard(out / "train" / "train-shard-000000.tar")] == [
        "f000r0000", "f000r0001", "f000r0002"]


def test_run_ingest_refuses_an_unsafe_base_url_before_writing(tmp_path):
    (tmp_path / "m.md5").write_text(f"{'a' * 32}  x.arrow\n")
    cfg = IngestConfig(output_dir=tmp_path / "out", retry=FAST, datasets=[IngestDataset(
        split="train", manifest=tmp_path / "m.md5", base_url="file:///dev")])
    with pytest.raises(ConfigError, match="not an http"):
        run_ingest(cfg)
    assert not (tmp_path / "out").exists()


def test_a_resumed_run_checks_shapes_against_the_earlier_runs_shards(tmp_path):
    """The split's shapes are its first finished shard's, also for the files a rerun converts
    (which a run that checked only its own files would take as the split's)."""
    cells, reason = BAD_CELLS["a mean unlike the split's"]
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    write_arrow(folder / "part-00000.arrow", 0, 3, timesteps=False)
    (folder / "part-00001.arrow").write_bytes(b"not yet an Arrow file")
    assert _ingest(str(folder), "--output-dir", str(out)).returncode == 1
    write_arrow(folder / "part-00001.arrow", 1, 3, timesteps=False, cells=cells)
    result = _ingest(str(folder), "--output-dir", str(out))
    assert result.returncode == 1, result.stderr
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [f["file"] for f in report["failed"]] == ["part-00001.arrow"]
    assert reason in report["failed"][0]["reason"], report["failed"][0]["reason"]
    assert sorted(p.name for p in (out / "train").glob("*.tar")) == ["train-shard-000000.tar"]


def test_a_resumed_run_into_a_bucket_checks_shapes_against_the_shards_there(s3_store, tmp_path):
    """As in a local folder: the split's first finished shard is read back from the bucket, so
    the file the rerun converts fails for the shape it does not share with it."""
    cells, reason = BAD_CELLS["a mean unlike the split's"]
    folder, url = tmp_path / "in", s3_store.url("out")
    folder.mkdir()
    write_arrow(folder / "part-00000.arrow", 0, 3, timesteps=False)
    (folder / "part-00001.arrow").write_bytes(b"not yet an Arrow file")
    assert _ingest(str(folder), "--output-dir", url).returncode == 1
    write_arrow(folder / "part-00001.arrow", 1, 3, timesteps=False, cells=cells)
    result = _ingest(str(folder), "--output-dir", url)
    assert result.returncode == 1, result.stderr
    report = json.loads(s3_store.get("out/.shardcook/report.json"))
    assert [f["file"] for f in report["failed"]] == ["part-00001.arrow"]
    assert reason in report["failed"][0]["reason"], report["failed"][0]["reason"]
    assert [k for k in s3_store.keys("out/train/") if k.endswith(".tar")] == [
        "out/train/train-shard-000000.tar"]


@pytest.mark.parametrize("first_has_timesteps", [True, False])
def test_a_file_unlike_the_split_in_its_timestep_column_fails_alone(tmp_path,
                                                                   first_has_timesteps):
    """A split's samples all carry a timestep or none do (`validate --deep` refuses a mix): the
    odd file fails, as a file of other tensor shapes does."""
    from shardcook.dataset import validate

    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    for n in range(3):
        write_arrow(folder / f"part-{n:05d}.arrow", n, 3,
                    timesteps=first_has_timesteps != (n == 1))
    result = _ingest(str(folder), "--split-part", "val", "--output-dir", str(out))
    assert result.returncode == 1, result.stderr
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [(f["file"], f["stage"]) for f in report["failed"]] == [
        ("part-00001.arrow", "conversion")]
    here, there = ("no", "one") if first_has_timesteps else ("a", "none")
    assert (f"the file has {here} timestep column and the split's first converted file has "
            f"{there}") in report["failed"][0]["reason"]
    assert sorted(p.name for p in (out / "val").glob("*.tar")) == [
        "val-shard-000000.tar", "val-shard-000002.tar"]
    checked = validate(out, deep=True)
    assert checked.ok, checked.problems


def test_a_resumed_run_checks_the_timestep_column_against_the_earlier_runs_shards(tmp_path):
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    write_arrow(folder / "part-00000.arrow", 0, 3, timesteps=True)
    (folder / "part-00001.arrow").write_bytes(b"not yet an Arrow file")
    assert _ingest(str(folder), "--split-part", "val", "--output-dir", str(out)).returncode == 1
    write_arrow(folder / "part-00001.arrow", 1, 3, timesteps=False)
    result = _ingest(str(folder), "--split-part", "val", "--output-dir", str(out))
    assert result.returncode == 1, result.stderr
    assert ("failed: part-00001.arrow (conversion): the file has no timestep column"
            in result.stderr), result.stderr
    assert sorted(p.name for p in (out / "val").glob("*.tar")) == ["val-shard-000000.tar"]


@pytest.mark.parametrize(("key_prefix", "why"), [
    ("x.", "it holds '.' or '/'"), ("x/", "it holds '.' or '/'"),
    ("__x", "it starts with '__'"), ("x\x01", "it holds a control character")])
def test_a_key_that_cannot_be_a_sample_key_fails_its_file(tmp_path, key_prefix, why):
    """The writer would refuse it: found while converting, it fails its file (exit 1, named in
    report.json), and the other files' shards are written."""
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    write_arrow(folder / "part-00000.arrow", 0, 2, timesteps=False)
    write_arrow(folder / "part-00001.arrow", 1, 2, timesteps=False, key_prefix=key_prefix)
    write_arrow(folder / "part-00002.arrow", 2, 2, timesteps=False)
    result = _ingest(str(folder), "--output-dir", str(out))
    assert result.returncode == 1, result.stderr
    key = f"{key_prefix}001r0000"
    assert (f"failed: part-00001.arrow (conversion): row 0: __key__ is {key!r}, which cannot "
            f"be a sample key: {why}") in result.stderr, result.stderr
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [(f["file"], f["stage"]) for f in report["failed"]] == [
        ("part-00001.arrow", "conversion")]
    assert sorted(p.name for p in (out / "train").glob("*.tar")) == [
        "train-shard-000000.tar", "train-shard-000002.tar"]


def test_two_files_with_the_same_bytes_are_named_by_their_input_files(tmp_path):
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    write_arrow(folder / "part-00000.arrow", 0, 2, timesteps=False)
    copy = folder / "part-00001.arrow"
    copy.write_bytes((folder / "part-00000.arrow").read_bytes())
    result = _ingest(str(folder), "--output-dir", str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith('error: duplicate sample key "f000r0000"'), result.stderr
    assert (f"train/train-shard-000000.tar (input {folder / 'part-00000.arrow'}) and in "
            f"train/train-shard-000001.tar (input {copy})") in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("subdir", ["train", "extra"])
def test_empty_encodings_in_a_folder_a_split_may_have_are_refused(tmp_path, subdir):
    """A split's folder is its name (lowercase letters): the empty encodings there would be
    taken for part of the split, the earlier command's (`train`) or a later one's (`extra`)."""
    train = write_arrow_set(tmp_path / "cc12m", 1, 2, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 1, 2, timesteps=True, key_prefix="v")
    out = tmp_path / "out"
    assert _ingest(str(train.folder), "--output-dir", str(out)).returncode == 0
    config = tmp_path / "val.yaml"
    config.write_text(f"datasets:\n  - {{split_name: val, paths: [{val.folder}]}}\n"
                      "empty_encodings: {manifest_url: 'http://127.0.0.1:9/e.uri', "
                      f"output_subdir: {subdir}}}\n"
                      f"output: {{output_dir: {out}}}\n")
    before = _hashes(out)
    _refused(_ingest("--config", str(config)),
             f"empty_encodings.output_subdir {subdir!r} must be one plain folder name inside the "
             "output folder, not hidden nor a split's: more than the lowercase letters a split "
             "is named by")
    assert _hashes(out) == before
