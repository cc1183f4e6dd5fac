"""The test cluster itself, and what real Slurm (22.05, Debian's slurm-wlm) sets in each way a
task is started: the variables `shardcook` reads must match these."""

from __future__ import annotations

import pytest

from tests.helpers.slurm import slurm_vars

pytestmark = pytest.mark.timeout(60)

ENV_SCRIPT = "#!/bin/sh\nenv\n"
ARRAY_VARS = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
              "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP")


def pick(env: dict[str, str], *names: str) -> dict[str, str | None]:
    return {name: env.get(name) for name in names}


def test_srun_three_tasks(slurm, tmp_path):
    slurm.client("srun", "-n", "3", "-o", str(tmp_path / "%t.env"), "env")
    tasks = [slurm_vars(tmp_path / f"{t}.env") for t in range(3)]
    job = tasks[0]["SLURM_JOB_ID"]
    for t, env in enumerate(tasks):
        assert pick(env, "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NPROCS",
                    "SLURM_NODEID", "SLURM_NNODES", "SLURM_JOB_ID", "SLURM_JOB_NODELIST",
                    "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", *ARRAY_VARS) == {
            "SLURM_PROCID": str(t), "SLURM_LOCALID": str(t), "SLURM_NTASKS": "3",
            "SLURM_NPROCS": "3", "SLURM_NODEID": "0", "SLURM_NNODES": "1",
            "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": slurm.node, "SLURM_STEP_ID": "0",
            "SLURM_STEP_NUM_TASKS": "3", **dict.fromkeys(ARRAY_VARS)}


def test_array_of_four_runs_at_once(slurm, tmp_path):
    """Every task of `--array=0-3` runs its batch script once, all four at the same time (each
    waits for the others to start); the batch step has SLURM_PROCID=0 but no SLURM_NTASKS unless
    the job asks for tasks."""
    script = tmp_path / "env.sh"
    script.write_text(f"{ENV_SCRIPT}touch {tmp_path}/started.$SLURM_ARRAY_TASK_ID\n"
                      f"for _ in $(seq 200); do [ $(ls {tmp_path}/started.* | wc -l) = 4 ] && "
                      "exit 0; sleep 0.1; done; exit 1\n")
    job = slurm.sbatch(script, "--array=0-3", "-o", str(tmp_path / "%a.env"))
    slurm.wait_ended(job)
    tasks = [slurm_vars(tmp_path / f"{i}.env") for i in range(4)]
    for i, env in enumerate(tasks):
        assert pick(env, *ARRAY_VARS, "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
                    "SLURM_NNODES", "SLURM_NTASKS", "SLURM_NPROCS") == {
            "SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": str(i),
            "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_STEP": "1", "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1",
            "SLURM_NTASKS": None, "SLURM_NPROCS": None}
    # each task is a job of its own; one of them has the array's id as its job id
    job_ids = {env["SLURM_JOB_ID"] for env in tasks}
    assert len(job_ids) == 4
    assert job in job_ids
    assert [slurm.state(f"{job}_{i}") for i in range(4)] == ["COMPLETED"] * 4


def test_array_indexes_need_not_start_at_zero(slurm, tmp_path):
    """`--array=5,7 --ntasks=1`: COUNT is the number of tasks, MIN and MAX the indexes, and the
    batch step has SLURM_NTASKS=1 as well."""
    script = tmp_path / "env.sh"
    script.write_text(ENV_SCRIPT)
    job = slurm.sbatch(script, "--array=5,7", "--ntasks=1", "-o", str(tmp_path / "%a.env"))
    slurm.wait_ended(job)
    for i in (5, 7):
        assert pick(slurm_vars(tmp_path / f"{i}.env"), *ARRAY_VARS, "SLURM_PROCID",
                    "SLURM_NTASKS", "SLURM_NPROCS") == {
            "SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": str(i),
            "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "5",
            "SLURM_ARRAY_TASK_MAX": "7", "SLURM_ARRAY_TASK_STEP": "1", "SLURM_PROCID": "0",
            "SLURM_NTASKS": "1", "SLURM_NPROCS": "1"}


def test_cancelled_task_and_its_resubmission(slurm, tmp_path):
    """Task 1 blocks until cancelled; `scontrol` reports it CANCELLED and the others COMPLETED.
    Resubmitted alone as `--array=1`, it is a new array of one task."""
    script = tmp_path / "env.sh"
    script.write_text(f'#!/bin/sh\nenv\nif [ "$SLURM_ARRAY_TASK_ID" = 1 ] && '
                      f'[ ! -e {tmp_path}/resubmitted ]; then sleep 300; fi\n')
    job = slurm.sbatch(script, "--array=0-3", "-o", str(tmp_path / "%A_%a.env"))
    slurm.wait_for(f"{job}_1", ("RUNNING",))
    slurm.client("scancel", f"{job}_1")
    slurm.wait_ended(job)
    assert {i: slurm.state(f"{job}_{i}") for i in range(4)} == {
        0: "COMPLETED", 1: "CANCELLED", 2: "COMPLETED", 3: "COMPLETED"}

    (tmp_path / "resubmitted").touch()
    again = slurm.sbatch(script, "--array=1", "--wait", "-o", str(tmp_path / "%A_%a.env"))
    assert again != job
    assert slurm.state(f"{again}_1") == "COMPLETED"
    env = slurm_vars(tmp_path / f"{again}_1.env")
    assert pick(env, *ARRAY_VARS, "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS") == {
        "SLURM_ARRAY_JOB_ID": again, "SLURM_ARRAY_TASK_ID": "1",
        "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "1",
        "SLURM_ARRAY_TASK_MAX": "1", "SLURM_ARRAY_TASK_STEP": "1", "SLURM_JOB_ID": again,
        "SLURM_PROCID": "0", "SLURM_NTASKS": None}
