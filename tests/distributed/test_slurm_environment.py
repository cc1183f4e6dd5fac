"""Where a process stands, read from its launcher's variables (`workers.where`): torchrun's
first, then srun's, then a job array's (whose variables win over the batch step's
SLURM_NTASKS=1); a plain batch script's step is one process; each half-set or contradictory
environment one sentence; a worker's GPU from LOCAL_RANK, else SLURM_LOCALID, and the workers
sharing its machine from LOCAL_WORLD_SIZE, read there only; workers without a process group
sharing the output folder's lock with each other and with nothing else; the ledger's shares for
each launch."""

from __future__ import annotations

import os

import pytest
from shardcook.errors import ConfigError
from shardcook.pipeline.ledger import Split, ranges, units_for
from shardcook.pipeline.plan import plan_units
from shardcook.runtime.workers import Place, where

ARRAY = {"SLURM_ARRAY_JOB_ID": "90", "SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_COUNT": "4",
         "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_MAX": "8"}
SRUN = {"SLURM_PROCID": "2", "SLURM_NTASKS": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
        "SLURM_NNODES": "2", "SLURM_JOB_ID": "70", "SLURM_JOB_NODELIST": "node[1-2]"}


@pytest.fixture
def env(monkeypatch):
    """Sets exactly the given launcher variables."""
    for name in os.environ:
        if name.startswith("SLURM_") or name in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                 "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                                 "MASTER_PORT"):
            monkeypatch.delenv(name)

    def set_(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_


def test_each_launcher_is_read(env):
    assert where() == Place()
    env(SLURM_PROCID="0", SLURM_JOB_ID="71", SLURM_LOCALID="0")  # a plain batch script's step
    assert where() == Place()
    env(**SRUN)
    assert where() == Place("srun", 2, 3, 1, job="70")
    env(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    assert where().collective
    env(**ARRAY, SLURM_NTASKS="1", SLURM_PROCID="0")  # an array's batch step: the array wins
    assert where() == Place("array", 1, 4, 1, job="90", task=6, first=5, last=8)
    env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")  # torchrun's come first
    assert where() == Place("torchrun", 1, 2, 1, collective=True)


@pytest.mark.parametrize("values, message", [
    ({"SLURM_PROCID": "1"}, "srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID together, but "
                            "SLURM_NTASKS, SLURM_JOB_ID are missing"),
    ({"SLURM_NTASKS": "3"}, "srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID together, but "
                            "SLURM_PROCID, SLURM_JOB_ID are missing"),
    ({**SRUN, "SLURM_PROCID": "3"}, "SLURM_PROCID=3 must be below SLURM_NTASKS=3"),
    ({**SRUN, "SLURM_NODEID": "2"}, "SLURM_NODEID=2 and SLURM_NNODES=2 do not fit"),
    ({**SRUN, "SLURM_NNODES": ""}, "SLURM_NNODES is missing"),
    ({**SRUN, "SLURM_LOCALID": "3"}, "SLURM_LOCALID=3 cannot exceed SLURM_PROCID=2"),
    ({**SRUN, "SLURM_NTASKS": "x"}, "SLURM_NTASKS='x' is not an integer"),
    ({**SRUN, "MASTER_ADDR": "127.0.0.1"}, "MASTER_ADDR is set without MASTER_PORT"),
    ({**SRUN, "LOCAL_RANK": "-1"}, "LOCAL_RANK=-1 must be 0 or more"),
    ({"LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE=0 must be at least 1"),
    ({"SLURM_ARRAY_TASK_ID": "1"}, "SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_COUNT, "
                                   "SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_MAX are missing"),
    ({**ARRAY, "SLURM_ARRAY_TASK_ID": "9"}, "SLURM_ARRAY_TASK_ID=9 lies outside"),
    ({**ARRAY, "SLURM_ARRAY_TASK_COUNT": "5"}, "SLURM_ARRAY_TASK_COUNT=5 is more than"),
    ({**ARRAY, "SLURM_ARRAY_TASK_COUNT": "0"}, "SLURM_ARRAY_TASK_COUNT=0 must be at least 1"),
])
def test_a_half_set_or_contradictory_environment_is_one_sentence(env, values, message):
    env(**values)
    with pytest.raises(ConfigError, match=r"^[^\n]+$") as caught:
        where()
    assert message in str(caught.value)


def test_a_workers_gpu_is_slurm_localid_without_local_rank(env):
    env(**SRUN)
    assert (where().local_rank, where().local_count) == (1, 1)
    env(LOCAL_RANK="0", LOCAL_WORLD_SIZE="4")  # torchrun's, where they are set
    assert (where().local_rank, where().local_count) == (0, 4)


def test_shares_of_each_launch():
    """Unit u belongs to share u % N of the split the run started with; an array task of an
    array-started run takes its own index's share, any other launch of M workers splits the
    shares among them."""
    units = plan_units(10, 1)
    array_split = Split(4, 10, "array", first=5)

    def taken(place: Place, split: Split) -> list[int]:
        return [u.unit for u in units_for(units, place, split)]

    resubmitted = Place("array", 0, 1, job="91", task=6, first=6, last=6)
    assert taken(resubmitted, array_split) == [1, 5, 9]
    assert taken(Place("array", 3, 4, job="90", task=8, first=5, last=8), array_split) == [3, 7]
    assert taken(Place("srun", 1, 2, job="7"), array_split) == [1, 3, 5, 7, 9]
    assert taken(Place(), array_split) == list(range(10))
    srun_split = Split(3, 10, "srun")
    assert taken(Place("array", 1, 2, task=1, first=0, last=1), srun_split) == [1, 4, 7]
    with pytest.raises(ConfigError, match="with gaps"):
        taken(Place("array", 0, 2, task=1, first=1, last=3), srun_split)
    assert ranges([7, 1, 5, 6]) == "1,5-7" and ranges([0, 1, 2]) == "0-2"
    assert array_split.owners([1, 5]) == "array index 6"
    assert srun_split.owners([0, 2]) == "srun tasks 0, 2"


def test_workers_share_the_folder_with_each_other_and_nothing_else(tmp_path):
    """Locally: workers hold a shared flock, a run alone an exclusive one; each refuses the
    other in one sentence, and workers never remove the lock file."""
    from shardcook.output.lock import Holder

    from tests.helpers.runfolder import local_run_folder

    out = tmp_path / "out"
    first, second, alone = (local_run_folder(out) for _ in range(3))
    first.share(Holder.this_run())
    second.share(Holder.this_run())
    alone.check_access()  # nobody holds it alone
    with pytest.raises(ConfigError, match="in use by the workers of a run started without a "
                                          "process group"):
        alone.lock(Holder.this_run())
    first.close()
    second.close()
    me = Holder.this_run()
    alone.lock(me)
    with pytest.raises(ConfigError, match=f"in use by run {me.run_id}"):
        local_run_folder(out).share(Holder.this_run())
    alone.close()


@pytest.mark.parametrize("values", [SRUN, ARRAY])
def test_nproc_per_node_in_a_slurm_worker_is_one_sentence(env, tmp_path, values):
    """Each srun or array task would start a torchrun of its own that takes every unit."""
    from tests.helpers.dataset import cli, one_error_line

    env(**values)
    r = cli("--nproc-per-node", "2", "raw", "--input-dir", tmp_path, "--output-dir",
            tmp_path / "out")
    assert r.code == 2 and "--nproc-per-node starts a torchrun of its own" in one_error_line(r)
    assert not (tmp_path / "out").exists()
