"""`shardcook ingest` killed mid-run and run again gives the same bytes as one clean run; a file
that fails to convert leaves no shard and is named in report.json; the command's exit codes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shardcook import read_shard
from shardcook.config.ingest import IngestConfig, IngestDataset, Retry
from shardcook.dataset import info, validate
from shardcook.jobs.ingest.run import run_ingest

from tests.helpers.mlperf import serve, write_arrow_set, write_manifest
from tests.helpers.slurm import array


def _ingest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", "ingest", *args],
                          check=False, capture_output=True, text=True, timeout=300)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tar"))}


def test_kill_mid_run_then_resume_gives_identical_bytes(tmp_path):
    served = tmp_path / "served"
    train = write_arrow_set(served, 8, 6, timesteps=False)
    reference, out = tmp_path / "reference", tmp_path / "out"
    markers = out / ".shardcook" / "progress"
    with serve(served, delay_s=0.4) as (base, _):
        url = f"{base}/{write_manifest(served, 'm', train.files, base)}"
        run_ingest(IngestConfig(output_dir=reference, retry=Retry(attempts=2),
                                datasets=[IngestDataset(split="train", manifest_url=url)]))
        args = ["--manifest-url", url, "--output-dir", str(out), "--max-workers", "1",
                "--prefetch-depth", "2", "--no-finalize"]
        proc = subprocess.Popen([sys.executable, "-m", "shardcook", "ingest", *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while len(list(markers.glob("*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done = len(list(markers.glob("*.json")))
        assert 2 <= done < 8, "the kill came after the run ended"
        resumed = _ingest(*args[:-1])
    assert resumed.returncode == 0, resumed.stderr
    assert _hashes(out) == _hashes(reference)
    assert len(_files(out / "train")) == 8
    assert not (out / "train" / ".shardcook").exists()


def test_a_download_killed_halfway_leaves_nothing_a_rerun_trusts(tmp_path):
    """SIGKILL while half a file is in: those bytes lie under a temporary name only, never under
    the file's own; the rerun fetches it again and gives the clean run's bytes."""
    served = tmp_path / "served"
    train = write_arrow_set(served, 2, 300, timesteps=False)  # files far above write buffers
    cut = train.files[0].name  # with one download thread, the only one in flight
    half = train.files[0].stat().st_size // 2
    clean, out = tmp_path / "clean", tmp_path / "out"
    downloads = out / ".shardcook" / "downloads" / "train"
    with serve(served, hang_once={cut}) as (base, requests):
        url = f"{base}/{write_manifest(served, 'm', train.files, base)}"
        args = ["--manifest-url", url, "--output-dir", str(out), "--max-workers", "1"]
        proc = subprocess.Popen([sys.executable, "-m", "shardcook", "ingest", *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        partial: list[Path] = []
        while not partial and time.monotonic() < deadline:
            time.sleep(0.1)
            partial = [p for p in downloads.glob("*") if p.stat().st_size >= half // 2]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert partial, "no half download seen"
        assert [p.name for p in downloads.iterdir()] == [partial[0].name] != [cut]
        assert partial[0].stat().st_size <= half
        resumed = _ingest(*args)
        assert _ingest("--manifest-url", url, "--output-dir", str(clean)).returncode == 0
    assert resumed.returncode == 0, resumed.stderr
    assert requests.count(cut) == 3  # the killed run's, the rerun's, the clean run's
    assert _hashes(out) == _hashes(clean)
    assert not (out / ".shardcook" / "downloads").exists()


def test_a_damaged_file_fails_alone_and_is_reported(tmp_path):
    train = write_arrow_set(tmp_path / "in", 3, 4, timesteps=False)
    damaged = train.files[1]
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    out = tmp_path / "out"
    result = _ingest(str(train.folder), "--output-dir", str(out))
    assert result.returncode == 1
    assert damaged.name in result.stderr and "Traceback" not in result.stderr
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert [(f["file"], f["stage"]) for f in report["failed"]] == [(damaged.name, "conversion")]
    assert sorted(_files(out / "train")) == ["train-shard-000000.tar", "train-shard-000002.tar"]
    assert not (out / "train" / ".shardcook").exists()


def test_bad_usage_is_one_sentence_and_exit_2(tmp_path):
    train = write_arrow_set(tmp_path / "in", 1, 2, timesteps=False)
    cases = [
        ([str(train.folder)], "--output-dir"),
        ([str(tmp_path / "missing"), "--output-dir", str(tmp_path / "o")], "does not exist"),
        ([str(train.folder), "--output-dir", str(tmp_path / "o"), "--split-part", "Val"],
         "lowercase"),
        (["--manifest", str(tmp_path / "m.md5"), "--output-dir", str(tmp_path / "o")],
         "base_url"),
        ([str(train.folder), "--base-url", "http://127.0.0.1:9/", "--output-dir",
          str(tmp_path / "o")], "base_url goes with manifest"),
    ]
    (tmp_path / "bad.yaml").write_text("pipeline:\n  prefetch_depth: 0\n")
    cases.append((["--config", str(tmp_path / "bad.yaml")], "prefetch_depth"))
    (tmp_path / "typo.yaml").write_text("datasets: []\npipelines: {}\n")
    cases.append((["--config", str(tmp_path / "typo.yaml")], "pipelines"))
    (tmp_path / "both.yaml").write_text(f"datasets:\n  - {{paths: [{train.folder}]}}\n")
    cases.append((["--config", str(tmp_path / "both.yaml"), str(train.folder)], "not both"))
    (tmp_path / "empty.yaml").write_text("empty_encodings: {output_subdir: empty_encodings}\n")
    cases.append((["--config", str(tmp_path / "empty.yaml")], "needs manifest_url"))
    (tmp_path / "url.yaml").write_text("datasets: [{manifest_url: 3}]\n")
    cases.append((["--config", str(tmp_path / "url.yaml")], "must be a string"))
    (tmp_path / "sub.yaml").write_text("empty_encodings: {manifest_url: http://127.0.0.1:9/e.uri, "
                                       "output_subdir: train/.shardcook}\n")
    cases.append((["--config", str(tmp_path / "sub.yaml")], "one plain folder name"))
    # `train/` is the train split's folder
    (tmp_path / "slash.yaml").write_text(
        f"datasets:\n  - {{paths: [{train.folder}]}}\noutput: {{output_dir: {tmp_path / 'o'}}}\n"
        "empty_encodings: {manifest_url: http://127.0.0.1:9/e.uri, output_subdir: train/}\n")
    cases.append((["--config", str(tmp_path / "slash.yaml")],
                  "empty_encodings.output_subdir 'train/' must be one plain folder name"))
    # each download is a thread: 100,000 of them stopped Python with "can't start new thread"
    cases.append(([str(train.folder), "--output-dir", str(tmp_path / "o"), "--max-workers",
                   "100000"], "--max-workers must be between 1 and 64 (each is a thread), "
                              "not 100000."))
    (tmp_path / "threads.yaml").write_text("pipeline:\n  max_workers: 100000\n")
    cases.append((["--config", str(tmp_path / "threads.yaml")],
                  "`pipeline.max_workers` must be between 1 and 64"))
    for args, words in cases:
        result = _ingest(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("error: ") and words in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_a_foreign_split_folder_or_other_inputs_are_refused_before_anything_is_written(tmp_path):
    train = write_arrow_set(tmp_path / "cc12m", 2, 3, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 1, 3, timesteps=True, key_prefix="v")
    out = tmp_path / "out"
    (out / "val").mkdir(parents=True)
    (out / "val" / "notes.txt").write_text("mine")
    config = tmp_path / "both.yaml"
    config.write_text(f"datasets:\n  - {{split_name: train, paths: [{train.folder}]}}\n"
                      f"  - {{split_name: val, paths: [{val.folder}]}}\n"
                      f"output: {{output_dir: {out}}}\n")
    result = _ingest("--config", str(config))
    assert result.returncode == 2 and "not a shardcook dataset" in result.stderr
    assert not (out / "train").exists()
    assert (out / "val" / "notes.txt").read_text() == "mine"
    (out / "val" / "notes.txt").unlink()
    (out / "val").rmdir()
    assert _ingest("--config", str(config)).returncode == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    result = _ingest(str(val.folder), str(train.files[0]), "--split-part", "val", "--output-dir",
                     str(out))
    assert result.returncode == 2 and "other inputs" in result.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_crafted_offsets_fail_the_file_instead_of_crashing(tmp_path):
    """Arrow trusts a stream's offsets; one pointing 1 GiB past its buffer used to kill the
    process with SIGBUS while the keys were read."""
    import numpy as np

    train = write_arrow_set(tmp_path / "in", 2, 2, timesteps=False)
    crafted = train.files[0]
    data = bytearray(crafted.read_bytes())
    keys = np.array([0, 9, 18], np.int32).tobytes()  # offsets of the two 9-character keys
    assert data.count(keys) == 1
    at = data.find(keys)
    data[at:at + 12] = np.array([0, 9, 1 << 30], np.int32).tobytes()
    crafted.write_bytes(bytes(data))
    result = _ingest(str(train.folder), "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 1, result.stderr
    assert f"failed: {crafted.name} (conversion): the Arrow stream is damaged" in result.stderr
    assert sorted(_files(tmp_path / "out" / "train")) == ["train-shard-000001.tar"]


def test_a_config_that_is_no_regular_file_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "mlperf.yaml"
    os.mkfifo(fifo)  # reading it would wait forever for a writer
    run = subprocess.run([sys.executable, "-m", "shardcook", "ingest", "--config", str(fifo)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2, run.stderr
    assert "not a regular file (a FIFO)" in run.stderr and "Traceback" not in run.stderr


def _hashes(folder: Path) -> dict[str, str]:
    """Every file of a finished dataset with the SHA-256 of its bytes, but for what each run
    writes anew (index.uuid, a random id; report.json, with its timing); the manifest is
    compared but for the output folder it records."""
    fresh = {".nv-meta/index.uuid", ".shardcook/report.json"}
    return {name: hashlib.sha256(_comparable(p, name)).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()
            and (name := str(p.relative_to(folder))) not in fresh}


def _comparable(path: Path, name: str) -> bytes:
    if name != ".shardcook/manifest.json":
        return path.read_bytes()
    manifest = json.loads(path.read_text())
    del manifest["config"]["output"]["output_dir"]
    return json.dumps(manifest).encode()


def _kill_mid_download(out: Path) -> None:
    partial = out / ".shardcook" / "downloads" / "train" / "tmpk1ll3d0a"  # pooch's temporary name
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"half a file")
    waiting = out / ".shardcook" / "downloads" / "train" / "part-00003.arrow"
    waiting.write_bytes(b"a whole file, not converted yet")
    for n in (2, 3):
        (out / ".shardcook" / "progress" / f"{n:06d}.json").unlink()
        (out / "train" / f"train-shard-{n:06d}.tar").unlink()


def _kill_mid_write(out: Path) -> None:
    tmp = out / "train" / ".shardcook" / "tmp"
    tmp.mkdir(parents=True)
    (tmp / "train-shard-000001.tar.partial").write_bytes(b"a partial shard")  # the writer's name
    (out / ".shardcook" / "progress" / "000001.json").unlink()
    (out / "train" / "train-shard-000001.tar").unlink()


def _kill_between_rename_and_marker(out: Path) -> None:
    (out / ".shardcook" / "progress" / "000001.json").unlink()


def _kill_mid_finalize(out: Path) -> None:
    (out / ".nv-meta" / f".index.uuid.tmp{2**22 + 1}").write_text("half")
    (out / ".nv-meta" / "split.yaml").unlink()
    (out / "train" / "train-shard-000000.tar.idx").unlink()


@pytest.mark.parametrize("kill", [_kill_mid_download, _kill_mid_write,
                                  _kill_between_rename_and_marker, _kill_mid_finalize])
def test_a_rerun_after_a_kill_at_any_instant_gives_the_clean_runs_bytes(tmp_path, kill):
    """Each kill point's leftovers, made on a copy of a clean run; the rerun finishes it."""
    served = tmp_path / "served"
    train = write_arrow_set(served, 4, 3, timesteps=False)
    clean, out = tmp_path / "clean", tmp_path / "out"
    with serve(served) as (base, _):
        url = f"{base}/{write_manifest(served, 'm', train.files, base)}"
        assert _ingest("--manifest-url", url, "--output-dir", str(clean)).returncode == 0
        shutil.copytree(clean, out)
        kill(out)
        resumed = _ingest("--manifest-url", url, "--output-dir", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert _hashes(out) == _hashes(clean)
    assert not list(out.rglob("*.tmp[0-9]*"))


def test_overwrite_clears_the_split_folders_of_recorded_shards_only(tmp_path):
    first = write_arrow_set(tmp_path / "first", 3, 2, timesteps=False)
    second = write_arrow_set(tmp_path / "second", 1, 2, timesteps=False, key_prefix="s")
    out = tmp_path / "out"
    assert _ingest(str(first.folder), "--output-dir", str(out)).returncode == 0
    (out / "train" / "notes.txt").write_text("mine")
    stray = out / "train" / "train-shard-000009.tar"
    stray.write_bytes(b"not recorded")
    before = _all_hashes(tmp_path)
    refused = _ingest(str(second.folder), "--output-dir", str(out), "--overwrite")
    assert refused.returncode == 2 and "train/train-shard-000009.tar" in refused.stderr
    assert _all_hashes(tmp_path) == before
    stray.unlink()
    result = _ingest(str(second.folder), "--output-dir", str(out), "--overwrite")
    assert result.returncode == 0, result.stderr
    assert sorted(_files(out / "train")) == ["train-shard-000000.tar"]
    assert [k for k, _ in read_shard(out / "train" / "train-shard-000000.tar")] == [
        "s000r0000", "s000r0001"]
    assert (out / "train" / "notes.txt").read_text() == "mine"


def _all_hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_splits_ingested_one_command_each_make_the_same_dataset_as_one_config(tmp_path):
    train = write_arrow_set(tmp_path / "cc12m", 2, 3, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 1, 3, timesteps=True, key_prefix="v")
    config = tmp_path / "both.yaml"
    config.write_text(f"datasets:\n  - {{split_name: train, paths: [{train.folder}]}}\n"
                      f"  - {{split_name: val, paths: [{val.folder}]}}\n"
                      f"output: {{output_dir: {tmp_path / 'one'}}}\n")
    assert _ingest("--config", str(config)).returncode == 0
    two = str(tmp_path / "two")
    assert _ingest(str(train.folder), "--output-dir", two).returncode == 0
    assert _ingest(str(val.folder), "--split-part", "val", "--output-dir", two).returncode == 0
    assert _hashes(tmp_path / "two") == _hashes(tmp_path / "one")
    report = validate(two, deep=True)
    assert report.ok, report.problems
    assert {split: s.samples for split, s in info(two).splits.items()} == {"train": 6, "val": 3}


def test_no_finalize_then_finalize_keeps_each_split_in_its_folder(tmp_path):
    train = write_arrow_set(tmp_path / "cc12m", 2, 3, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 1, 3, timesteps=True, key_prefix="v")
    out = str(tmp_path / "out")
    assert _ingest(str(train.folder), "--output-dir", out, "--no-finalize").returncode == 0
    assert _ingest(str(val.folder), "--split-part", "val", "--output-dir", out,
                   "--no-finalize").returncode == 0
    done = subprocess.run([sys.executable, "-m", "shardcook", "finalize", out],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert {split: s.samples for split, s in info(out).splits.items()} == {"train": 6, "val": 3}


def _as_the_first_ingest_wrote_it(out: Path) -> None:
    """Rewrites a finished ingest's manifest and progress markers in the format shardcook's first
    ingest wrote (its own, before ingest ran on the shared engine): the manifest names the
    encoding, the tool and every input, the markers each file's shard, samples and shapes."""
    ours = out / ".shardcook"
    new = json.loads((ours / "manifest.json").read_text())
    inputs = new["source"]["inputs"]
    shards = {}
    for number, entry in enumerate(inputs):
        marker = ours / "progress" / f"{number:06d}.json"
        record = json.loads(marker.read_text())
        shards[record["shard"]] = record["written"]
        marker.write_text(json.dumps({
            "shard": record["shard"], "samples": record["written"],
            "shapes": {"t5_encodings": [512, 4096]}, **entry}))
    (ours / "manifest.json").write_text(json.dumps({
        "encoding": "preencoded_numpy", "tool": "shardcook ingest", "inputs": inputs,
        "shards": shards}))


def test_a_dataset_the_first_ingest_wrote_takes_another_split(tmp_path):
    """A dataset written by the first ingest, whose manifest and markers had ingest's own
    format, gets its val split from a second command: its train shards are kept, not redone,
    and the result is what two commands of this ingest write."""
    train = write_arrow_set(tmp_path / "cc12m", 2, 3, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 1, 3, timesteps=True, key_prefix="v")
    reference, out = tmp_path / "reference", tmp_path / "out"
    for folder in (reference, out):
        assert _ingest(str(train.folder), "--output-dir", str(folder)).returncode == 0
    _as_the_first_ingest_wrote_it(out)
    kept = {p: p.stat().st_mtime_ns for p in (out / "train").glob("*.tar")}
    assert len(kept) == 2
    for folder in (reference, out):
        result = _ingest(str(val.folder), "--split-part", "val", "--output-dir", str(folder))
        assert result.returncode == 0, result.stderr
    assert {p: p.stat().st_mtime_ns for p in (out / "train").glob("*.tar")} == kept
    assert _hashes(out) == _hashes(reference)
    assert validate(out).problems == []


def _array_task(task: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`shardcook ingest ARGS` as task `task` of `sbatch --array=0-1`."""
    return subprocess.run([sys.executable, "-m", "shardcook", "ingest", *args], check=False,
                          capture_output=True, text=True, timeout=300, env=array(task, 0, 1))


def test_status_while_array_tasks_add_a_split_counts_the_new_units(tmp_path):
    """An array task of a later command that adds a split records the run's new input count
    before its work, so `status` meanwhile lists the new units as owed (it called the ledger,
    which already had them, damaged)."""
    train = write_arrow_set(tmp_path / "cc12m", 2, 3, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 2, 3, timesteps=True, key_prefix="v")
    out = str(tmp_path / "out")
    for task in (0, 1):
        assert _array_task(task, str(train.folder), "--output-dir", out).returncode == 0
    first = _array_task(0, str(val.folder), "--split-part", "val", "--output-dir", out)
    assert first.returncode == 0, first.stderr
    status = subprocess.run([sys.executable, "-m", "shardcook", "status", out], check=False,
                            capture_output=True, text=True, timeout=300)
    said = status.stdout + status.stderr
    assert "damaged" not in said and status.returncode == 1, said
    manifest = json.loads((Path(out) / ".shardcook" / "manifest.json").read_text())
    assert manifest["num_inputs"] == 4
    assert _array_task(1, str(val.folder), "--split-part", "val", "--output-dir", out
                       ).returncode == 0
    status = subprocess.run([sys.executable, "-m", "shardcook", "status", out], check=False,
                            capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stdout + status.stderr
