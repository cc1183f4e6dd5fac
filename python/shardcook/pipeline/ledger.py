"""The ledger of a run's units, which any worker reads: the unit markers (`progress/`), the
split the run started with (`.shardcook/ledger.json`: how many workers shared the units out,
unit u going to share u % N, and for a job array its first index) and the claim of the worker
that finalizes (`.shardcook/finalizing.json`, created only when absent, so exactly one worker
finalizes however many find every unit recorded at once).

Which units a worker takes (`units_for`): an array task of a run an array started takes its own
index's share of that split, whatever its new array's size (`sbatch --array=1` again does share
1); any other launch of M workers (torchrun, srun, one process, or an array resuming a run
something else started) splits the shares among its workers, worker i taking the shares s with
s % M == i. Every unit's output is independent of who writes it, so any of these ends with the
same bytes.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from shardcook.config.sections import OutputConfig
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import FINALIZE_JSON, FINALIZING_JSON, LEDGER_JSON, OURS_DIR
from shardcook.output.folder import OutputFolder, run_folder
from shardcook.output.lock import Holder
from shardcook.output.records import record_json
from shardcook.pipeline.plan import WorkUnit
from shardcook.workers import Place

LEDGER = f"{OURS_DIR}/{LEDGER_JSON}"
CLAIM = f"{OURS_DIR}/{FINALIZING_JSON}"
_FINALIZED = f"{OURS_DIR}/{FINALIZE_JSON}"
_WORKER_NAMES = {"array": "array index", "srun": "srun task", "torchrun": "rank", "one": "worker"}


@dataclass(frozen=True)
class Split:
    """How a run's `units` units were shared out: unit u to share u % `workers`; `launcher`
    started it, `first` is an array's first index (its share 0)."""

    workers: int
    units: int
    launcher: str
    first: int | None = None

    def share_of(self, unit: int) -> int:
        return unit % self.workers

    def worker(self, share: int) -> int:
        """The share's worker as its launcher numbers it (an array index, a rank)."""
        return share + (self.first or 0)

    def owners(self, units: list[int]) -> str:
        """Who `units` belong to: `array indexes 1, 3`, `rank 2`."""
        workers = sorted({self.worker(self.share_of(u)) for u in units})
        name = _WORKER_NAMES.get(self.launcher, "worker")
        plural = "es" if name.endswith("x") else "s"
        return f"{name}{plural if len(workers) > 1 else ''} {', '.join(map(str, workers))}"

    @classmethod
    def parse(cls, data: bytes, where: str) -> Split:
        try:
            d = json.loads(data)
            split = cls(int(d["workers"]), int(d["units"]), str(d["launcher"]),
                        None if d.get("first") is None else int(d["first"]))
            if split.workers >= 1 and split.units >= 0:
                return split
        except (ValueError, KeyError, TypeError):
            pass
        raise DatasetError(f"{where} is damaged; rerun with --overwrite to start over.")


def started_by(place: Place, units: int) -> Split:
    """The split a run that `place`'s launch starts records."""
    if place.launcher == "array":
        _consecutive(place)
        return Split(place.count, units, "array", place.first)
    return Split(place.count, units, place.launcher)


def _consecutive(place: Place) -> None:
    if not place.consecutive:
        raise ConfigError(
            f"This array's {place.count} tasks have indexes {place.first}..{place.last} with "
            "gaps, which cannot share out a run's units; start it with consecutive indexes "
            "(--array=0-N), or resubmit only the indexes `shardcook status` lists.")


def record_split(folder: OutputFolder, place: Place, units: int) -> Split:
    """The folder's split: the first worker records the one its launch starts; the others,
    and later launches, read that. A run that adds units (ingest's next split) keeps the split
    and records the new count.

    Raises:
        ConfigError: an array with gaps starting a run.
        DatasetError: the recorded split is damaged.
    """
    data = folder.read_file(LEDGER)
    if data is None:
        folder.create_file(LEDGER, record_json(asdict(started_by(place, units))))
        data = folder.read_file(LEDGER)
        assert data is not None  # created by now, by this worker or another
    split = Split.parse(data, f"{folder}/{LEDGER}")
    if split.units != units:
        split = replace(split, units=units)
        folder.write_file(LEDGER, record_json(asdict(split)).encode())
    return split


def read_split(folder: OutputFolder) -> Split | None:
    data = folder.read_file(LEDGER)
    return None if data is None else Split.parse(data, f"{folder}/{LEDGER}")


def units_for(units: list[WorkUnit], place: Place, split: Split) -> list[WorkUnit]:
    """The units worker `place` takes (see the module)."""
    if place.launcher == "array" and split.launcher == "array":
        assert place.task is not None and split.first is not None  # an array's
        index, count = place.task - split.first, split.workers
    else:
        if place.launcher == "array":
            _consecutive(place)
        index, count = place.index, place.count
    return [u for u in units if split.share_of(u.unit) % count == index]


def claim_finalize(folder: OutputFolder, me: Holder, place: Place) -> bool:
    """Whether this worker finalizes: it created the claim (of several at once, one does)."""
    record = {**asdict(me), "worker": place.describe(), "claimed": time.time()}
    return folder.create_file(CLAIM, record_json(record))


def claimant(folder: OutputFolder) -> str | None:
    """Who claimed finalizing (`array task 3 of job 12 (pid 4 on node1)`), or None."""
    data = folder.read_file(CLAIM)
    if data is None:
        return None
    try:
        d = json.loads(data)
        return f"{d['worker']} (pid {d['pid']} on {d['host']})"
    except (ValueError, KeyError, TypeError):
        return "another worker"


@dataclass(frozen=True)
class Status:
    """Where a run in an output folder stands (`shardcook status`)."""

    where: str
    complete: bool
    split: Split | None
    missing: list[int]
    finalizer: str | None

    @property
    def resubmit(self) -> str | None:
        """For a run an array started with units missing: `--array=1,5-7`."""
        if self.split is None or self.split.launcher != "array" or not self.missing:
            return None
        indexes = sorted({self.split.worker(self.split.share_of(u)) for u in self.missing})
        return f"--array={ranges(indexes)}"

    def lines(self) -> list[str]:
        if self.complete:
            return [f"{self.where}: complete."]
        if self.split is None:
            return [f"{self.where}: not complete, and the run recorded no split of its units; "
                    "rerun the same command to complete it."]
        if not self.missing:
            who = f", claimed by {self.finalizer}" if self.finalizer else ""
            return [f"{self.where}: all {self.split.units} units are done, but the dataset is not "
                    f"finalized{who}; if that worker is gone, rerun the same command once "
                    "without Slurm's variables (one process) to finalize."]
        lines = [f"{self.where}: {len(self.missing)} of {self.split.units} units are missing "
                 f"(of a run shared out among {self.split.workers} workers):"]
        by_share: dict[int, list[int]] = {}
        for u in self.missing:
            by_share.setdefault(self.split.share_of(u), []).append(u)
        for _, units in sorted(by_share.items()):
            lines.append(f"  {self.split.owners(units)}: units {ranges(units)}")
        if self.resubmit is not None:
            lines.append(f"resubmit them with sbatch {self.resubmit} (the same script).")
        else:
            lines.append("rerun the same command, with any number of workers, to complete them.")
        return lines

    def to_json(self) -> dict[str, Any]:
        split = self.split
        return {
            "output": self.where,
            "complete": self.complete,
            "split": None if split is None else asdict(split),
            "missing": [{"unit": u, "worker": split.worker(split.share_of(u))}
                        for u in self.missing] if split is not None else [],
            "finalizer": self.finalizer,
            "resubmit": self.resubmit,
        }


def ranges(numbers: list[int]) -> str:
    """`1,5-7` for [1, 5, 6, 7] (Slurm's --array syntax)."""
    parts: list[str] = []
    for n in sorted(set(numbers)):
        if parts and parts[-1].split("-")[-1] == str(n - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{n}"
        else:
            parts.append(str(n))
    return ",".join(parts)


def run_status(output: str) -> Status:
    """Where the run in `output` (a folder or a URL) stands, reading only its records.

    Raises:
        ConfigError: `output` holds no shardcook run, or cannot be read.
    """
    folder = run_folder(OutputConfig(output_dir=output))
    try:
        manifest = folder.read_manifest()
        split = read_split(folder)
        if manifest is None and split is None:
            raise ConfigError(f"{output!r} holds no shardcook run (no .shardcook/manifest.json).")
        missing: list[int] = []
        if split is not None:
            done = folder.read_markers(list(range(split.units)))
            missing = [u for u in range(split.units) if u not in done]
        finalize = bool(((manifest or {}).get("config") or {}).get("output", {}).get("finalize"))
        complete = bool((manifest or {}).get("complete")) and not missing and (
            not finalize or folder.read_file(_FINALIZED) is not None)
        return Status(str(folder), complete, split, missing, claimant(folder))
    finally:
        folder.close()
