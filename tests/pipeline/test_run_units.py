"""The shared read -> process -> write loop: writing on its own thread, errors and resume."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from shardcook.errors import ShardcookError
from shardcook.pipeline.plan import plan_units
from shardcook.pipeline.progress import marker_path
from shardcook.pipeline.run import Outcome, run_units
from shardcook.sources.base import Item


class Numbers:
    """A source of `n` items whose "image" is the index as text."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def items(self, start: int, stop: int):
        for i in range(start, stop):
            yield Item(i, f"number:{i}", image=str(i).encode(), caption=f"caption {i}")

    def describe(self) -> dict:
        return {"kind": "numbers"}


class Echo:
    """Writes each input as one part; `fail_at` raises on that index, `bad_part_at` makes the
    writer refuse that sample's part name."""

    def __init__(self, fail_at: int | None = None, bad_part_at: int | None = None):
        self.fail_at, self.bad_part_at = fail_at, bad_part_at
        self.stage_seconds = {"process": 0.0}
        self.threads: set[str] = set()

    def process(self, batch):
        self.threads.add(threading.current_thread().name)
        out = []
        for loaded in batch:
            i = loaded.item.index
            if i == self.fail_at:
                raise RuntimeError(f"processing failed at {i}")
            name = "bad/name" if i == self.bad_part_at else "txt"
            out.append(Outcome(loaded.item, parts=[(name, loaded.image)]))
        return out


def run(out: Path, n: int, processor, **kwargs):
    marker_path(out, 0).parent.mkdir(parents=True, exist_ok=True)  # the driver's setup
    return run_units(out, Numbers(n), plan_units(n, 5), processor, batch_size=2, **kwargs)


def shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tar"))}


def leftovers(out: Path) -> list[Path]:
    tmp = out / ".shardcook" / "tmp"
    return list(tmp.iterdir()) if tmp.exists() else []


def test_writing_runs_on_its_own_thread(tmp_path: Path):
    calls: list[tuple[str, str, int]] = []
    proc = Echo()
    stats = run(tmp_path, 20, proc, on_progress=lambda kind, n: calls.append(
        (threading.current_thread().name, kind, n)))
    assert stats.written == 20 and stats.units_written == 4
    assert proc.threads == {threading.current_thread().name}
    # progress is reported by the writer, after the samples are in the shard
    assert {name for name, _, _ in calls} == {"shardcook-writer"}
    assert sum(n for _, kind, n in calls if kind == "samples") == 20
    assert sorted(shards(tmp_path)) == ["000000.tar", "000001.tar", "000002.tar", "000003.tar"]
    assert stats.stage_seconds["write"] > 0


def test_processor_error_keeps_finished_units_and_resume_completes(tmp_path: Path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="processing failed at 12"):
        run(out, 20, Echo(fail_at=12))
    # the units handed to the writer before the error are complete and recorded
    assert sorted(shards(out)) == ["000000.tar", "000001.tar"]
    assert marker_path(out, 1).is_file() and not marker_path(out, 2).exists()
    assert leftovers(out) == []  # the unfinished shard was removed
    stats = run(out, 20, Echo())
    assert (stats.units_resumed, stats.units_written) == (2, 2)
    clean = tmp_path / "clean"
    run(clean, 20, Echo())
    assert shards(out) == shards(clean)


def test_writer_error_reaches_the_caller(tmp_path: Path):
    with pytest.raises(ShardcookError, match="invalid part name \"bad/name\""):
        run(tmp_path, 40, Echo(bad_part_at=7), prefetch=1)
    assert sorted(shards(tmp_path)) == ["000000.tar"]
    assert not marker_path(tmp_path, 1).exists()
    assert leftovers(tmp_path) == []
