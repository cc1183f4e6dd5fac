"""`Flock`: the run's lock on a local folder, an `flock` on `.shardcook/lock.json` (see
`output/lock.py`): exclusive for a run, shared by the workers of a run without a process group;
the operating system drops it when the process ends, however it ends."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from functools import partial
from pathlib import Path

from shardcook.errors import ConfigError
from shardcook.output.holder import Checked, Holder, Record, in_use, in_use_by_workers

log = logging.getLogger(__name__)

#: How long taking a local lock retries while another process only looks at it.
_LOOK_SECONDS = 1.0


class Flock:
    """The `flock` on `path` (`.shardcook/lock.json` of a local folder `where`)."""

    #: An flock is never taken over while its process lives.
    lost = False

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

    def acquire(self, me: Holder, checked: Checked) -> None:
        """Takes the lock for `me` and writes `me` into the file, or raises ConfigError naming
        the run that holds it (a failing file system: as `checked` says it)."""
        checked("taking the lock", partial(self._acquire, me))

    def _acquire(self, me: Holder) -> None:
        fd = self._take(fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, Record(me).to_bytes(), 0)
        self._fd = fd

    def share(self, me: Holder, checked: Checked) -> None:
        """Takes the lock shared with the other workers of a run without a process group, or
        raises ConfigError naming the run that holds it alone. The file keeps what it holds:
        a worker never removes it, since others may still hold it."""
        checked("taking the lock", self._share)

    def _share(self) -> None:
        self._fd = self._take(fcntl.LOCK_SH)
        self._shared = True

    def check_held(self) -> None:
        """Nothing to check: the lock is held until this process ends."""

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
            return in_use_by_workers(self.where)
        return in_use(self.where, Record.parse(os.pread(fd, 1 << 16, 0)),
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
