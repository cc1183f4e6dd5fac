"""The FIFO between the loop's reader thread and its main thread, bounded in bytes as well as in
items: decoded video frames are large and their size is only known once decoded (a 1080p clip
holds 6x the pixels of a 480p one), so a count of batches alone does not bound memory."""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Generic, TypeVar

from shardcook.runtime import waits

T = TypeVar("T")


class BytesQueue(Generic[T]):
    """Holds at most `max_items` entries and, when `max_bytes` > 0, at most `max_bytes` of
    them: `put` blocks until both bounds leave room. An entry is always admitted into an empty
    queue, so one entry larger than `max_bytes` passes (alone) instead of blocking forever; the
    bytes held at once are therefore at most max(`max_bytes`, the largest entry).
    `peak_bytes` is the most held at once."""

    def __init__(self, max_items: int, max_bytes: int = 0) -> None:
        self.max_items, self.max_bytes = max(max_items, 1), max_bytes
        self.peak_bytes = 0
        self._entries: deque[tuple[T, int]] = deque()
        self._bytes = 0
        self._changed = threading.Condition()

    def _has_room(self, nbytes: int) -> bool:
        if not self._entries:
            return True
        if len(self._entries) >= self.max_items:
            return False
        return self.max_bytes <= 0 or self._bytes + nbytes <= self.max_bytes

    def put(self, entry: T, nbytes: int = 0) -> None:
        """Adds `entry`, which holds `nbytes`, once there is room for it."""
        with self._changed:
            waits.wait_for(self._changed, lambda: self._has_room(nbytes))
            self._entries.append((entry, nbytes))
            self._bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self._bytes)
            self._changed.notify_all()

    def get(self, timeout: float | None = None) -> T:
        """The oldest entry, once there is one.

        Raises:
            queue.Empty: none came within `timeout` seconds.
        """
        with self._changed:
            if not waits.wait_for(self._changed, lambda: self._entries, timeout):
                raise queue.Empty
            entry, nbytes = self._entries.popleft()
            self._bytes -= nbytes
            self._changed.notify_all()
            return entry
