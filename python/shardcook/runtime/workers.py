"""Where this process stands among a run's workers, read from its launcher's environment before
any work: torchrun's variables first (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), else `srun`'s
(`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_NNODES`,
`SLURM_JOB_ID`), else a Slurm job array's (`SLURM_ARRAY_JOB_ID`, `SLURM_ARRAY_TASK_ID`,
`SLURM_ARRAY_TASK_COUNT`, `SLURM_ARRAY_TASK_MIN`/`_MAX`), else one process alone; its GPU on its
machine is torchrun's `LOCAL_RANK` wherever that is set, else srun's `SLURM_LOCALID`, and the
workers sharing the machine torchrun's `LOCAL_WORLD_SIZE` (1 without it). An array's
batch step also has `SLURM_PROCID=0` (and `SLURM_NTASKS=1` with `--ntasks=1`): the array's
variables win over them. A plain batch script's step (`sbatch job.sh` running shardcook itself)
has `SLURM_PROCID=0` and no `SLURM_NTASKS`, as Slurm sets them: one process alone. A half-set or
contradictory environment is one sentence (ConfigError)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Literal

from shardcook.errors import ConfigError

Launcher = Literal["one", "torchrun", "srun", "array"]

_TORCHRUN = ("RANK", "WORLD_SIZE")
_SRUN = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID")
_ARRAY = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
          "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX")


@dataclass(frozen=True)
class Place:
    """This worker in its launch: `index` of `count` workers started together (an array task:
    its index less the array's first, `task - first`), `local_rank` its GPU on its machine, of
    the `local_count` workers that share the machine."""

    launcher: Launcher = "one"
    index: int = 0
    count: int = 1
    local_rank: int = 0
    local_count: int = 1
    #: Slurm's job id (an array's `SLURM_ARRAY_JOB_ID`); None outside Slurm.
    job: str | None = None
    #: An array task's index (`SLURM_ARRAY_TASK_ID`) and its array's first and last indexes.
    task: int | None = None
    first: int | None = None
    last: int | None = None
    #: Whether the workers join a process group: torchrun's, or srun's tasks given
    #: MASTER_ADDR and MASTER_PORT.
    collective: bool = False

    @property
    def leads(self) -> bool:
        """The first worker of its launch (rank 0, task 0, an array's lowest index)."""
        return self.index == 0

    @property
    def consecutive(self) -> bool:
        """An array whose indexes are first..last without gaps (not known of `--array=1,5-7`,
        whose count is less than its span)."""
        return self.first is None or self.last is None or self.last - self.first + 1 == self.count

    def describe(self) -> str:
        """This worker, for messages: `array task 5 of job 123`, `srun task 2 of 3`."""
        if self.launcher == "array":
            return f"array task {self.task} of job {self.job}"
        if self.launcher == "one":
            return "this process"
        what = "rank" if self.launcher == "torchrun" else "task"
        return f"{self.launcher} {what} {self.index} of {self.count}"


def _int(name: str, launcher: str, low: int = 0) -> int:
    text = os.environ.get(name, "")
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"Environment variable {name}={text!r} is not an integer; unset it or "
                          f"let {launcher} set it.") from None
    if value < low:
        raise ConfigError(f"Environment variable {name}={value} must be at least {low}; unset "
                          f"it or let {launcher} set it.")
    return value


def _missing(names: tuple[str, ...], launcher: str) -> None:
    """ConfigError when some but not all of `names` are set."""
    absent = [n for n in names if not os.environ.get(n)]
    if absent and len(absent) < len(names):
        raise ConfigError(
            f"{launcher} sets {', '.join(names)} together, but {', '.join(absent)} "
            f"{'is' if len(absent) == 1 else 'are'} missing; unset the others or start the "
            f"workers with {launcher}.")


def _master_given(launcher: str) -> bool:
    """Whether MASTER_ADDR and MASTER_PORT are both set (ConfigError for one without the
    other)."""
    given = [n for n in ("MASTER_ADDR", "MASTER_PORT") if os.environ.get(n)]
    if len(given) == 1:
        other = "MASTER_PORT" if given == ["MASTER_ADDR"] else "MASTER_ADDR"
        raise ConfigError(f"{given[0]} is set without {other}; {launcher} tasks form a process "
                          "group only with both (rank 0's address and port): set both, or "
                          "neither.")
    return len(given) == 2


def where() -> Place:
    """This process's place (see the module).

    Raises:
        ConfigError: a half-set or contradictory environment, in one sentence.
    """
    from shardcook.runtime.distributed import env_int

    place = _launch()
    local = place.local_rank
    if "LOCAL_RANK" in os.environ:
        local = env_int("LOCAL_RANK", "0")
        if local < 0:
            raise ConfigError(f"Environment variable LOCAL_RANK={local} must be 0 or more; "
                              "unset it or let torchrun set it.")
    local_count = env_int("LOCAL_WORLD_SIZE", "1")
    if local_count < 1:
        raise ConfigError(f"Environment variable LOCAL_WORLD_SIZE={local_count} must be at "
                          "least 1; unset it or let torchrun set it.")
    return replace(place, local_rank=local, local_count=local_count)


def _launch() -> Place:
    """The place the launcher's own variables give (a local rank only from `SLURM_LOCALID`:
    `where` applies torchrun's local variables, which other launches may be given too)."""
    if any(n in os.environ for n in _TORCHRUN):
        from shardcook.runtime.distributed import env_rank_world

        rank, world = env_rank_world()
        return Place("torchrun", rank, world, collective=world > 1)
    if any(os.environ.get(n) for n in _ARRAY):
        return _array()
    if os.environ.get("SLURM_NTASKS"):
        return _srun()
    # SLURM_PROCID=0 alone: a batch script's own step, one process
    if os.environ.get("SLURM_PROCID", "0") != "0":
        _missing(_SRUN, "srun")
    return Place()


def _array() -> Place:
    _missing(_ARRAY, "a Slurm job array (sbatch --array)")
    launcher = "sbatch --array"
    task, count = _int("SLURM_ARRAY_TASK_ID", launcher), _int("SLURM_ARRAY_TASK_COUNT", launcher, 1)
    first, last = _int("SLURM_ARRAY_TASK_MIN", launcher), _int("SLURM_ARRAY_TASK_MAX", launcher)
    if not first <= task <= last:
        raise ConfigError(f"SLURM_ARRAY_TASK_ID={task} lies outside the array's "
                          f"SLURM_ARRAY_TASK_MIN..MAX={first}..{last}; unset them or let Slurm "
                          "set them.")
    if count > last - first + 1:
        raise ConfigError(f"SLURM_ARRAY_TASK_COUNT={count} is more than the indexes "
                          f"{first}..{last} hold; unset them or let Slurm set them.")
    local = _int("SLURM_LOCALID", launcher) if os.environ.get("SLURM_LOCALID") else 0
    return Place("array", task - first, count, local, job=os.environ["SLURM_ARRAY_JOB_ID"],
                 task=task, first=first, last=last)


def _srun() -> Place:
    _missing(_SRUN, "srun")
    procid, ntasks = _int("SLURM_PROCID", "srun"), _int("SLURM_NTASKS", "srun", 1)
    if procid >= ntasks:
        raise ConfigError(f"SLURM_PROCID={procid} must be below SLURM_NTASKS={ntasks}; unset "
                          "them or let srun set them.")
    _missing(("SLURM_NODEID", "SLURM_NNODES"), "srun")
    if os.environ.get("SLURM_NNODES"):
        node, nodes = _int("SLURM_NODEID", "srun"), _int("SLURM_NNODES", "srun", 1)
        if node >= nodes or nodes > ntasks:
            raise ConfigError(f"SLURM_NODEID={node} and SLURM_NNODES={nodes} do not fit "
                              f"SLURM_NTASKS={ntasks} (a node id below the node count, no more "
                              "nodes than tasks); unset them or let srun set them.")
    local = _int("SLURM_LOCALID", "srun") if os.environ.get("SLURM_LOCALID") else 0
    if local > procid:
        raise ConfigError(f"SLURM_LOCALID={local} cannot exceed SLURM_PROCID={procid}; unset "
                          "them or let srun set them.")
    collective = ntasks > 1 and _master_given("srun")
    return Place("srun", procid, ntasks, local, job=os.environ["SLURM_JOB_ID"],
                 collective=collective)
