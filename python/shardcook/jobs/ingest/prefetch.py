"""`ingest`'s downloads ahead of conversion: daemon threads fetch a rank's pending files in
order, at most `prefetch_depth` on disk at once, handed out by input. The threads are daemons
so that Ctrl-C ends the process at once, even while one waits on a silent server."""

from __future__ import annotations

import queue
import shutil
import threading
from concurrent.futures import Future
from pathlib import Path

from shardcook.config.ingest import IngestConfig
from shardcook.jobs.ingest.download import DownloadError, download, safe_name
from shardcook.jobs.ingest.plan import Input
from shardcook.output.staging import LocalSpace
from shardcook.runtime import waits

#: Downloaded Arrow files wait in `SCRATCH/downloads/SPLIT/` until converted (written under a
#: temporary name there until whole and verified).
DOWNLOADS_DIR = "downloads"
#: The name of a run's own folder for its downloads under --scratch-dir (`Owned`), where the
#: output folder is not on this machine.
DOWNLOADS_PREFIX = "shardcook-ingest-"


class Prefetch:
    """Downloads the remote ones of `pending` (in that order) into `space`: the output
    folder's `.shardcook/`, or for a folder not on this machine a folder of the run's own under
    --scratch-dir (`OutputFolder.local_space`), released at `close`."""

    def __init__(self, pending: list[Input], cfg: IngestConfig, space: LocalSpace) -> None:
        self.remote = [one for one in pending if one.url is not None]
        self.space = space
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
        dest = self.space.path / DOWNLOADS_DIR / one.split / safe_name(one.name)
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
        self.space.release()

    def _remove_downloads(self) -> None:
        shutil.rmtree(self.space.path / DOWNLOADS_DIR, ignore_errors=True)

