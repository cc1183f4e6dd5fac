"""`ingest` as a job of the shared engine: one work unit per Arrow file, each split's units in
name order in the split's own folder (`SPLIT/SPLIT-shard-NNNNNN.tar`, unit n of a split is
shard n), the processor downloading ahead (`prefetch.py`) and converting one file into one
shard (`arrow.py`), and finalize naming each split's folder (`SPLIT: SPLIT/.*`).

A dataset can be ingested a split per command: an earlier run's splits that this run does not
name are kept (their inputs stay in the plan, their units are done), and a split both name must
have the same inputs. A file that fails to download or convert leaves its unit unfinished (no
shard, no marker), is reported, and is retried by the next run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from shardcook.config import RunConfig
from shardcook.config.ingest import IngestConfig
from shardcook.dataset import metadata
from shardcook.dataset.view import DatasetView
from shardcook.errors import ConfigError, DuplicateKeyError, ShardcookError
from shardcook.jobs.ingest.arrow import Shapes, samples, shard_shapes
from shardcook.jobs.ingest.download import (
    ManifestEntry,
    download,
    fetch_manifest,
    safe_name,
)
from shardcook.jobs.ingest.first_ingest import is_first_ingests, recorded_inputs, upgrade_markers
from shardcook.jobs.ingest.plan import Input, refuse_inputs_inside, this_runs_inputs
from shardcook.jobs.ingest.prefetch import DOWNLOADS_PREFIX, Prefetch
from shardcook.layouts.mlperf import MLPERF
from shardcook.layouts.names import FINALIZE_JSON, OURS_DIR
from shardcook.output.folder import OutputFolder
from shardcook.pipeline import report as rep
from shardcook.pipeline.plan import SplitUnit, WorkUnit
from shardcook.pipeline.report import JsonObject
from shardcook.pipeline.run import Loaded, Outcome, Processor
from shardcook.runtime.workers import Place
from shardcook.sources.base import Item
from shardcook.storage.store import Store
from shardcook.storage.urls import redact

log = logging.getLogger(__name__)

#: One file is one shard, whatever its row count.
ONE_SHARD = 1 << 62


class FileUnit(SplitUnit):
    """Input file `start` (one file), written to shard `shard` in its split's folder."""

    @property
    def folder(self) -> str:
        return self.split

    @property
    def capacity(self) -> int:
        return ONE_SHARD


def split_parts(splits: Iterable[str]) -> dict[str, str]:
    """The dataset's split parts, as Primus's finalize names them: `SPLIT: SPLIT/.*`."""
    return {split: f"{split}/.*" for split in splits}


class IngestSource:
    """The Arrow files of every split, in plan order; an item stands for its file."""

    def __init__(self, inputs: list[Input]) -> None:
        self.inputs = inputs

    def __len__(self) -> int:
        return len(self.inputs)

    def items(self, start: int, stop: int) -> Iterator[Item]:
        for index in range(start, stop):
            yield Item(index, self.inputs[index].source)

    def describe(self) -> dict[str, Any]:
        return {"type": "mlperf_arrow", "inputs": [i.describe() for i in self.inputs]}


class IngestProcessor(Processor[Input]):
    """Converts each unit's file (the input its item stands for) into its shard's rows;
    downloads run ahead on their own threads, at most --prefetch-depth files on disk, each
    deleted once converted."""

    def __init__(self, inputs: list[Input], prefetch: Prefetch) -> None:
        self.inputs = inputs
        self.prefetch = prefetch
        self.shapes: dict[str, Shapes] = {}
        self.stage_seconds: dict[str, float] = {}
        self.bytes_in = 0

    def start(self) -> None:
        self.prefetch.start()

    def load(self, item: Item) -> Input:
        return self.inputs[item.index]

    def process(self, batch: list[Loaded[Input]]) -> list[Outcome]:
        return [self._convert(loaded) for loaded in batch]

    def _convert(self, loaded: Loaded[Input]) -> Outcome:
        item, one = loaded.item, loaded.payload
        assert one is not None  # an ingest item is never skipped
        stage, path = "download", one.local
        try:
            if path is None:
                path = self.prefetch.take(one)
            stage = "conversion"
            size = path.stat().st_size
            shapes = dict(self.shapes.get(one.split, {}))
            rows = list(samples(path, f"{one.index:06d}", shapes))
            self.shapes[one.split] = shapes
            self.bytes_in += size
            return Outcome(item, samples=rows)
        except (ShardcookError, OSError) as e:
            log.warning("%s: %s failed: %s", one.name, stage, e)
            return Outcome(item, retry_stage=stage, detail=str(e))
        finally:
            # the rows are views of the memory-mapped file, which outlives its name
            self.prefetch.done_with(one)

    def close(self) -> None:
        self.prefetch.close()


class IngestJob:
    """`shardcook ingest` as a job (`cfg.output` says where; `ingest` what to read)."""

    layout = MLPERF
    batch_size = 1
    prefetch = 1
    backend = "gloo"
    manifest_extra: JsonObject | None = None

    def __init__(self, cfg: RunConfig, ingest: IngestConfig) -> None:
        self.cfg, self.ingest = cfg, ingest
        self.inputs: list[Input] = []
        self.skipped: list[JsonObject] = []
        self.units_: list[FileUnit] = []
        self.processor_: IngestProcessor | None = None
        #: The empty-caption encodings' manifest: (base URL, entries).
        self.empty: tuple[str, list[ManifestEntry]] | None = None
        #: Each written shard's input file, by the shard's path in the dataset.
        self.shard_inputs: dict[str, Input] = {}

    def running(self, place: Place) -> AbstractContextManager[object]:
        return nullcontext()

    def source(self, cfg: RunConfig, folder: OutputFolder) -> IngestSource:
        """Reads the manifests (names checked) and the earlier run's inputs from the run's
        `folder`, refusing an input the run would delete, before any work.

        Raises:
            ConfigError: bad inputs, another layout or other inputs for a split in the folder.
        """
        self.skipped = []
        ours = this_runs_inputs(self.ingest, self.skipped)
        empty = self.ingest.empty_encodings
        self.empty = (fetch_manifest(empty.manifest_url, self.ingest.retry)
                      if empty is not None else None)
        old = None if cfg.output.overwrite else folder.read_manifest()
        refuse_inputs_inside(folder, cfg.output.overwrite, ours, self.ingest)
        self.inputs = _with_earlier(str(folder), ours, old)
        shard = dict.fromkeys((i.split for i in self.inputs), 0)
        self.units_ = []
        for number, one in enumerate(self.inputs):
            self.units_.append(FileUnit(number, number, number + 1, split=one.split,
                                        shard=shard[one.split]))
            shard[one.split] += 1
        return IngestSource(self.inputs)

    def units(self, source: Any) -> list[WorkUnit]:
        return list(self.units_)

    def processor(self, cfg: RunConfig, folder: OutputFolder, place: Place,
                  units: list[WorkUnit]) -> IngestProcessor:
        done = folder.read_markers([u.unit for u in units])
        upgrade_markers(folder, units, done)
        finished = folder.read_markers([u.unit for u in self.units_])
        pending = [self.inputs[u.start] for u in units if u.unit not in done]
        prefetch = Prefetch(pending, self.ingest, folder.local_space(DOWNLOADS_PREFIX))
        self.processor_ = IngestProcessor(self.inputs, prefetch)
        self.processor_.shapes = self._finished_shapes(folder.location.store, finished)
        return self.processor_

    def _finished_shapes(self, store: Store, finished: dict[int, JsonObject],
                         ) -> dict[str, Shapes]:
        """Each split's tensor shapes, from its first finished shard in an earlier run (in the
        output folder's `store`): a resumed run's files are checked against the same shapes as
        the earlier run's."""
        shapes: dict[str, Shapes] = {}
        for unit in self.units_:
            shard = finished.get(unit.unit, {}).get("shard")
            split = self.inputs[unit.start].split
            if isinstance(shard, str) and split not in shapes:
                shapes[split] = shard_shapes(store, shard)
        return {split: found for split, found in shapes.items() if found}

    def finalize(self, view: DatasetView, report: JsonObject) -> None:
        from shardcook.dataset.finalize import finalize_run

        parts = split_parts(s for s, r in report["splits"].items() if r["shards"])
        try:
            finalize_run(view, self.layout, split_parts=parts)
        except DuplicateKeyError as e:
            # the index names shards; the user knows the input files (two with the same bytes)
            said = str(e)
            for shard, one in self.shard_inputs.items():
                said = said.replace(shard, f"{shard} (input {one.source})")
            raise DuplicateKeyError(said) from None

    def resume_differences(self, old: JsonObject, new: JsonObject) -> list[str]:
        """The engine's differences but for the inputs, which `source` compared split by split
        (an earlier run's other splits are kept); the first ingest's manifest recorded nothing
        else that mattered but the encoding."""
        if is_first_ingests(old):
            old = {**new, "encoding": old.get("encoding")}
        return rep.compare_manifest(
            {**old, "source": new["source"], "num_inputs": new["num_inputs"]}, new)

    def finish_units(self, folder: OutputFolder, records: list[JsonObject],
                     failed: list[JsonObject]) -> JsonObject:
        """Downloads the empty-caption encodings; reports per split files, shards and samples,
        every failed file with its stage and reason, the manifest entries skipped and the most
        downloads on disk at once."""
        failures = [{**self.inputs[self.units_[f["unit"]].start].describe(),
                     "stage": f["stage"], "reason": f["reason"]} for f in failed]
        empty = self._empty_encodings(folder, failures)
        splits: dict[str, JsonObject] = {}
        for one in self.inputs:
            splits.setdefault(one.split, {"files": 0, "shards": {}, "samples": 0})["files"] += 1
        for record in records:
            split = splits[self.inputs[record["start"]].split]
            if record["shard"] is not None:
                self.shard_inputs[record["shard"]] = self.inputs[record["start"]]
                split["shards"][record["shard"]] = record["written"]
                split["samples"] += record["written"]
        if not self.cfg.output.finalize and any(s["shards"] for s in splits.values()):
            # so that a later `shardcook finalize` keeps the split folders
            kept_splits = metadata.FinalizeRecord(
                encoding=MLPERF.encoding,
                split_parts=split_parts(s for s, r in splits.items() if r["shards"]))
            folder.write_file(f"{OURS_DIR}/{FINALIZE_JSON}",
                              json.dumps(kept_splits.to_dict(), indent=2).encode())
        proc = self.processor_
        return {
            "files": len(self.inputs),
            "failed": failures,
            "skipped": self.skipped,
            "num_skipped": len(self.skipped),
            "splits": splits,
            "samples": sum(s["samples"] for s in splits.values()),
            "peak_downloads_on_disk": proc.prefetch.peak if proc else 0,
            "bytes_converted": proc.bytes_in if proc else 0,
            "empty_encodings": empty,
        }

    def _empty_encodings(self, folder: OutputFolder, failed: list[JsonObject]) -> list[str]:
        """Downloads the empty-caption encodings (small `.npy` files) into the run's `folder`; a
        file already there with the right MD5 is kept, one that fails is added to `failed`."""
        if self.empty is None or self.ingest.empty_encodings is None:
            return []
        subdir = self.ingest.empty_encodings.output_subdir
        base, entries = self.empty
        names = []
        with tempfile.TemporaryDirectory(dir=self.cfg.output.scratch_dir) as scratch:
            for e in entries:
                try:
                    there = folder.read_file(f"{subdir}/{e.name}")
                    if there is None or hashlib.md5(there).hexdigest() != e.md5:
                        dest = Path(scratch) / safe_name(e.name)
                        download(f"{base}/{e.name}", dest, e.md5, self.ingest.retry)
                        folder.write_file(f"{subdir}/{e.name}", dest.read_bytes())
                    names.append(e.name)
                except (ShardcookError, OSError) as err:
                    failed.append({"split": None, "file": e.name, "md5": e.md5,
                                   "source": redact(f"{base}/{e.name}"), "stage": "download",
                                   "reason": str(err)})
        return names


def _with_earlier(where: str, ours: list[Input], old: JsonObject | None) -> list[Input]:
    """This run's inputs after those of an earlier run's splits that this run does not name.

    Raises:
        ConfigError: the folder holds another layout, or other inputs for one of the splits.
    """
    if old is None:
        return ours
    recorded = recorded_inputs(old)
    if old.get("encoding") != MLPERF.encoding or not isinstance(recorded, list) or not all(
            isinstance(entry, dict) for entry in recorded):
        raise ConfigError(f"{where} holds another layout; use --overwrite to start again, or a "
                          "new --output-dir")
    earlier: dict[str, list[Input]] = {}
    for entry in recorded:
        kept = earlier.setdefault(str(entry.get("split")), [])
        kept.append(Input.recorded(entry, len(kept)))
    mine: dict[str, list[Input]] = {}
    for one in ours:
        mine.setdefault(one.split, []).append(one)
    for split, members in mine.items():
        if split in earlier and [e.describe() for e in earlier[split]] != [
                m.describe() for m in members]:
            raise ConfigError(
                f"{where} holds an earlier run with other inputs for the {split} split; use the "
                "same inputs to resume, --overwrite to start again, or a new --output-dir")
    order = [*earlier, *(s for s in mine if s not in earlier)]
    return ([one for split in order for one in mine.get(split, earlier.get(split, []))])

