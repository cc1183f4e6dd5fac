"""Workers started by Slurm without torchrun: `srun` tasks and job array tasks, each a real
`shardcook raw` process given the variables Slurm sets (by hand here), with no process group.
Each does its share of the ledger's split, the one that finds every unit recorded finalizes
once, `shardcook status` names what is missing and whose it was, and any launch completes a
run another started: every file of shards and `.nv-meta` equal to one process's, locally and in
a bucket on the local S3 server."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from shardcook.pipeline.ledger import run_status

from tests.helpers.raw import make_folder
from tests.helpers.s3server import free_port
from tests.helpers.slurm import array, launch_env

INPUTS, SHARD = 14, 2  # 7 units
SQLITE = ".nv-meta/index.sqlite"


def srun(task: int, tasks: int, job: int = 70) -> dict[str, str]:
    return launch_env(SLURM_PROCID=task, SLURM_NTASKS=tasks, SLURM_LOCALID=task,
                      SLURM_NODEID=0, SLURM_NNODES=1, SLURM_JOB_ID=job,
                      SLURM_JOB_NODELIST="localhost")


def _args(src: Path, out: str, *extra: str, size: str = "32") -> list[str]:
    return ["raw", "--input-dir", str(src), "--output-dir", out, "--shard-size", str(SHARD),
            "--image-size", size, "--workers", "1", "--quiet", *extra]


TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")


def workers(args: list[str], envs: list[dict[str, str]], launcher: tuple[str, ...] = ()
            ) -> list[subprocess.CompletedProcess]:
    """`shardcook ARGS` once per environment (under `python LAUNCHER`), all at once; each
    must exit 0."""
    procs = [subprocess.Popen([sys.executable, *launcher, "-m", "shardcook", *args], env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for env in envs]
    done = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    for r in done:
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return done


def status(out: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardcook", "status", out, *extra],
                          env=launch_env(), capture_output=True, text=True, timeout=60, check=False)


def files(root: Path) -> dict[str, str]:
    """sha256 of every shard, `.tar.idx` and `.nv-meta` file (index.uuid is new per finalize)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".shardcook" not in p.parts
            and p.name != "index.uuid"}


def rows(sqlite: Path) -> dict[str, list]:
    """Every row of every table of an index.sqlite, in order."""
    import sqlite3

    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as db:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(map(repr, db.execute(f"SELECT * FROM {t}"))) for t in sorted(tables)}


def records(root: Path) -> tuple[dict, dict]:
    """manifest and report, less what differs between runs that made the same dataset."""
    manifest = json.loads((root / ".shardcook" / "manifest.json").read_text())
    manifest["config"]["output"].pop("output_dir")
    report = json.loads((root / ".shardcook" / "report.json").read_text())
    for key in ("wall_seconds", "stage_seconds", "inputs_per_second", "inputs_this_run",
                "units", "world_size"):
        report.pop(key)
    return manifest, report


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("slurm") / "in", INPUTS, photos=0)


@pytest.fixture(scope="module")
def reference(src, tmp_path_factory):
    """The dataset one process writes alone."""
    ref = tmp_path_factory.mktemp("slurm_ref") / "ref"
    workers(_args(src, str(ref)), [launch_env()])
    return ref


def assert_same(out: Path, reference: Path) -> None:
    assert files(out) == files(reference)
    assert len([n for n in files(out) if n.endswith(".tar")]) == 7
    assert records(out) == records(reference)
    assert run_status(str(out)).complete


def test_srun_tasks_alone_and_together_equal_one_process(src, reference, tmp_path):
    """`srun -n 3` without MASTER_ADDR/PORT: three tasks at once, no process group (nothing
    waits for one), one finalizes; report.json says 3 workers; each task that left units to the
    others says so in one line, even with --quiet."""
    out = tmp_path / "out"
    done = workers(_args(src, str(out)), [srun(t, 3) for t in range(3)])
    assert_same(out, reference)
    assert json.loads((out / ".shardcook" / "report.json").read_text())["world_size"] == 3
    assert json.loads((out / ".shardcook" / "ledger.json").read_text()) == {
        "workers": 3, "units": 7, "launcher": "srun", "first": None}
    claim = json.loads(next((out / ".shardcook").glob("finalizing-*.json")).read_text())
    finisher = int(claim["worker"].split()[2])
    for task, r in enumerate(done):
        lines = r.stderr.splitlines()
        assert len(lines) <= 1, r.stderr
        if task != finisher:  # done before the others, or found the finisher at work
            assert lines and lines[0].startswith(f"shardcook: srun task {task} of 3 is done; ")


def test_array_out_of_order_then_status_then_only_the_missing_indexes(src, reference, tmp_path):
    """`sbatch --array=1-4` whose tasks 4 and 2 ran, alone and in that order, and 1 and 3
    never did: status lists the missing units by array index (exit 1, and as JSON) and prints
    the --array= list; resubmitted as that list (a new array job of two tasks whose indexes
    have a gap), running at once, they take indexes 1's and 3's shares of the 4-way split."""
    out = tmp_path / "out"
    for task, left in ((4, "6 of 7 units remain, owed to array indexes 1, 2, 3 ("),
                       (2, "4 of 7 units remain, owed to array indexes 1, 3 (")):
        (r,) = workers(_args(src, str(out)), [array(task, 1, 4)])
        assert f"shardcook: array task {task} of job 90 is done; {left}" in r.stderr
    r = status(str(out))
    assert r.returncode == 1, r.stderr
    assert "array index 1: units 0,4" in r.stdout and "array index 3: units 2,6" in r.stdout
    assert "sbatch --array=1,3 " in r.stdout
    found = json.loads(status(str(out), "--json").stdout)
    assert found["resubmit"] == "--array=1,3" and found["complete"] is False
    assert [(m["unit"], m["worker"]) for m in found["missing"]] == [(0, 1), (2, 3), (4, 1),
                                                                      (6, 3)]
    workers(_args(src, str(out)), [array(t, 1, 3, count=2, job=400) for t in (1, 3)])
    assert_same(out, reference)
    claim = json.loads(next((out / ".shardcook").glob("finalizing-*.json")).read_text())
    assert claim["worker"] in ("array task 1 of job 400", "array task 3 of job 400")


@pytest.mark.parametrize("resume", ["two srun tasks", "one process", "an array of two",
                                    "two torchrun ranks"])
def test_another_number_of_workers_completes_a_run(src, reference, tmp_path, resume):
    """A run that 3 srun tasks started, of which only task 1 ran (the others killed before
    their first unit), completes with 2 tasks, 1 process, a 2-task array or 2 torchrun ranks:
    the ledger keeps the 3-way split, the new workers share out its shares."""
    out = tmp_path / "out"
    workers(_args(src, str(out)), [srun(1, 3)])
    listed = status(str(out)).stdout
    assert "srun task 0: units 0,3,6" in listed and "srun task 2: units 2,5" in listed
    envs = {"two srun tasks": [srun(t, 2, job=71) for t in range(2)],
            "one process": [launch_env()], "two torchrun ranks": [launch_env()],
            "an array of two": [array(t, 0, 1) for t in range(2)]}[resume]
    workers(_args(src, str(out)), envs, TORCHRUN if resume == "two torchrun ranks" else ())
    assert_same(out, reference)
    assert json.loads((out / ".shardcook" / "ledger.json").read_text())["workers"] == 3


def test_srun_tasks_given_master_addr_form_a_process_group(src, reference, tmp_path):
    """srun's tasks with MASTER_ADDR and MASTER_PORT join a process group: rank 0 finalizes
    after gathering, as under torchrun."""
    out = tmp_path / "out"
    port = free_port()
    envs = [dict(srun(t, 2), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)) for t in range(2)]
    done = workers(_args(src, str(out)), envs)
    assert_same(out, reference)
    assert not list((out / ".shardcook").glob("finalizing-*.json"))
    assert all(r.stderr == "" for r in done)
    assert json.loads((out / ".shardcook" / "report.json").read_text())["world_size"] == 2


def test_a_half_set_environment_stops_before_any_work(src, tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "shardcook", *_args(src, str(out))],
                       env=launch_env(SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_JOB_ID=5),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert ("SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_MAX are missing"
            in r.stderr)
    assert not out.exists()


def test_a_worker_of_another_run_is_refused_however_they_start(src, tmp_path):
    """Two array tasks started at once into a new folder with different options: the first
    manifest is created once, and the task of the other run is refused before any work, in one
    sentence, whatever its job id."""
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-m", "shardcook",
                               *_args(src, str(out), size=size)],
                              env=array(t, 0, 1, job=job), text=True, stderr=subprocess.PIPE)
             for t, size, job in ((0, "32", 90), (1, "48", 91))]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], errs
    refused = next(e for p, e in zip(procs, errs, strict=True) if p.returncode == 2)
    assert refused.count("\n") == 1 and "holds a run made with different options" in refused


def test_workers_in_a_bucket_without_a_shared_folder(src, reference, s3_store, tmp_path):
    """The same in a bucket on the local S3 server (each worker stages in a folder of its own):
    a 3-task array's tasks 0 and 2 run at once, status reads the bucket, task 1 resubmitted
    alone (a new array job of one task) completes it; the objects equal one process's files."""
    url = s3_store.url("data/set")
    workers([*_args(src, url), "--scratch-dir", str(tmp_path / "scratch")],
            [dict(array(t, 0, 2), **s3_store.env) for t in (0, 2)])
    r = subprocess.run([sys.executable, "-m", "shardcook", "status", url],
                       env=dict(launch_env(), **s3_store.env), capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 1 and "--array=1" in r.stdout, r.stdout + r.stderr
    workers([*_args(src, url), "--scratch-dir", str(tmp_path / "scratch")],
            [dict(array(1, 1, 1, job=500), **s3_store.env)])
    got = {k.removeprefix("data/set/"): s3_store.get(k) for k in s3_store.keys("data/set/")}
    want = files(reference)
    # index.sqlite is built from the shards' recorded rows in a bucket: its rows are the same
    assert {k: hashlib.sha256(got[k]).hexdigest() for k in want if k != SQLITE} == {
        k: v for k, v in want.items() if k != SQLITE}
    (tmp_path / "got.sqlite").write_bytes(got[SQLITE])
    assert rows(tmp_path / "got.sqlite") == rows(reference / SQLITE)
    assert json.loads(s3_store.get("data/set/.shardcook/ledger.json"))["launcher"] == "array"
    assert not [k for k in got if k.startswith(".shardcook/workers/")]  # leases given up


def test_exactly_one_create_wins_locally_and_in_a_bucket(s3_store, tmp_path):
    """The finalize claim's atomic create: of 8 threads creating one name at once, one gets
    True, locally (a hard link) and in the bucket (a conditional PUT, and the read-back scheme
    of a store without one)."""
    from shardcook.storage.bucket import remote
    from shardcook.storage.local import LocalStore

    bucket = remote(s3_store.url("claims"), "--output-dir")
    makers = {"local": lambda i: LocalStore(tmp_path).create("c/claim.json", f"{i}"),
              "bucket": lambda i: bucket.create("claim.json", f"{i}"),
              "read back": lambda i: bucket._create_by_reading_back("other.json", b"%d" % i)}
    for name, make in makers.items():
        won: list[int] = []
        errors: list[BaseException] = []
        start = threading.Barrier(8)

        def one(i: int, make=make, won=won, errors=errors, start=start) -> None:
            start.wait()
            try:
                if make(i):
                    won.append(i)
            except BaseException as e:  # noqa: BLE001 - the test reports it
                errors.append(e)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(won) == 1, (name, won, errors)
