"""The bounded prefetch -> process -> write loop over this rank's work units, with resume.

A reader thread pulls each unit's items from the source, reads each through the processor's
`load` (the job's payload: image bytes, a conversation's media, an input file) and runs its
`prepare` on each batch (encode: decode and resize; its image threads run while the main thread
still loads the encoders, and across batch boundaries) into a bounded queue; the main
thread hands the batches to the processor's `process` (raw: decode/resize/encode; encode: the
models); a writer thread writes the results in input order with one `ShardWriter` per unit. After
a unit's shard has its final name (in object storage: once uploaded), a progress marker records
the unit; a unit with a marker is skipped on the next run. Memory is bounded by `prefetch`
batches of `batch_size` items on each side of the processor, and the prepared batches waiting
for it by the processor's `prepared_budget` bytes as well (`bytesqueue.py`).
"""

from __future__ import annotations

import contextlib
import posixpath
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from shardcook._native import ShardWriter
from shardcook.dataset.media.meta import MediaFilter
from shardcook.dataset.media.records import UnitMedia
from shardcook.errors import SkipReason
from shardcook.output.folder import OutputFolder
from shardcook.pipeline.bytesqueue import BytesQueue
from shardcook.pipeline.plan import WorkUnit
from shardcook.pipeline.report import JsonObject
from shardcook.runtime import waits
from shardcook.sources.base import Item, Source

#: What a job's processor loads and prepares for one input (its `Processor.load`, then its
#: `prepare`): image bytes, a conversation's media, an input file; the engine only passes it on.
P = TypeVar("P")

#: One sample to write: its key and its (part name, bytes) pairs (bytes-like: an Arrow file's
#: rows are views of the file).
Sample = tuple[str, Sequence[tuple[str, Any]]]


@dataclass(frozen=True)
class Loaded(Generic[P]):
    """An input as the reader hands it on: its item and the job's `payload`, or, with no
    payload, why it is skipped (`item.skip`, or `skip` with its `detail`)."""

    item: Item
    payload: P | None = None
    skip: SkipReason | None = None
    detail: str | None = None


@dataclass
class Outcome:
    """What became of one input, as the engine records it: the samples it writes, or why it
    was skipped, or the failure that leaves its unit to the next run."""

    item: Item
    #: The samples to write: one under the input's key (`Outcome.of`) or several (a video's
    #: clips, an Arrow file's rows). None: the input is skipped (`skip`, `detail`).
    samples: Sequence[Sample] | None = None
    skip: SkipReason | None = None
    detail: str | None = None
    #: Counts the engine sums over the unit into its record's `media_totals`.
    summed: dict[str, int] | None = None
    #: The stage this input failed at (ingest: download, conversion): the engine leaves its
    #: unit without shard or marker, so the next run retries it, and reports it with `detail`.
    retry_stage: str | None = None

    @classmethod
    def of(cls, item: Item, parts: Sequence[tuple[str, Any]],
           summed: dict[str, int] | None = None) -> Outcome:
        """The outcome of an input written as one sample under its own key."""
        return cls(item, samples=[(item.key, parts)], summed=summed)


def split_skipped(batch: Sequence[Loaded[Any]]) -> tuple[list[Outcome | None], list[int]]:
    """Outcomes for the inputs already skipped (None elsewhere), and the indices left to process."""
    outcomes: list[Outcome | None] = [None] * len(batch)
    todo = []
    for n, loaded in enumerate(batch):
        reason = loaded.item.skip or loaded.skip
        if reason is not None:
            outcomes[n] = Outcome(loaded.item, skip=reason,
                                  detail=loaded.detail or loaded.item.skip_detail)
        else:
            todo.append(n)
    return outcomes, todo


def each_unskipped(batch: list[Loaded[P]], work: Callable[[Loaded[P]], Loaded[P]],
                   pool: Executor) -> list[Loaded[P]]:
    """`batch` with `work` run in `pool`'s threads on each input not already skipped (a
    processor's `prepare`: each video decoded, each image fitted), in order."""
    _, todo = split_skipped(batch)
    prepared = list(batch)
    for n, loaded in zip(todo, pool.map(work, [batch[n] for n in todo]), strict=True):
        prepared[n] = loaded
    return prepared


def completed(outcomes: list[Outcome | None]) -> list[Outcome]:
    """The outcomes of a processed batch, where every input has one by now."""
    done = [o for o in outcomes if o is not None]
    assert len(done) == len(outcomes), "a processor left an input without an outcome"
    return done


class Processor(Generic[P]):
    """Turns loaded inputs into sample parts, one outcome per input, in order; `P` is what it
    loads and prepares for each input.

    The loop calls `start` once the reader runs, `load` on the reader thread for each input
    and `prepare` for each batch, and `process` on the main thread for each batch.
    """

    stage_seconds: dict[str, float]
    #: The most bytes of prepared batches (`prepared_bytes`) that may wait for `process`; 0:
    #: only the loop's count of batches bounds them. A batch larger than this still passes,
    #: alone.
    prepared_budget: int = 0

    def start(self) -> None:
        """Loads what `process` needs (the encoders) while the first batches are prepared."""

    def load(self, item: Item) -> P:
        """Reads one input that its source did not skip (an image's bytes, a conversation's
        media); an OSError skips it as unreadable."""
        raise NotImplementedError

    def prepare(self, batch: list[Loaded[P]]) -> list[Loaded[P]]:
        """The CPU work that needs no model, ahead of `process`."""
        return batch

    def prepared_bytes(self, batch: list[Loaded[P]]) -> int:
        """The memory a batch `prepare` returned holds (encode: its decoded pixels), which the
        loop counts against `prepared_budget`; 0 when not counted."""
        return 0

    def process(self, batch: list[Loaded[P]]) -> list[Outcome]:
        raise NotImplementedError

    def close(self) -> None:
        """Stops what the processor runs on its own (ingest: its downloads); called once the
        loop ends, also on an error or Ctrl-C."""


@dataclass
class RunStats:
    """What this rank did in this run."""

    units_total: int = 0
    units_resumed: int = 0
    units_written: int = 0
    inputs: int = 0
    written: int = 0
    skipped: int = 0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    #: The most scratch space used at once (object storage's staged shards); None for a local
    #: output folder.
    scratch_peak_bytes: int | None = None
    #: The most bytes of prepared batches waiting for the processor at once, as its
    #: `prepared_bytes` counts them; None when it counts none.
    prepared_peak_bytes: int | None = None
    #: The units left unfinished by a failed input: {"unit", "stage", "reason"} each.
    failed: list[JsonObject] = field(default_factory=list)


def load(processor: Processor[P], item: Item) -> Loaded[P]:
    """The item as `processor.load` reads it; an unreadable input becomes a skip."""
    if item.skip is not None:
        return Loaded(item)
    try:
        return Loaded(item, processor.load(item))
    except OSError as e:
        return Loaded(item, skip="unreadable_image", detail=e.strerror or str(e))


def skip_record(key: str | None, source: str, reason: SkipReason, detail: str | None = None,
                **extra: object) -> JsonObject:
    rec: JsonObject = {"key": key, "source": source, "reason": reason}
    if detail:
        rec["detail"] = detail
    rec.update(extra)
    return rec


#: The last message on the reader's and the writer's queues.
_END: Final = "stop"

#: Reader -> main thread: ("batch", unit, inputs), ("end", unit, None), ("error", None, exception)
#: and finally (_END, None, None).
_ReaderMessage = tuple[str, "WorkUnit | None", "list[Loaded[Any]] | BaseException | None"]
#: Main -> writer thread: ("batch", unit, outcomes), ("end", unit, None), (_END, None, None).
_WriterMessage = tuple[str, "WorkUnit | None", "list[Outcome] | None"]


def _reader(source: Source, units: list[WorkUnit], batch_size: int,
            processor: Processor[P], q: BytesQueue[_ReaderMessage],
            stop: threading.Event, seconds: list[float]) -> None:
    """Puts ("batch", unit, prepared [Loaded]) and ("end", unit, None) on `q`; exceptions are
    forwarded."""

    def put_prepared(unit: WorkUnit, batch: list[Loaded[P]]) -> None:
        prepared = processor.prepare(batch)
        q.put(("batch", unit, prepared), processor.prepared_bytes(prepared))

    try:
        for unit in units:
            batch: list[Loaded[P]] = []
            t0 = time.perf_counter()
            for item in source.items(unit.start, unit.stop):
                batch.append(load(processor, item))
                if len(batch) == batch_size:
                    seconds[0] += time.perf_counter() - t0
                    put_prepared(unit, batch)
                    if stop.is_set():
                        return
                    batch, t0 = [], time.perf_counter()
            seconds[0] += time.perf_counter() - t0
            if batch:
                put_prepared(unit, batch)
            q.put(("end", unit, None))
            if stop.is_set():
                return
        q.put((_END, None, None))
    except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
        q.put(("error", None, e))


def _batches(source: Source, units: list[WorkUnit], batch_size: int,
             processor: Processor[P], q: BytesQueue[_ReaderMessage], seconds: list[float]
             ) -> Iterator[tuple[str, WorkUnit, list[Loaded[P]] | None]]:
    """The reader's messages, through `q`, in order; seconds[0] += reading, seconds[1] +=
    waiting for them."""
    stop = threading.Event()
    t = threading.Thread(target=_reader,
                         args=(source, units, batch_size, processor, q, stop, seconds),
                         name="shardcook-reader", daemon=True)
    t.start()
    try:
        processor.start()
        while True:
            t0 = time.perf_counter()
            kind, unit, payload = q.get()
            seconds[1] += time.perf_counter() - t0
            if kind == _END:
                return
            if isinstance(payload, BaseException):  # the reader failed
                raise payload
            assert unit is not None  # every other message names its unit
            yield kind, unit, payload
    finally:
        stop.set()
        while t.is_alive():  # unblock a reader waiting on a full queue
            with contextlib.suppress(queue.Empty):
                q.get(timeout=0.05)


class _UnitWriter:
    """Writes outcomes to shards and records finished units, on its own thread.

    The main thread hands it ("batch", unit, outcomes) and ("end", unit, None) through a bounded
    queue, so writing the previous batch overlaps processing the next one. An error on this
    thread is re-raised in the main thread at its next `put`, or by `run_units` after `close`.
    With a `media` filter, it also computes each written part's media metadata row from the
    bytes it writes, handed to `finish_unit` with the unit's record.
    """

    def __init__(self, folder: OutputFolder, stats: RunStats,
                 on_progress: Callable[[str, int], None] | None, depth: int = 2,
                 media: MediaFilter | None = None) -> None:
        self.folder, self.stats, self.on_progress = folder, stats, on_progress
        self.media = media
        self.seconds = self.media_seconds = 0.0
        self.error: BaseException | None = None
        self._q: queue.Queue[_WriterMessage] = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, name="shardcook-writer", daemon=True)
        self._thread.start()

    def put(self, kind: str, unit: WorkUnit, outcomes: list[Outcome] | None) -> None:
        while True:
            if self.error is not None:
                raise self.error
            try:
                self._q.put((kind, unit, outcomes), timeout=0.05)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Writes everything handed over, then stops. A unit whose end was never handed over
        is not recorded and its shard is removed (the next run redoes it)."""
        while self._thread.is_alive():
            try:
                self._q.put((_END, None, None), timeout=0.05)
                break
            except queue.Full:
                continue
        waits.join(self._thread)

    def _run(self) -> None:
        writer: ShardWriter | None = None
        record: JsonObject = {}
        media: UnitMedia | None = None
        failed: int | None = None  # the unit whose input failed: the rest of it is dropped
        try:
            while True:
                kind, unit, outcomes = self._q.get()
                if kind == _END:
                    return
                assert unit is not None  # every other message names its unit
                t0 = time.perf_counter()
                if unit.unit == failed:
                    failed = None if outcomes is None else failed
                    continue
                if writer is None:
                    writer, record = self._open(unit)
                    media = UnitMedia(self.media) if self.media is not None else None
                if outcomes is not None:  # a batch
                    failure = self._write(writer, record, outcomes, media)
                    if failure is not None:
                        writer.abort()
                        writer, failed = None, unit.unit
                        self.stats.failed.append({"unit": unit.unit, **failure})
                else:  # end of unit
                    shards = writer.close()
                    writer = None
                    if shards:
                        record["shard"] = posixpath.join(unit.folder, shards[0][0])
                    self.folder.finish_unit(unit.unit, record, media)
                    self._count(record)
                self.seconds += time.perf_counter() - t0
                if self.on_progress:
                    if outcomes is not None:
                        self.on_progress("samples", len(outcomes))
                    else:
                        self.on_progress("unit", 1)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            self.error = e
        finally:
            if writer is not None:
                writer.abort()

    def _open(self, unit: WorkUnit) -> tuple[ShardWriter, JsonObject]:
        # a shard without a marker was cut off before its unit was recorded: redo it
        self.folder.discard_shard(unit.name)
        writer = ShardWriter(self.folder.shard_dir / unit.folder, shard_size=unit.capacity,
                             prefix=unit.prefix, first_shard=unit.number)
        record: JsonObject = {"unit": unit.unit, "start": unit.start, "stop": unit.stop,
                              "shard": None, "inputs": 0, "written": 0, "empty_captions": 0,
                              "skipped": []}
        return writer, record

    def _write(self, writer: ShardWriter, record: JsonObject, outcomes: list[Outcome],
               media: UnitMedia | None) -> JsonObject | None:
        """Writes the outcomes into the unit's shard (and their rows into `media`); returns the
        first failed input's stage and reason, writing nothing more, when one failed."""
        for o in outcomes:
            if o.retry_stage is not None:
                return {"stage": o.retry_stage, "reason": o.detail}
            record["inputs"] += 1
            for ex in o.item.extras:
                used = {"used": ex.used} if ex.used is not None else {}
                record["skipped"].append(
                    skip_record(None, ex.source, ex.reason, **used, input_key=o.item.key))
            if o.samples is None:
                record["skipped"].append(
                    skip_record(o.item.key, o.item.source, o.skip or "unknown", o.detail))
                continue
            for key, parts in o.samples:
                writer.write(key, parts)
                record["written"] += 1
                if media is not None:
                    t0 = time.perf_counter()
                    media.add(key, parts)
                    self.media_seconds += time.perf_counter() - t0
            if o.summed:
                sums = record.setdefault("media_totals", {})
                for name, value in o.summed.items():
                    sums[name] = sums.get(name, 0) + value
            if o.item.caption == "":
                record["empty_captions"] += 1
        return None

    def _count(self, record: JsonObject) -> None:
        s = self.stats
        s.units_written += 1
        s.inputs += record["inputs"]
        s.written += record["written"]
        # an input may give several samples (video frames, an Arrow file's rows): count skips
        s.skipped += sum(1 for skip in record["skipped"] if skip["key"] is not None)


def run_units(
    folder: OutputFolder,
    source: Source,
    units: list[WorkUnit],
    processor: Processor[Any],
    *,
    batch_size: int = 32,
    prefetch: int = 2,
    on_progress: Callable[[str, int], None] | None = None,
    media: MediaFilter | None = None,
) -> RunStats:
    """Processes and writes every unit in `units` that is not already done.

    Three threads overlap: the reader loads and prepares the next batches, this thread runs
    `processor.process`, the writer writes the previous batch's outcomes. Stage `input_wait` is
    this thread's time waiting for the reader.

    Args:
        on_progress: called with ("unit", 1) per finished unit and ("samples", n) per batch.
        media: record the media metadata rows of the parts this filter takes, per unit, as
            they are written (stage `media_rows`: the writer thread's time on them).
    """
    stats = RunStats(units_total=len(units))
    pending = []
    done = folder.read_markers([unit.unit for unit in units])
    for unit in units:
        if unit.unit in done:
            stats.units_resumed += 1
            if on_progress:
                on_progress("unit", 1)
                on_progress("samples", len(unit))
        else:
            pending.append(unit)
    reader_seconds = [0.0, 0.0]  # reading, and waiting for the reader
    prepared: BytesQueue[_ReaderMessage] = BytesQueue(prefetch, processor.prepared_budget)
    writer = _UnitWriter(folder, stats, on_progress, depth=max(prefetch, 1), media=media)
    try:
        for kind, unit, payload in _batches(source, pending, batch_size, processor, prepared,
                                            reader_seconds):
            if payload is not None:  # a batch
                writer.put(kind, unit, processor.process(payload))
            else:
                writer.put(kind, unit, None)
    finally:
        processor.close()
        writer.close()
    if writer.error is not None:
        raise writer.error
    folder.flush()  # every unit written is recorded (object storage: uploaded) by now
    stats.scratch_peak_bytes = folder.scratch_peak_bytes()
    stats.prepared_peak_bytes = prepared.peak_bytes or None
    stage = Counter({"read": reader_seconds[0], "input_wait": reader_seconds[1],
                     "write": writer.seconds - writer.media_seconds,
                     **({"media_rows": writer.media_seconds} if media is not None else {})})
    stage.update(processor.stage_seconds)
    stats.stage_seconds = dict(stage)
    return stats
