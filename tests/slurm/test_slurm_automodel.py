"""`encode --layout automodel` started by real Slurm, with no torchrun: `srun -n 2` and a job
array of two each write NeMo AutoModel's cache one process writes, byte for byte, its metadata
files included (each run writes into the same folder, so its entries name the same paths)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

import pytest

from tests.helpers.automodel import SIZES, THREADS, cache_hashes, encode_args, make_inputs
from tests.helpers.raw import report

pytestmark = pytest.mark.timeout(300)

SEED = 5
#: Two inputs a unit: four units for two tasks.
OPTIONS = ("--shard-size", "2")


def shardcook(*args: str) -> list[str]:
    # bf16 CPU kernels round by the thread count: every process in one thread
    return ["env", f"OMP_NUM_THREADS={THREADS}", sys.executable, "-m", "shardcook", *args]


@pytest.fixture(scope="module")
def flux_run(slurm, tiny_flux, tmp_path_factory):
    """The command writing `base/out`, and the cache one process writes with it (moved to
    `base/one`)."""
    base = tmp_path_factory.mktemp("slurm_automodel")
    make_inputs(base / "in")
    args = encode_args("flux", base / "in", base / "out", tiny_flux, SEED, *OPTIONS)
    subprocess.run(shardcook(*args), env=slurm.env, check=True, capture_output=True,
                   timeout=300)
    return base, args, (base / "out").rename(base / "one")


@pytest.fixture
def out(flux_run):
    base, _, _ = flux_run
    yield base / "out"
    shutil.rmtree(base / "out", ignore_errors=True)


def assert_one_process_cache(out, one) -> None:
    ours = cache_hashes(out)
    assert sum(name.endswith(".pt") for name in ours) == len(SIZES)
    assert {"metadata.json", "metadata_shard_0000.json"} <= set(ours)
    assert ours == cache_hashes(one)


def test_srun_two_tasks_write_one_process_cache(slurm, flux_run, out):
    _, args, one = flux_run
    r = slurm.client("srun", "-n", "2", *shardcook(*args), check=False, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert report(out)["world_size"] == 2
    assert_one_process_cache(out, one)


def test_array_of_two_writes_one_process_cache(slurm, flux_run, out, tmp_path):
    _, args, one = flux_run
    script = tmp_path / "encode.sh"
    script.write_text(f"#!/bin/sh\nexec {shlex.join(shardcook(*args))}\n")
    job = slurm.sbatch(script, "--array=0-1", "-o", str(tmp_path / "%a.log"))
    slurm.wait_ended(job, timeout=280)
    logs = "".join((tmp_path / f"{i}.log").read_text() for i in range(2))
    assert [slurm.state(f"{job}_{i}") for i in range(2)] == ["COMPLETED"] * 2, logs
    assert "Traceback" not in logs
    assert_one_process_cache(out, one)
    status = subprocess.run(shardcook("status", str(out)), env=slurm.env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert status.returncode == 0, status.stdout + status.stderr
