"""`Lease`: the run's lock on a folder whose objects are no local files (a bucket), an object
renewed by a background thread (see `output/lock.py`); the workers of a run without a process
group each hold a lease of their own under `.shardcook/workers/`."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from functools import partial

from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import OURS_DIR, WORKERS_DIR
from shardcook.output.holder import (
    DEFAULT_LEASE_SECONDS,
    Checked,
    Holder,
    Record,
    in_use,
    in_use_by_workers,
    lease_seconds,
)
from shardcook.runtime import waits
from shardcook.storage.store import Store

log = logging.getLogger(__name__)

#: How long a run waits after writing its lease before reading it back.
SETTLE_SECONDS = 1.0
#: Where the workers' leases are.
_WORKERS = f"{OURS_DIR}/{WORKERS_DIR}/"


def check_no_workers(store: Store) -> None:
    """Raises ConfigError while a worker's lease (a run without a process group shares the
    folder, a lease per worker) is fresh."""
    for name in store.names(_WORKERS):
        try:
            record = Record.parse(store.read(name))
        except FileNotFoundError:
            continue  # its worker ended meanwhile
        if record is not None and record.is_fresh():
            raise in_use_by_workers(str(store))


class Lease:
    """The lease object `name` in the folder `store`."""

    def __init__(self, store: Store, name: str) -> None:
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
        return in_use(str(self.store), record, "wait for it to end, or write elsewhere; if it "
                       f"was killed, its lease expires at {until:%H:%M:%S} UTC.")

    def check_free(self) -> None:
        """Raises ConfigError naming the holder while another run's lease is fresh."""
        record = self._read()
        if record is not None and record.is_fresh():
            raise self._refusal(record)

    def acquire(self, me: Holder, checked: Checked) -> None:
        """Takes the lease for `me`, once no worker holds one of its own, and renews it until
        `release`, or raises ConfigError naming the run that holds it, or saying that workers
        share it (a failing store: as `checked` says it)."""
        checked("reading the workers' leases", partial(check_no_workers, self.store))
        checked("writing the lease", partial(self._take, me))

    def share(self, me: Holder, checked: Checked) -> None:
        """Takes a lease of worker `me`'s own under `.shardcook/workers/`, renewed until
        `release`, or raises ConfigError naming the run that holds the folder alone."""
        checked("reading the lease", self.check_free)
        self.name = f"{_WORKERS}{me.run_id}.json"
        checked("writing the worker's lease", partial(self._take, me))

    def _take(self, me: Holder) -> None:
        """Takes the lease for `me` (see `output/lock.py` on two runs starting together) and
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
            raise self._refusal(record) if record is not None else in_use(
                str(self.store), None, "wait for it to end, or write elsewhere.")
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
                log.debug("renewing the lease on %s failed: %s", str(self.store), e)

    def check_held(self) -> None:
        """Raises DatasetError when another run took the lease over while this one worked."""
        if self._me is None:
            return
        record = self._read()
        if self._lost or record is None or record.holder != self._me:
            who = (record.holder.describe() if record is not None and record.holder != self._me
                   else "another run")
            raise DatasetError(
                f"{self.store} was taken over by {who} while this run wrote there (its "
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
                        str(self.store), e, self._term)
        self._me = None
