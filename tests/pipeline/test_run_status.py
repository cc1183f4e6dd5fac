"""`shardcook status`, the ledger and `--overwrite` on what runs leave behind: a run's records
that are damaged, a finalize killed half-way, array tasks that have no share of the run, and
folders left by earlier runs or by none. Real `shardcook raw` runs (array tasks given Slurm's
variables by hand), real finalizes killed with SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.encode import run_in_process
from tests.helpers.files import tree_state
from tests.helpers.raw import make_folder, run_cli

INPUTS, SHARD = 14, 2  # 7 units
LEDGER = Path(".shardcook") / "ledger.json"


def _args(src: Path, out: Path, *extra: str, size: str = "32") -> list[str]:
    return ["raw", "--input-dir", str(src), "--output-dir", str(out), "--shard-size",
            str(SHARD), "--image-size", size, "--workers", "1", "--quiet", *extra]


def _env(**slurm: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({k: str(v) for k, v in slurm.items()})
    return env


def _array(task: int, first: int, last: int, count: int | None = None) -> dict[str, str]:
    """Array task `task` of `sbatch --array=first-last` (`count` less than the span: gaps)."""
    return _env(SLURM_ARRAY_JOB_ID=90, SLURM_ARRAY_TASK_ID=task,
                SLURM_ARRAY_TASK_COUNT=count or last - first + 1, SLURM_ARRAY_TASK_MIN=first,
                SLURM_ARRAY_TASK_MAX=last, SLURM_JOB_ID=91 + task, SLURM_NTASKS=1,
                SLURM_PROCID=0)


def _shardcook(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardcook", *args], env=env, text=True,
                          capture_output=True, timeout=300, check=False)


def _refused(r, expect: int = 2) -> str:
    """The one line a refusal prints (no traceback)."""
    output = r.output if hasattr(r, "output") else r.stderr
    code = r.exit_code if hasattr(r, "exit_code") else r.returncode
    assert code == expect and "Traceback" not in output, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


def _killed_in_finalize(args: list[str]) -> None:
    """Runs `shardcook ARGS` in a process SIGKILLed where finalize, having written the index
    and `.shardcook/finalize.json`, would write dataset.yaml."""
    kill = ("import os, signal, sys\n"
            "from shardcook.dataset import metadata\n"
            "metadata.write_dataset_yaml = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
            "from shardcook.cli import main\n"
            f"sys.argv = ['shardcook', *{args!r}]\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", kill], env=_env(), capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == -9, r.stderr


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("status") / "in", INPUTS, photos=0)


@pytest.fixture(scope="module")
def done(src, tmp_path_factory):
    """A finished, finalized run (copied by the tests that change it)."""
    out = tmp_path_factory.mktemp("status_done") / "out"
    run_cli(*_args(src, out))
    return out


def _copy(done: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(done, out)
    return out


def test_a_finalize_killed_between_its_records_is_not_complete(src, tmp_path):
    """A run whose finalize is killed after `.shardcook/finalize.json` but before dataset.yaml:
    status says it is not finalized and to rerun (exit 1, not the "complete" that sbatch
    scripts trust), and the same command then finishes it."""
    out = tmp_path / "out"
    _killed_in_finalize(_args(src, out))
    assert (out / ".shardcook" / "finalize.json").is_file()
    assert not (out / ".nv-meta" / "dataset.yaml").exists()
    assert list(out.glob(".shardcook-undo-*"))
    r = run_in_process(["status", str(out)], expect=1)
    assert "not finalized (a finalize was interrupted: .shardcook-undo-" in r.output
    assert "rerun the same command" in r.output
    assert json.loads(run_in_process(["status", str(out), "--json"], expect=1).output)[
        "complete"] is False
    run_cli(*_args(src, out))
    assert "complete." in run_in_process(["status", str(out)]).output
    assert run_cli("validate", str(out)).returncode == 0


@pytest.mark.parametrize("gone", [".nv-meta/dataset.yaml", ".nv-meta/.info.json",
                                  ".nv-meta/split.yaml", ".shardcook/finalize.json"])
def test_a_finalized_run_missing_its_metadata_is_not_complete(done, tmp_path, gone):
    out = _copy(done, tmp_path)
    (out / gone).unlink()
    r = run_in_process(["status", str(out)], expect=1)
    assert f"not finalized ({gone} is missing)" in r.output


def test_a_ledger_claiming_more_units_than_inputs_is_damaged(done, tmp_path):
    """10**9 units in a run of 14 inputs: one sentence (no MemoryError), exit 2. Run with its
    memory capped, so a status that lists them fails alone."""
    import resource

    out = _copy(done, tmp_path)
    (out / LEDGER).write_text(json.dumps(
        {"workers": 1, "units": 10**9, "launcher": "one", "first": None}))
    cap = 4 << 30
    r = subprocess.run([sys.executable, "-m", "shardcook", "status", str(out)], env=_env(),
                       capture_output=True, text=True, timeout=300, check=False,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    line = _refused(r)
    assert "ledger.json is damaged: it records 1000000000 units, but the run's manifest.json " \
           "records 14 inputs" in line


@pytest.mark.parametrize("ledger", [
    '{"workers": 4, "units": 7, "launcher": "array", "first": -2}',
    '{"workers": 4, "units": 7, "launcher": "array", "first": null}',
    '{"workers": 4, "units": 7, "launcher": "srun", "first": 3}',
    '{"workers": 0, "units": 7, "launcher": "one", "first": null}',
    '{"workers": true, "units": 7, "launcher": "one", "first": null}',
    '{"workers": 1, "units": 7, "launcher": "mpirun", "first": null}',
    '{"workers": 1, "units": -1, "launcher": "one", "first": null}',
    '{"workers": 1, "units": 7, "launch',
])
def test_a_damaged_ledger_is_refused_with_advice_that_loses_nothing(done, src, tmp_path,
                                                                     ledger):
    """A ledger out of range (a negative first index, whose status would say
    `sbatch --array=-2`) or unreadable: status and the run refuse it, advising to remove it
    (not --overwrite, which deletes every finished unit); removed, the run's command completes
    the run, keeping the units already done."""
    out = _copy(done, tmp_path)
    (out / ".shardcook" / "progress" / "000006.json").unlink()  # one unit left to do
    (out / LEDGER).write_text(ledger)
    for line in (_refused(run_in_process(["status", str(out)], expect=2)),
                 _refused(_shardcook(_args(src, out), _env()))):
        assert "ledger.json is damaged" in line and "remove it and rerun" in line
        assert "--overwrite" not in line and "--array=-" not in line
    (out / LEDGER).unlink()
    run_cli(*_args(src, out))
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert report["units"]["resumed"] == 6
    assert "complete." in run_in_process(["status", str(out)]).output


@pytest.mark.parametrize("where", ["folder", "bucket"])
def test_status_of_a_file_or_a_missing_folder(tmp_path, s3_store, where):
    """Each in one sentence naming what status takes, not a traceback nor --output-dir; in a
    bucket, an object named as the folder is a file, and a URL with no object under it is
    missing."""
    (tmp_path / "file").write_text("x")
    s3_store.put("file", b"x")
    s3_store.put("other/x", b"x")  # the bucket is there, the run is not
    file, none = ((str(tmp_path / "file"), str(tmp_path / "none")) if where == "folder" else
                  (s3_store.url("file"), s3_store.url("none")))
    line = _refused(run_in_process(["status", file], expect=2))
    assert line == (f"error: The run's output folder {file!r} is a file, "
                    "not a folder; name the folder a run wrote.")
    line = _refused(run_in_process(["status", none], expect=2))
    assert line == (f"error: The run's output folder {none!r} does not "
                    "exist; name the folder a run wrote.")
    for url in ("s3://", "ftp://host/x"):
        line = _refused(run_in_process(["status", url], expect=2))
        assert line.startswith("error: The run's output folder ") and "--output-dir" not in line


def test_an_array_index_outside_the_run_is_refused(src, tmp_path):
    """A run that `sbatch --array=0-3` started, then `--array=7`: task 7 has no share of the
    4-way split, so it is refused in one sentence, exit 2, writing nothing (it said "is done",
    exit 0, having done nothing)."""
    out = tmp_path / "out"
    assert _shardcook(_args(src, out), _array(1, 0, 3)).returncode == 0
    before = tree_state(out)
    line = _refused(_shardcook(_args(src, out), _array(7, 7, 7)))
    assert "Array index 7 is not one of this run's" in line and "0..3" in line
    assert tree_state(out) == before


@pytest.mark.parametrize("exists", [False, True])
def test_an_array_with_gaps_leaves_nothing(src, tmp_path, exists):
    """`--array=0,5` starting a run is refused before any work: no manifest, lock or
    progress/ is left, in a new folder or an empty one."""
    out = tmp_path / "out"
    if exists:
        out.mkdir()
    line = _refused(_shardcook(_args(src, out), _array(0, 0, 5, count=2)))
    assert "with gaps" in line
    assert (sorted(out.iterdir()) == []) if exists else not out.exists()


def test_a_first_overwrite_says_nothing_was_deleted(src, tmp_path):
    """`--overwrite` into a new folder (as `shardcook demo` runs each part) deleted nothing,
    so it says nothing: it used to say it deleted `.shardcook/`, its own lock."""
    r = run_cli(*_args(src, tmp_path / "out", "--overwrite"))
    assert "--overwrite" not in r.stderr, r.stderr
    r = run_cli("demo", "--output-dir", str(tmp_path / "demo"))
    assert "--overwrite" not in r.stderr + r.stdout


def test_overwrite_removes_an_interrupted_finalizes_undo_folder(done, src, tmp_path):
    """A finalize killed half-way leaves an undo folder holding the earlier run's `.tar.idx`
    and metadata; `--overwrite` deletes it with the rest of that run, so the new run's
    finalize has nothing of the old one to put back: its `.tar.idx` are those a fresh run of
    the new options writes."""
    out = _copy(done, tmp_path)
    _killed_in_finalize(["finalize", "--force", str(out)])
    assert list(out.glob(".shardcook-undo-*"))
    r = run_cli(*_args(src, out, "--overwrite", "--no-finalize", size="48"))
    assert "kept" not in r.stderr, r.stderr
    assert not list(out.glob(".shardcook-undo-*"))
    run_cli("finalize", str(out))
    fresh = tmp_path / "fresh"
    run_cli(*_args(src, fresh, size="48"))
    assert {p.name: p.read_bytes() for p in out.glob("*.tar.idx")} == {
        p.name: p.read_bytes() for p in fresh.glob("*.tar.idx")}
    assert run_cli("validate", str(out)).returncode == 0
