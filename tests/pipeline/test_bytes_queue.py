"""The reader -> main queue bounded in bytes as well as in batches: `BytesQueue` between real
threads, and `run_units` with a processor that reports its prepared batches' bytes."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import pytest
from shardcook.pipeline.bytesqueue import BytesQueue
from shardcook.pipeline.run import Loaded

from tests.pipeline.test_run_units import Echo, run, shards


class Producer:
    """Puts entries of the given sizes on `q` from its own thread, counting those put."""

    def __init__(self, q: BytesQueue[int], sizes: list[int]) -> None:
        self.q, self.sizes, self.put = q, sizes, 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for n, size in enumerate(self.sizes):
            self.q.put(n, size)
            self.put += 1

    def settles_at(self, count: int) -> bool:
        """Whether the producer reaches `count` entries put and stays there (blocked, or done)."""
        deadline = time.monotonic() + 5
        while self.put < count and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)  # a producer not held back would put the next entry by now
        return self.put == count


def test_the_producer_waits_while_the_bytes_would_pass_the_budget():
    q: BytesQueue[int] = BytesQueue(max_items=10, max_bytes=100)
    p = Producer(q, [40, 40, 40, 150, 10])
    assert p.settles_at(2)  # 40 + 40; a third 40 would hold 120
    assert q.get() == 0
    assert p.settles_at(3)  # 40 + 40 again
    assert [q.get(), q.get()] == [1, 2]
    assert p.settles_at(4)  # 150 > 100, admitted into the empty queue alone: no deadlock
    assert p.settles_at(4)  # and nothing joins it while it is there
    assert q.get() == 3
    assert p.settles_at(5) and q.get() == 4
    p.thread.join(5)
    assert q.peak_bytes == 150


def test_the_count_of_entries_bounds_too_and_zero_bytes_is_count_only():
    q: BytesQueue[int] = BytesQueue(max_items=2)
    p = Producer(q, [1 << 40] * 4)
    assert p.settles_at(2)
    assert q.get() == 0 and p.settles_at(3)
    with pytest.raises(queue.Empty):
        BytesQueue[int](1).get(timeout=0.01)


class Sized(Echo):
    """Echo whose prepared batches hold 100 bytes each, under `budget`; `start` returns once
    the reader prepared `ahead` batches, so the queue fills as far as its bounds let it."""

    def __init__(self, budget: int, ahead: int, fail_at: int | None = None) -> None:
        super().__init__(fail_at=fail_at)
        self.prepared_budget, self.ahead = budget, ahead
        self.prepared = 0
        self.filled = threading.Event()

    def start(self) -> None:
        self.filled.wait(5)

    def prepare(self, batch: list[Loaded[bytes]]) -> list[Loaded[bytes]]:
        self.prepared += 1
        if self.prepared == self.ahead:  # the batches before it are queued by now
            self.filled.set()
        return batch

    def prepared_bytes(self, batch: list[Loaded[bytes]]) -> int:
        return 100


def test_run_units_holds_the_prepared_batches_to_the_processors_budget(tmp_path: Path):
    # with only the count (budget 0), 4 messages wait: a unit's 3 batches of 100 bytes, its end
    counted = run(tmp_path / "counted", 20, Sized(budget=0, ahead=4), prefetch=4)
    assert counted.prepared_peak_bytes == 300
    # a budget of 250 bytes holds 2 of them, whatever the count allows
    bounded = run(tmp_path / "bounded", 20, Sized(budget=250, ahead=3), prefetch=4)
    assert bounded.prepared_peak_bytes == 200
    # a budget below one batch lets each through alone, and the run completes
    alone = run(tmp_path / "alone", 20, Sized(budget=50, ahead=2), prefetch=4)
    assert alone.prepared_peak_bytes == 100
    assert shards(tmp_path / "counted") == shards(tmp_path / "bounded") == shards(
        tmp_path / "alone")
    assert run(tmp_path / "echo", 20, Echo()).prepared_peak_bytes is None


def test_an_error_with_the_reader_held_by_the_budget_stops_the_run(tmp_path: Path):
    with pytest.raises(RuntimeError, match="processing failed at 4"):
        run(tmp_path, 40, Sized(budget=150, ahead=2, fail_at=4), prefetch=8)
    assert not any(t.name == "shardcook-reader" for t in threading.enumerate())
