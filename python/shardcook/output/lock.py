"""One run at a time in an output folder: `.shardcook/lock.json` names the run that holds it
(run id, host, pid, start time), taken by rank 0 before it writes anything and held to the end
of the run, finalize included; the workers of that run share it through rank 0.

- A local folder: an exclusive `flock` on the file. The operating system drops it when the
  process ends, however it ends (kill -9 included), so the next run takes it without any
  cleanup. The file is removed when the run ends.
- A folder in object storage: a lease, the same file as an object, renewed by a background
  thread every quarter of its term (`SHARDCOOK_LEASE_SECONDS`, default 60). Another run refuses
  the folder while the lease is fresh; it takes it over once the lease is older than its term
  (the holder stopped renewing it: it died), or at once when the holder was a process of this
  machine that no longer exists. The Multi-Storage Client has no conditional write, so two
  runs that start together are told apart by writing the lease and reading it back after a
  pause (`SETTLE_SECONDS`): the run that no longer finds its own gives up. Two runs that pass
  their first look within that pause of each other can still both start: the lease is a
  guard against a second command started by mistake, not a lock service. The run checks once
  more before it finalizes that the lease is still its own. Clocks of the machines involved
  must agree to well within the term.

The workers of a run started without a process group (Slurm's `srun` tasks, job array tasks,
`workers.where`) share the folder instead, each on its own: locally a shared `flock` on the
same file, in a bucket a lease of each worker's own under `.shardcook/workers/`. Workers share
it with each other, whatever their job ids (a resubmitted array task has a new one; the
manifest proves it is the same run), and with nothing else: a run that holds the folder alone
refuses them, and they refuse it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from shardcook.errors import ConfigError, DatasetError
from shardcook.runtime import waits
from shardcook.runtime.envvars import env_seconds
from shardcook.storage import Remote

log = logging.getLogger(__name__)

#: The environment variable that sets a bucket lease's term in seconds.
LEASE_ENV = "SHARDCOOK_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 60.0
#: How long a run waits after writing its lease before reading it back.
SETTLE_SECONDS = 1.0
#: How long taking a local lock retries while another process only looks at it.
_LOOK_SECONDS = 1.0


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


def _in_use_by_workers(where: str) -> ConfigError:
    return ConfigError(f"Output folder {where!r} is in use by the workers of a run started "
                       "without a process group (srun or job array tasks, which share it); wait "
                       "for them to end, or write elsewhere.")


def _in_use(where: str, record: Record | None, advice: str) -> ConfigError:
    who = record.holder.describe() if record is not None else "another shardcook run"
    return ConfigError(f"Output folder {where!r} is in use by {who}; {advice}")


def lease_seconds() -> float:
    """The lease term `SHARDCOOK_LEASE_SECONDS` sets (default 60), or ConfigError."""
    return env_seconds(LEASE_ENV, DEFAULT_LEASE_SECONDS, 1.0, 86400.0)


class LocalLock:
    """The `flock` on `path` (`.shardcook/lock.json` of a local folder `where`)."""

    def __init__(self, path: Path, where: str) -> None:
        self.path = path
        self.where = where
        self._fd: int | None = None
        self._shared = False

    def check_free(self) -> None:
        """Raises ConfigError naming the holder when another run holds the lock; takes
        nothing and writes nothing."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return  # no lock file (or none that is ours to read): nobody holds it
        try:
            if not self._try(fd, fcntl.LOCK_SH):
                raise self._held(fd)
        finally:
            os.close(fd)

    def acquire(self, me: Holder) -> None:
        """Takes the lock for `me` and writes `me` into the file, or raises ConfigError naming
        the run that holds it."""
        fd = self._take(fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, Record(me).to_bytes(), 0)
        self._fd = fd

    def share(self) -> None:
        """Takes the lock shared with the other workers of a run without a process group, or
        raises ConfigError naming the run that holds it alone. The file keeps what it holds:
        a worker never removes it, since others may still hold it."""
        self._fd = self._take(fcntl.LOCK_SH)
        self._shared = True

    def _take(self, kind: int) -> int:
        """A descriptor of the lock file holding a `kind` flock, or ConfigError."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + _LOOK_SECONDS
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                taken = self._try(fd, kind)
            except OSError:
                os.close(fd)
                raise
            if not taken:
                if time.monotonic() < deadline:  # maybe another run's `check_free`, a moment
                    os.close(fd)
                    time.sleep(0.05)
                    continue
                error = self._held(fd)
                os.close(fd)
                raise error
            if self._same_file(fd):
                return fd
            os.close(fd)  # the holder removed the file as it ended: lock the one there now

    def _try(self, fd: int, kind: int) -> bool:
        """Takes a `kind` flock on `fd` without waiting: False when another process holds a
        conflicting one. Where the file system has no locks, says so in a warning and lets the
        run go on unguarded."""
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            log.warning("%s cannot be locked (%s): nothing stops a second run from writing "
                        "there at the same time.", self.where, e.strerror or e)
        return True

    def _same_file(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_ino == os.stat(self.path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            return False

    def _held(self, fd: int) -> ConfigError:
        if self._try(fd, fcntl.LOCK_SH):  # only workers sharing it hold it
            fcntl.flock(fd, fcntl.LOCK_UN)
            return _in_use_by_workers(self.where)
        return _in_use(self.where, Record.parse(os.pread(fd, 1 << 16, 0)),
                       "wait for it to end, or write elsewhere.")

    def release(self) -> None:
        """Removes the lock file and lets go of the lock (removed first, while still held, so
        no run locks a file that is about to go); a worker sharing it only lets go."""
        if self._fd is None:
            return
        try:
            if not self._shared:
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None


def check_no_workers(store: Remote, prefix: str) -> None:
    """Raises ConfigError while a worker's lease under `prefix` (a run without a process group
    shares the folder, a lease per worker) is fresh."""
    for name in store.names(prefix):
        try:
            record = Record.parse(store.read(name))
        except FileNotFoundError:
            continue  # its worker ended meanwhile
        if record is not None and record.is_fresh():
            raise _in_use_by_workers(store.url)


class BucketLease:
    """The lease object `name` in the folder `store`."""

    def __init__(self, store: Remote, name: str) -> None:
        self.store = store
        self.name = name
        self._me: Holder | None = None
        self._term = DEFAULT_LEASE_SECONDS
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Whether the heartbeat found the lease gone or another run's.
        self._lost = False

    def _read(self) -> Record | None:
        """The lease there (None when there is none, or only a damaged one, which nobody
        renews)."""
        try:
            data = self.store.read(self.name)
        except FileNotFoundError:
            return None
        return Record.parse(data)

    def _write(self, renewed: float) -> None:
        assert self._me is not None
        self.store.write_bytes(self.name, Record(self._me, renewed, self._term).to_bytes())

    def _refusal(self, record: Record) -> ConfigError:
        until = datetime.fromtimestamp(record.renewed + record.term, timezone.utc)
        return _in_use(self.store.url, record, "wait for it to end, or write elsewhere; if it "
                       f"was killed, its lease expires at {until:%H:%M:%S} UTC.")

    def check_free(self) -> None:
        """Raises ConfigError naming the holder while another run's lease is fresh."""
        record = self._read()
        if record is not None and record.is_fresh():
            raise self._refusal(record)

    def acquire(self, me: Holder) -> None:
        """Takes the lease for `me` (see the module's note on two runs starting together) and
        starts renewing it, or raises ConfigError naming the run that holds it."""
        self._term = lease_seconds()
        record = self._read()
        if record is not None and record.holder.run_id != me.run_id and record.is_fresh():
            raise self._refusal(record)
        self._me = me
        self._write(time.time())
        time.sleep(SETTLE_SECONDS)
        record = self._read()
        if record is None or record.holder != me:
            self._me = None
            raise self._refusal(record) if record is not None else _in_use(
                self.store.url, None, "wait for it to end, or write elsewhere.")
        self._thread = threading.Thread(target=self._renew, name="shardcook-lease",
                                        daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        """Renews the lease every quarter of its term until stopped, or until it is gone or
        another run holds it. A failed renewal is tried again at the next one."""
        while not self._stop.wait(self._term / 4):
            try:
                record = self._read()
                if record is None or record.holder != self._me:
                    self._lost = True
                    return
                self._write(time.time())
            except Exception as e:  # noqa: BLE001 - the store's errors vary; the next beat retries
                log.debug("renewing the lease on %s failed: %s", self.store.url, e)

    def check_held(self) -> None:
        """Raises DatasetError when another run took the lease over while this one worked."""
        if self._me is None:
            return
        record = self._read()
        if self._lost or record is None or record.holder != self._me:
            who = (record.holder.describe() if record is not None and record.holder != self._me
                   else "another run")
            raise DatasetError(
                f"{self.store.url} was taken over by {who} while this run wrote there (its "
                "lease was not renewed in time), so it may mix both runs' shards; nothing was "
                "finalized: once no other run writes there, rerun with --overwrite.")

    @property
    def lost(self) -> bool:
        """Whether the heartbeat found the lease gone or another run's."""
        return self._lost

    def release(self) -> None:
        """Stops renewing and deletes the lease, when it is still this run's."""
        if self._me is None:
            return
        self._stop.set()
        if self._thread is not None:
            waits.join(self._thread)
        try:
            record = self._read()
            if record is not None and record.holder == self._me:
                self.store.delete(self.name)
        except Exception as e:  # noqa: BLE001 - it then expires by itself
            log.warning("could not remove the lease on %s (%s); it expires within %g s.",
                        self.store.url, e, self._term)
        self._me = None
