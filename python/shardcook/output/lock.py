"""One run at a time in an output folder, by one `Lock`, whose way the folder's store decides
(`lock_of`): `.shardcook/lock.json` names the run that holds it
(run id, host, pid, start time), taken by rank 0 before it writes anything and held to the end
of the run, finalize included; the workers of that run share it through rank 0.

- A local folder (the store's lock file is a file on this machine): an exclusive `flock` on
  the file (`flock.Flock`). The operating system drops it when the
  process ends, however it ends (kill -9 included), so the next run takes it without any
  cleanup. The file is removed when the run ends.
- A folder in object storage (any other store): a lease (`lease.Lease`), the same file as an
  object, renewed by a background
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

from typing import Protocol

from shardcook.layouts.names import OURS_DIR, RUN_LOCK
from shardcook.output.flock import Flock
from shardcook.output.holder import Checked, Holder, machine_id
from shardcook.output.lease import Lease
from shardcook.storage.store import Store

__all__ = ["Holder", "Lock", "lock_of", "machine_id"]

_LOCK = f"{OURS_DIR}/{RUN_LOCK}"


class Lock(Protocol):
    """A run's hold on its output folder (see the module)."""

    @property
    def lost(self) -> bool:
        """Whether the holder found the folder taken over (a lease not renewed in time)."""
        ...

    def check_free(self) -> None:
        """Raises ConfigError naming the holder when another run holds the folder; takes
        nothing and writes nothing."""
        ...

    def acquire(self, me: Holder, checked: Checked) -> None:
        """Takes the folder for run `me` alone, or raises ConfigError naming the run that
        holds it (or saying that workers share it); each step that fails is said by
        `checked`."""
        ...

    def share(self, me: Holder, checked: Checked) -> None:
        """Takes the folder for worker `me` of a run without a process group, shared with its
        other workers, or raises ConfigError naming a run that holds it alone."""
        ...

    def check_held(self) -> None:
        """Raises DatasetError when another run took the folder over since `acquire` (OSError
        when that cannot be read)."""
        ...

    def release(self) -> None:
        """Lets go of the folder, if this process holds it."""
        ...


def lock_of(store: Store, where: str) -> Lock:
    """The lock of the output folder `store` (`where` names it in sentences): an flock where
    its lock file is a file on this machine, else a lease."""
    path = store.file(_LOCK)
    return Flock(path, where) if path is not None else Lease(store, _LOCK)
