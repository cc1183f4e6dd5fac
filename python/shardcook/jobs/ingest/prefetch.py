"""`ingest`'s downloads ahead of conversion: daemon threads fetch a rank's pending files in
order, at most `prefetch_depth` on disk at once, handed out by input. The threads are daemons
so that Ctrl-C ends the process at once, even while one waits on a silent server."""

from __future__ import annotations

import json
import os
import queue
import shutil
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path

from shardcook.config.ingest import IngestConfig
from shardcook.files import process_running
from shardcook.jobs.ingest.download import DownloadError, download, safe_name
from shardcook.jobs.ingest.plan import Input
from shardcook.output.lock import machine_id
from shardcook.runtime import waits

#: Downloaded Arrow files wait in `SCRATCH/downloads/SPLIT/` until converted (written under a
#: temporary name there until whole and verified).
DOWNLOADS_DIR = "downloads"
#: A bucket run's own folder under --scratch-dir, and in it who made it (`machine`, `pid`), so a
#: later run on the same machine removes what a killed one left there.
TEMPORARY_PREFIX = "shardcook-ingest-"
OWNER_JSON = "owner.json"


class Prefetch:
    """Downloads the remote ones of `pending` (in that order) into `scratch`: the output
    folder's `.shardcook/`, or for a bucket (`temporary`) a folder of its own under
    --scratch-dir, removed at `close`."""

    def __init__(self, pending: list[Input], cfg: IngestConfig, scratch: str | Path | None,
                 *, temporary: bool = False) -> None:
        self.remote = [one for one in pending if one.url is not None]
        self.temporary = temporary
        if temporary:
            remove_abandoned(Path(scratch or tempfile.gettempdir()))
            self.scratch = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=scratch))
            owner = {"machine": machine_id(), "pid": os.getpid()}
            (self.scratch / OWNER_JSON).write_text(json.dumps(owner), encoding="utf-8")
        else:
            self.scratch = Path(scratch or ".")
        self.cfg = cfg
        self.slots = threading.Semaphore(cfg.prefetch_depth)
        self.stop = threading.Event()
        self.jobs: queue.Queue[tuple[Input, Future[Path]] | None] = queue.Queue()
        self.futures: dict[tuple[str, int], Future[Path]] = {}
        self.submitted = threading.Condition()
        self.on_disk = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self._remove_downloads()  # a killed run's
        if not self.remote:
            return
        self.threads = [threading.Thread(target=self._work, daemon=True,
                                         name=f"ingest-download-{n}")
                        for n in range(min(self.cfg.max_workers, len(self.remote)))]
        self.threads.append(threading.Thread(target=self._submit, daemon=True))
        for thread in self.threads:
            thread.start()

    def _fetch(self, one: Input) -> Path:
        assert one.url is not None
        dest = self.scratch / DOWNLOADS_DIR / one.split / safe_name(one.name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:
            self.on_disk += 1
            self.peak = max(self.peak, self.on_disk)
        if one.withheld:  # an earlier run's split that this run does not name
            raise DownloadError(f"its address was recorded without its password; name the "
                                f"{one.split} split's inputs again to download it")
        download(one.url, dest, one.md5, self.cfg.retry, self.stop)
        return dest

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            one, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._fetch(one))
            except BaseException as e:  # noqa: BLE001 - the main thread gets it with the input
                future.set_exception(e)

    def _submit(self) -> None:
        for one in self.remote:
            while not self.slots.acquire(timeout=0.1):
                if self.stop.is_set():
                    return
            if self.stop.is_set():
                return
            future: Future[Path] = Future()
            with self.submitted:
                self.futures[(one.split, one.index)] = future
                self.submitted.notify_all()
            self.jobs.put((one, future))

    def take(self, one: Input) -> Path:
        """The downloaded file of `one`, once whole (DownloadError when it could not be)."""
        with self.submitted:
            waits.wait_for(self.submitted, lambda: (one.split, one.index) in self.futures)
        return waits.result(self.futures[(one.split, one.index)])

    def done_with(self, one: Input) -> None:
        """`one`'s download is no longer needed: delete it and free its slot."""
        future = self.futures.pop((one.split, one.index), None)
        if future is None:
            return
        if future.done() and future.exception() is None:
            future.result().unlink(missing_ok=True)
        with self.lock:
            self.on_disk -= 1
        self.slots.release()

    def close(self) -> None:
        """Stops every download and removes what they left."""
        self.stop.set()
        for _ in range(self.cfg.max_workers):
            self.jobs.put(None)
        self._remove_downloads()
        if self.temporary:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _remove_downloads(self) -> None:
        shutil.rmtree(self.scratch / DOWNLOADS_DIR, ignore_errors=True)


def remove_abandoned(scratch: Path) -> list[str]:
    """Removes the folders under `scratch` that bucket runs killed on this machine left (their
    owner's pid no longer runs here); another machine's, a running one's and folders without an
    owner record are kept. Returns the names removed."""
    here = machine_id()
    removed = []
    for folder in sorted(scratch.glob(f"{TEMPORARY_PREFIX}*")):
        try:
            owner = json.loads((folder / OWNER_JSON).read_text(encoding="utf-8"))
            mine = here and owner["machine"] == here and not process_running(int(owner["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if mine and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed

