"""`shardcook raw` started by real Slurm, with no torchrun: `srun -n 3`, a job array, and an array
task cancelled, found by `shardcook status` and resubmitted alone. Each writes the bytes of one
process. The jobs are waited for by polling `squeue`, as `sbatch --wait` does, but every 0.1 s
(`sbatch --wait` looks after 2 s, then 8 s, then 32 s)."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from tests.helpers.raw import make_folder, report, shard_hashes

pytestmark = pytest.mark.timeout(120)

OPTIONS = ("--shard-size", "2", "--image-size", "32", "--split", "0.75,0.25,0", "--workers", "1",
           "--quiet")
NV_META = (".info.json", "split.yaml", "dataset.yaml")


@pytest.fixture(scope="module")
def inputs(slurm, tmp_path_factory):
    """12 inputs (6 units, so each of 4 array tasks owns one or two) and the dataset one process
    writes from them."""
    root = tmp_path_factory.mktemp("slurm_runs")
    src = make_folder(root / "in", 12, photos=2)
    one = root / "one"
    subprocess.run(shardcook("raw", "--input-dir", str(src), "--output-dir", str(one), *OPTIONS),
                   env=slurm.env, check=True, capture_output=True, timeout=120)
    assert len(shard_hashes(one)) == 2 * 6
    return src, one


def shardcook(*args: str) -> list[str]:
    return [sys.executable, "-m", "shardcook", *args]


def assert_same_dataset(out, one) -> None:
    assert shard_hashes(out) == shard_hashes(one)
    for name in NV_META:
        assert (out / ".nv-meta" / name).read_bytes() == (one / ".nv-meta" / name).read_bytes()
    for key in ("num_inputs", "num_written", "shards"):
        assert report(out)[key] == report(one)[key]


def raw_script(tmp_path, src, out, *, block_task: str | None = None):
    """A batch script running `shardcook raw`; task `block_task` first sleeps until cancelled,
    unless the file `resubmitted` exists."""
    run = shlex.join(shardcook("raw", "--input-dir", str(src), "--output-dir", str(out),
                               *OPTIONS))
    block = (f'if [ "$SLURM_ARRAY_TASK_ID" = {block_task} ] && '
             f"[ ! -e {tmp_path}/resubmitted ]; then sleep 300; fi\n" if block_task else "")
    script = tmp_path / "raw.sh"
    script.write_text(f"#!/bin/sh\n{block}exec {run}\n")
    return script


def status(slurm, out) -> subprocess.CompletedProcess[str]:
    return subprocess.run(shardcook("status", str(out)), env=slurm.env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_srun_three_tasks_write_one_process_bytes(slurm, inputs, tmp_path):
    src, one = inputs
    out = tmp_path / "out"
    r = slurm.client("srun", "-n", "3", *shardcook("raw", "--input-dir", str(src),
                                                    "--output-dir", str(out), *OPTIONS),
                     check=False, timeout=100)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert_same_dataset(out, one)
    assert report(out)["world_size"] == 3


def test_array_of_four_writes_one_process_bytes(slurm, inputs, tmp_path):
    src, one = inputs
    out = tmp_path / "out"
    job = slurm.sbatch(raw_script(tmp_path, src, out), "--array=0-3",
                       "-o", str(tmp_path / "%a.log"))
    slurm.wait_ended(job, timeout=100)
    logs = "".join((tmp_path / f"{i}.log").read_text() for i in range(4))
    assert [slurm.state(f"{job}_{i}") for i in range(4)] == ["COMPLETED"] * 4, logs
    assert "Traceback" not in logs
    assert_same_dataset(out, one)
    assert status(slurm, out).returncode == 0


def test_a_plain_batch_script_is_one_process(slurm, inputs, tmp_path):
    """`sbatch job.sh` running shardcook itself: its step has SLURM_PROCID=0 and no
    SLURM_NTASKS, and the run is one whole process."""
    src, one = inputs
    out = tmp_path / "out"
    job = slurm.sbatch(raw_script(tmp_path, src, out), "-o", str(tmp_path / "batch.log"))
    slurm.wait_ended(job, timeout=100)
    log = (tmp_path / "batch.log").read_text()
    assert slurm.state(job) == "COMPLETED", log
    assert_same_dataset(out, one)
    assert report(out)["world_size"] == 1


def test_cancelled_array_task_found_and_resubmitted_alone(slurm, inputs, tmp_path):
    src, one = inputs
    out = tmp_path / "out"
    script = raw_script(tmp_path, src, out, block_task="1")
    job = slurm.sbatch(script, "--array=0-3", "-o", str(tmp_path / "%A_%a.log"))
    slurm.wait_for(f"{job}_1", ("RUNNING",))
    slurm.client("scancel", f"{job}_1")
    slurm.wait_ended(job, timeout=100)
    assert [slurm.state(f"{job}_{i}") for i in range(4)] == [
        "COMPLETED", "CANCELLED", "COMPLETED", "COMPLETED"]
    assert not (out / ".nv-meta" / "dataset.yaml").exists()

    missing = status(slurm, out)
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert "--array=1" in missing.stdout
    assert "--array=0" not in missing.stdout

    (tmp_path / "resubmitted").touch()
    again = slurm.sbatch(script, "--array=1", "-o", str(tmp_path / "%A_%a.log"))
    slurm.wait_ended(again, timeout=100)
    assert again != job
    assert slurm.state(f"{again}_1") == "COMPLETED", (tmp_path / f"{again}_1.log").read_text()
    done = status(slurm, out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_same_dataset(out, one)


def test_an_array_index_outside_the_run_fails_in_one_sentence(slurm, inputs, tmp_path):
    """A run `--array=0-3` started, then `sbatch --array=7` of the same script: task 7 has no
    share of the 4-way split; it fails (exit 2) with one sentence and writes nothing, where it
    used to say it was done and end COMPLETED."""
    src, _ = inputs
    out = tmp_path / "out"
    script = raw_script(tmp_path, src, out, block_task="1")
    job = slurm.sbatch(script, "--array=0-3", "-o", str(tmp_path / "%A_%a.log"))
    slurm.wait_for(f"{job}_1", ("RUNNING",))
    slurm.client("scancel", f"{job}_1")
    slurm.wait_ended(job, timeout=100)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    again = slurm.sbatch(script, "--array=7", "-o", str(tmp_path / "%A_%a.log"))
    slurm.wait_ended(again, timeout=100)
    log = (tmp_path / f"{again}_7.log").read_text()
    assert slurm.state(f"{again}_7") == "FAILED", log
    assert log.strip().splitlines() == [
        "error: Array index 7 is not one of this run's: its units were shared out among array "
        "indexes 0..3; resubmit only the indexes `shardcook status` lists."], log
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    assert "--array=1" in status(slurm, out).stdout
