"""Who holds a run's output folder (`Holder`: run id, host, pid, start time) and what its lock
file holds (`Record`: the holder, and for a lease when it was renewed and for how long), with the
sentences that refuse a folder in use; shared by both ways of locking it (`output/lock.py`)."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from shardcook.errors import ConfigError
from shardcook.runtime.envvars import env_seconds

#: The environment variable that sets a bucket lease's term in seconds.
LEASE_ENV = "SHARDCOOK_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 60.0

#: How the folder says a lock's step that failed (`doing`: "writing the lease"): the call made,
#: or one sentence raised in its place.
Checked = Callable[[str, Callable[[], None]], None]


def machine_id() -> str:
    """What tells this machine's processes apart from another's with the same pid: the
    kernel's boot id and this pid namespace; empty where they cannot be read."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


@dataclass(frozen=True)
class Holder:
    """A run, as the lock names it."""

    run_id: str
    host: str
    pid: int
    started: str
    machine: str

    @classmethod
    def this_run(cls) -> Holder:
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return cls(uuid.uuid4().hex[:12], socket.gethostname(), os.getpid(), started, machine_id())

    def describe(self) -> str:
        return f"run {self.run_id} (pid {self.pid} on {self.host}, started {self.started})"

    def is_gone(self) -> bool:
        """True when the holder was a process of this machine that no longer runs (gone, or
        a zombie nobody has reaped yet)."""
        if not self.machine or self.machine != machine_id():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            pass  # it exists, owned by someone else
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state == "Z"


@dataclass(frozen=True)
class Record:
    """What the lock file holds: the holder, and for a lease when it was last renewed and for
    how long that holds."""

    holder: Holder
    renewed: float = 0.0
    term: float = 0.0

    def to_bytes(self) -> bytes:
        return json.dumps({**asdict(self.holder), "renewed": self.renewed, "term": self.term},
                          indent=2).encode()

    @classmethod
    def parse(cls, data: bytes) -> Record | None:
        """The record in `data`, or None when it is not one (damaged, being written)."""
        try:
            d = json.loads(data)
            holder = Holder(str(d["run_id"]), str(d["host"]), int(d["pid"]), str(d["started"]),
                            str(d["machine"]))
            return cls(holder, float(d["renewed"]), float(d["term"]))
        except (ValueError, KeyError, TypeError):
            return None

    def is_fresh(self) -> bool:
        """The lease still holds: renewed within its term, by a process that may be alive."""
        return time.time() < self.renewed + self.term and not self.holder.is_gone()


def in_use_by_workers(where: str) -> ConfigError:
    return ConfigError(f"Output folder {where!r} is in use by the workers of a run started "
                       "without a process group (srun or job array tasks, which share it); wait "
                       "for them to end, or write elsewhere.")


def in_use(where: str, record: Record | None, advice: str) -> ConfigError:
    who = record.holder.describe() if record is not None else "another shardcook run"
    return ConfigError(f"Output folder {where!r} is in use by {who}; {advice}")


def lease_seconds() -> float:
    """The lease term `SHARDCOOK_LEASE_SECONDS` sets (default 60), or ConfigError."""
    return env_seconds(LEASE_ENV, DEFAULT_LEASE_SECONDS, 1.0, 86400.0)
