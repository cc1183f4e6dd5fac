"""Ctrl-C ends the main thread's waits on other threads at once, wherever the kernel delivers
the SIGINT: here it is delivered to another thread (`pthread_kill`), the case in which Python
only sets a flag and a main thread asleep in one long wait would sleep on. What is waited for
comes only after 5 s, so a wait that is not sliced takes 5 s and fails the test."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pytest
from shardcook.pipeline.bytesqueue import BytesQueue
from shardcook.runtime import waits

LATE_S = 5.0


@pytest.fixture(autouse=True)
def _python_handles_sigint() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _later(action: Callable[[], object]) -> None:
    """SIGINT to a thread of its own after 0.2 s; `action` (what the wait waits for) after
    LATE_S."""
    def run() -> None:
        time.sleep(0.2)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(LATE_S - 0.2)
        action()

    threading.Thread(target=run, daemon=True).start()


def _waits() -> dict[str, Callable[[], object]]:
    future: Future[int] = Future()
    done = threading.Event()
    thread = threading.Thread(target=done.wait, daemon=True)
    thread.start()
    condition = threading.Condition()
    flag: list[bool] = []
    queue: BytesQueue[int] = BytesQueue(2)

    def set_flag() -> None:
        with condition:
            flag.append(True)
            condition.notify_all()

    def wait_condition() -> object:
        with condition:
            return waits.wait_for(condition, lambda: flag)

    return {
        "result": lambda: (_later(lambda: future.set_result(1)), waits.result(future)),
        "join": lambda: (_later(done.set), waits.join(thread)),
        "wait_for": lambda: (_later(set_flag), wait_condition()),
        "bytes queue": lambda: (_later(lambda: queue.put(1)), queue.get()),
    }


@pytest.mark.parametrize("name", ["result", "join", "wait_for", "bytes queue"])
def test_a_sigint_in_another_thread_ends_the_main_threads_wait(name):
    wait = _waits()[name]
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        wait()
    assert time.monotonic() - start < 2.0
