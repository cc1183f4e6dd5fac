"""The shared read -> prepare -> process -> write loop: its threads, errors and resume."""

from __future__ import annotations

import tarfile
import threading
from pathlib import Path

import pytest
from shardcook.errors import ShardcookError
from shardcook.output.runfolder import marker_name
from shardcook.pipeline.plan import plan_units
from shardcook.pipeline.run import Loaded, Outcome, Processor, run_units
from shardcook.sources.base import Item

from tests.helpers.runfolder import local_run_folder


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


class Echo(Processor[bytes]):
    """Writes each input as one part; `fail_at` raises on that index, `bad_part_at` makes the
    writer refuse that sample's part name."""

    def __init__(self, fail_at: int | None = None, bad_part_at: int | None = None):
        self.fail_at, self.bad_part_at = fail_at, bad_part_at
        self.stage_seconds = {"process": 0.0}
        self.threads: set[str] = set()

    def load(self, item: Item) -> bytes:
        return item.image_bytes()

    def process(self, batch):
        self.threads.add(threading.current_thread().name)
        out = []
        for loaded in batch:
            i = loaded.item.index
            if i == self.fail_at:
                raise RuntimeError(f"processing failed at {i}")
            name = "bad/name" if i == self.bad_part_at else "txt"
            out.append(Outcome.of(loaded.item, [(name, loaded.payload)]))
        return out


def run(out: Path, n: int, processor, **kwargs):
    (out / ".shardcook/progress").mkdir(parents=True, exist_ok=True)  # the driver's setup
    return run_units(local_run_folder(out), Numbers(n), plan_units(n, 5), processor, batch_size=2,
                     **kwargs)


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


class Staged(Echo):
    """Echo that records where and when `start`, `prepare` and `process` run."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str, int]] = []
        self.started = threading.Event()

    def start(self) -> None:
        self.events.append(("start", threading.current_thread().name, -1))
        self.started.wait(5)  # the models load while the reader prepares ahead

    def prepare(self, batch: list[Loaded[bytes]]) -> list[Loaded[bytes]]:
        self.events.append(("prepare", threading.current_thread().name, batch[0].item.index))
        if batch[0].item.index == 2:  # the reader got past the first batch during `start`
            self.started.set()
        return [Loaded(x.item, b"prepared " + (x.payload or b"")) for x in batch]

    def process(self, batch: list[Loaded[bytes]]) -> list[Outcome]:
        self.events.append(("process", threading.current_thread().name, batch[0].item.index))
        return super().process(batch)


def test_prepare_runs_on_the_reader_thread_while_start_loads(tmp_path: Path):
    proc = Staged()
    stats = run(tmp_path, 10, proc)
    assert stats.written == 10
    main = threading.current_thread().name
    kinds = [(kind, thread) for kind, thread, _ in proc.events]
    assert [thread for kind, thread in kinds if kind == "start"] == [main]
    assert {thread for kind, thread in kinds if kind == "prepare"} == {"shardcook-reader"}
    assert {thread for kind, thread in kinds if kind == "process"} == {main}
    # two batches were prepared before the first was processed: start did not hold them up
    first_process = kinds.index(("process", main))
    assert sum(1 for kind, _ in kinds[:first_process] if kind == "prepare") >= 2
    # every batch is processed after it was prepared, in input order
    prepared = [i for kind, _, i in proc.events if kind == "prepare"]
    processed = [i for kind, _, i in proc.events if kind == "process"]
    assert prepared == processed == [0, 2, 4, 5, 7, 9]
    with tarfile.open(tmp_path / "000000.tar") as tar:
        assert tar.extractfile("0000000000.txt").read() == b"prepared 0"  # type: ignore[union-attr]


def test_processor_error_keeps_finished_units_and_resume_completes(tmp_path: Path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="processing failed at 12"):
        run(out, 20, Echo(fail_at=12))
    # the units handed to the writer before the error are complete and recorded
    assert sorted(shards(out)) == ["000000.tar", "000001.tar"]
    assert (out / marker_name(1)).is_file() and not (out / marker_name(2)).exists()
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
    assert not (tmp_path / marker_name(1)).exists()
    assert leftovers(tmp_path) == []
