"""Waits of the main thread that Ctrl-C ends at once.

The kernel hands a process's SIGINT to any of its threads that does not block it. When that is
not the main thread, Python only sets a flag there, and the main thread raises
KeyboardInterrupt when it next runs Python code: a main thread asleep in one long wait (a
future's result, a condition, a join) sleeps on until that wait ends, which for a download from
a server that never answers, or an upload to a store that stalls, is minutes. So the main thread
waits on other threads in slices of `SLICE_S`, and a Ctrl-C ends it within one slice wherever
the kernel delivered it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TypeVar

__all__ = ["SLICE_S", "join", "result", "wait_for"]

T = TypeVar("T")

#: The longest the main thread sleeps before it looks for a pending signal.
SLICE_S = 0.05


def result(future: Future[T]) -> T:
    """`future.result()`, waited for in slices."""
    while not future.done():
        wait_futures([future], timeout=SLICE_S)
    return future.result()


def join(thread: threading.Thread) -> None:
    """`thread.join()`, in slices."""
    while thread.is_alive():
        thread.join(SLICE_S)


def wait_for(condition: threading.Condition, predicate: Callable[[], object],
             timeout: float | None = None) -> bool:
    """`condition.wait_for(predicate, timeout)` (the condition's lock held), in slices."""
    if timeout is not None:
        return bool(condition.wait_for(predicate, timeout))
    while not condition.wait_for(predicate, SLICE_S):
        pass
    return True
