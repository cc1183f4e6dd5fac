"""The engine carries what a job defines without knowing it: the job's own payload for each
input (its processor's `load`, then its `prepare`), several samples from one input, counts the
unit's record sums, and a failure that leaves its unit to the next run; through the real loop,
shard writer and output folder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from shardcook import read_shard
from shardcook.pipeline.plan import WorkUnit, plan_units
from shardcook.pipeline.run import (
    Loaded,
    Outcome,
    Processor,
    completed,
    run_units,
    split_skipped,
)
from shardcook.sources.base import Item

from tests.helpers.runfolder import local_run_folder


@dataclass(frozen=True)
class Lines:
    """A payload no other job has: the lines of an input's text file."""

    lines: tuple[str, ...]


class TextFiles:
    """Inputs `0.txt`, `1.txt`, ... of `folder`, read by the processor, not the source."""

    def __init__(self, folder: Path, n: int) -> None:
        self.folder, self.n = folder, n

    def __len__(self) -> int:
        return self.n

    def items(self, start: int, stop: int) -> Iterator[Item]:
        for i in range(start, stop):
            path = str(self.folder / f"{i}.txt")
            yield Item(i, path, image_path=path, caption=f"file {i}")

    def describe(self) -> dict[str, str]:
        return {"kind": "text files"}


class LineSamples(Processor[Lines]):
    """One sample per line of each file, upper-cased by `prepare`; a file whose first line is
    `FAIL` fails at its conversion, leaving its unit to the next run."""

    def __init__(self) -> None:
        self.stage_seconds: dict[str, float] = {}

    def load(self, item: Item) -> Lines:
        assert item.image_path is not None
        return Lines(tuple(Path(item.image_path).read_text(encoding="utf-8").splitlines()))

    def prepare(self, batch: list[Loaded[Lines]]) -> list[Loaded[Lines]]:
        return [replace(x, payload=Lines(tuple(s.upper() for s in x.payload.lines)))
                if x.payload is not None else x for x in batch]

    def process(self, batch: list[Loaded[Lines]]) -> list[Outcome]:
        outcomes, todo = split_skipped(batch)
        for n in todo:
            item, payload = batch[n].item, batch[n].payload
            assert payload is not None
            if payload.lines[:1] == ("FAIL",):
                outcomes[n] = Outcome(item, retry_stage="conversion", detail="a bad file")
                continue
            outcomes[n] = Outcome(
                item, samples=[(f"{item.key}_{j}", [("txt", line.encode())])
                               for j, line in enumerate(payload.lines)],
                summed={"lines": len(payload.lines)})
        return completed(outcomes)


class OneShard(WorkUnit):
    """A unit whose inputs' samples, however many, all go in its one shard."""

    @property
    def capacity(self) -> int:
        return 1 << 62


def _run(src: Path, out: Path):
    (out / ".shardcook/progress").mkdir(parents=True, exist_ok=True)  # the driver's setup
    units: list[WorkUnit] = [OneShard(u.unit, u.start, u.stop) for u in plan_units(6, 3)]
    return run_units(local_run_folder(out), TextFiles(src, 6), units, LineSamples(), batch_size=2)


def test_a_jobs_own_payload_samples_counts_and_retries_pass_through_the_engine(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    texts = {0: "a\nb", 2: "c", 3: "d\ne\nf", 4: "FAIL", 5: "g"}  # 1.txt is missing
    for i, text in texts.items():
        (src / f"{i}.txt").write_text(text, encoding="utf-8")

    stats = _run(src, out)
    written = {key: dict(parts) for key, parts in read_shard(out / "000000.tar")}
    assert written == {"0000000000_0": {"txt": b"A"}, "0000000000_1": {"txt": b"B"},
                       "0000000002_0": {"txt": b"C"}}
    record = local_run_folder(out).read_markers([0]).get(0)
    assert record is not None
    assert record["media_totals"] == {"lines": 3} and record["written"] == 3
    assert [(s["key"], s["reason"]) for s in record["skipped"]] == [
        ("0000000001", "unreadable_image")]
    # the failed input's unit has neither shard nor marker, and is reported
    assert not (out / "000001.tar").exists() and local_run_folder(out).read_markers([1]) == {}
    assert stats.failed == [{"unit": 1, "stage": "conversion", "reason": "a bad file"}]

    (src / "4.txt").write_text("h\ni", encoding="utf-8")
    again = _run(src, out)
    assert (again.units_resumed, again.units_written) == (1, 1)
    assert [key for key, _ in read_shard(out / "000001.tar")] == [
        "0000000003_0", "0000000003_1", "0000000003_2", "0000000004_0", "0000000004_1",
        "0000000005_0"]
    second = local_run_folder(out).read_markers([1]).get(1)
    assert second is not None and second["media_totals"] == {"lines": 6}
