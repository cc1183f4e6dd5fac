"""`Uploader`: the background uploads of a run whose output folder is not on this machine
(object storage).

The writer hands over each finished unit's staged files (shard and `.tar.idx`) and what to do
once they are all in the store (write the unit's marker); a few threads upload them while the
next shards are written, retrying a failed call (`storage.bucket.retried`), then run that step and
delete the local files. At most `limit` units' files are staged at once: `submit` waits for a
free slot, so the scratch folder holds at most `limit` staged units plus the shard being
written. The first failure that outlasts its retries stops every later step, so no marker is
written for a unit whose files are not all in the store, and is raised by the next `submit` or
by `wait`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

from shardcook.errors import ShardcookError
from shardcook.runtime import waits
from shardcook.storage.bucket import retried
from shardcook.storage.store import Store

#: Upload threads at most, however many units may be staged.
MAX_THREADS = 8


class Uploader:
    """Uploads staged files to `store`, at most `limit` units' files staged at once."""

    def __init__(self, store: Store, limit: int, root: Path) -> None:
        self.store = store
        #: The staging folder: a file's object is its path there (`train/x.tar` for ingest).
        self.root = root
        self.peak_bytes = 0
        self._slots = threading.BoundedSemaphore(limit)
        self._pool = ThreadPoolExecutor(max_workers=min(limit, MAX_THREADS),
                                        thread_name_prefix="shardcook-upload")
        self._futures: list[Future[None]] = []
        self._lock = threading.Lock()
        self._staged_bytes = 0
        self._error: ShardcookError | None = None

    def submit(self, files: list[Path], then: Callable[[], None], what: str, *,
               staged: Sequence[Path] = ()) -> None:
        """Uploads `files` (each as the object of its path in `root`), then runs `then` (`what`
        names it in a failure); the files, and the `staged` ones `then` uploads itself, are deleted
        afterwards. Waits while `limit` units are staged.

        Raises:
            ShardcookIOError: an earlier upload failed for good.
        """
        self._raise()
        self._futures = [f for f in self._futures if not f.done()]
        local = [*files, *staged]
        size = sum(f.stat().st_size for f in local)
        with self._lock:  # the new shard is on disk beside every unit still staged
            self.peak_bytes = max(self.peak_bytes, self._staged_bytes + size)
        while not self._slots.acquire(timeout=0.1):
            self._raise()
        with self._lock:
            self._staged_bytes += size
        self._futures.append(self._pool.submit(self._upload, files, local, then, what, size))

    def wait(self) -> None:
        """Waits for every upload handed over.

        Raises:
            ShardcookIOError: one failed for good.
        """
        for future in self._futures:
            waits.result(future)
        self._futures.clear()
        self._raise()

    def close(self) -> None:
        """Stops: uploads not started are dropped (their units stay unrecorded), running ones
        finish."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _upload(self, files: list[Path], local: list[Path], then: Callable[[], None], what: str,
                size: int) -> None:
        """Uploads `files`, runs `then`, and deletes every `local` file (`size` bytes)."""
        try:
            for path in files:
                if self._error is not None:
                    return
                retried(f"uploading {path.name} to {self.store}",
                        partial(self.store.upload, path, path.relative_to(self.root).as_posix()))
            if self._error is None:
                retried(what, then)
        except ShardcookError as e:
            with self._lock:
                self._error = self._error or e
        finally:
            for path in local:
                path.unlink(missing_ok=True)
            with self._lock:
                self._staged_bytes -= size
            self._slots.release()
