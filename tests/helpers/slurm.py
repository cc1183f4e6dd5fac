"""A real one-node Slurm cluster on 127.0.0.1 (Debian's `slurmctld`, `slurmd`, `slurm-client`
and `munge`): `munged`, `slurmctld` and `slurmd` run in the foreground as children of the test
process, with a generated key, `slurm.conf`, state and spool in a fresh folder, and free ports,
so two pytest workers can each hold one. The clients (`srun`, `sbatch`, `scancel`, `squeue`,
`scontrol`) find the cluster through `SLURM_CONF` in `SlurmCluster.env`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers.s3server import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "scancel", "squeue", "scontrol", "sinfo")
#: The daemons live in /usr/sbin, which a user's PATH may lack.
SBIN_PATH = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
#: CPUs the node declares, whatever the machine has (`SlurmdParameters=config_overrides` keeps it
#: from being drained for claiming more than `slurmd -C` finds): `srun -n 3` and a 4-task array
#: then run all at once on a 2-core machine.
CPUS = 16
START_SECONDS = 20.0
#: Variables of the caller that must not reach the clients: a suite run inside a Slurm job would
#: otherwise submit into that job, and torchrun's variables take precedence over Slurm's.
FOREIGN = re.compile(r"(SLURM|SBATCH|SRUN|SALLOC)_\w*|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE"
                     r"|GROUP_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_\w*")


def unavailable() -> str | None:
    """Why a cluster cannot be started here, or None."""
    missing = [name for name in DAEMONS + CLIENTS if shutil.which(name, path=SBIN_PATH) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} not found); "
                "apt-get install slurmctld slurmd slurm-client munge")
    if os.geteuid() != 0:
        return "the Slurm daemons run jobs as their submitter, so they must be started as root"
    return None


def _conf(root: Path, node: str, ctld_port: int, slurmd_port: int, munge_socket: Path) -> str:
    return "\n".join([
        f"ClusterName=sc{os.getpid()}",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        # no cgroups, no accounting database, no MPI: only what srun and sbatch need
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        # schedules at each submission instead of on a timer
        "SchedulerType=sched/builtin",
        "SchedulerParameters=batch_sched_delay=0",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "KillWait=1",
        "InactiveLimit=0",
        # a finished job stays visible to `scontrol show job` for this long
        "MinJobAge=600",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={CPUS} State=UNKNOWN",
        f"PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class SlurmCluster:
    """The three daemons of a one-node cluster; `stop()` ends every job and daemon."""

    def __init__(self) -> None:
        # Not under pytest's base temp: munged wants its socket's folder searchable by all users,
        # and pytest's base temp is private to its owner.
        self.root = Path(tempfile.mkdtemp(prefix="shardcook-slurm-"))
        self.root.chmod(0o755)
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.env = {k: v for k, v in os.environ.items() if not FOREIGN.fullmatch(k)}
        self.env["SLURM_CONF"] = str(self.conf)
        self._daemons: list[subprocess.Popen[bytes]] = []

    def start(self) -> SlurmCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = self.root / "munge.socket"
        for name in ("state", "spool"):
            (self.root / name).mkdir()
        self.conf.write_text(_conf(self.root, self.node, free_port(), free_port(), sock))
        self._spawn("munged", "--foreground", f"--socket={sock}", f"--key-file={key}",
                    f"--log-file={munge / 'munged.log'}", f"--pid-file={munge / 'munged.pid'}",
                    f"--seed-file={munge / 'munged.seed'}")
        self._until(sock.exists, "munged made no socket")
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._spawn("slurmd", "-D", "-f", str(self.conf), "-N", self.node)
        self._until(lambda: self.client("sinfo", "-h", "-o", "%t", check=False).stdout.strip()
                    == "idle", "the node did not become idle")

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.root / f"{name}.out").open("wb")
        self._daemons.append(subprocess.Popen(
            [shutil.which(name, path=SBIN_PATH) or name, *args], stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, env=self.env))
        log.close()

    def _until(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_SECONDS
        while not ready():
            dead = [p.args[0] for p in self._daemons if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"{what} within {START_SECONDS:.0f} s (exited: {dead}):\n"
                                   + self.logs())
            time.sleep(0.1)

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                         for p in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log")))

    def client(self, *args: str, check: bool = True, timeout: float = 30
               ) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster."""
        r = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout,
                           check=False)
        if check and r.returncode != 0:
            raise AssertionError(f"{args} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r

    def sbatch(self, script: Path, *options: str, timeout: float = 60) -> str:
        """Submits `script` and returns the job id (an array's `SLURM_ARRAY_JOB_ID`); with
        `--wait` among the options it returns when the job has ended, whatever its exit status."""
        r = self.client("sbatch", "--parsable", *options, str(script), check=False,
                        timeout=timeout)
        if not r.stdout.strip():
            raise AssertionError(f"sbatch failed ({r.returncode}):\n{r.stderr}")
        return r.stdout.split(";")[0].strip()

    def wait_ended(self, job: str, timeout: float = 60) -> None:
        """Waits until no task of `job` is pending, running or completing (polled: `sbatch
        --wait` sleeps 2 s and longer between looks)."""
        deadline = time.monotonic() + timeout
        while self.client("squeue", "-h", "-j", job, check=False).stdout.strip():
            assert time.monotonic() < deadline, f"job {job} still runs after {timeout:.0f} s"
            time.sleep(0.1)

    def state(self, job: str) -> str:
        """`JobState` of a job or array task (`JOBID_INDEX`) as `scontrol show job` gives it."""
        out = self.client("scontrol", "-o", "show", "job", job).stdout
        match = re.search(r"\bJobState=(\S+)", out)
        assert match, out
        return match.group(1)

    def wait_for(self, job: str, states: tuple[str, ...], timeout: float = 30) -> str:
        """Waits until `job` is in one of `states`; returns that state."""
        deadline = time.monotonic() + timeout
        while (state := self.state(job)) not in states:
            assert time.monotonic() < deadline, f"{job} is {state}, not {states}"
            time.sleep(0.1)
        return state

    def stop(self) -> None:
        """Cancels every job left (so no `slurmstepd` outlives the cluster), then ends the
        daemons in reverse order of start and removes the cluster's folder."""
        if len(self._daemons) == len(DAEMONS):
            self.client("scancel", f"--user={os.getuid()}", check=False)
            deadline = time.monotonic() + 15
            while (self.client("squeue", "-h", check=False).stdout.strip()
                   and time.monotonic() < deadline):
                time.sleep(0.1)
        for proc in reversed(self._daemons):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._daemons.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def slurm_vars(path: Path) -> dict[str, str]:
    """The `SLURM_*` variables of an `env` listing (a task's output file)."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs if k.startswith("SLURM_")}


#: torchrun's variables, which a worker started by Slurm alone must not see.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                    "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE")


def launch_env(**slurm: object) -> dict[str, str]:
    """This process's environment without any launcher's variables, plus `slurm`'s."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k not in LAUNCH_VARIABLES}
    env.update({k: str(v) for k, v in slurm.items()})
    return env


def array(task: int, first: int, last: int, count: int | None = None, job: int = 90
          ) -> dict[str, str]:
    """Array task `task` of `sbatch --array=first-last` (its batch step: SLURM_NTASKS=1 too)."""
    return launch_env(SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_ID=task,
                      SLURM_ARRAY_TASK_COUNT=count or last - first + 1,
                      SLURM_ARRAY_TASK_MIN=first, SLURM_ARRAY_TASK_MAX=last,
                      SLURM_JOB_ID=job + task + 1, SLURM_NTASKS=1, SLURM_PROCID=0,
                      SLURM_LOCALID=0, SLURM_NODEID=0, SLURM_NNODES=1)

