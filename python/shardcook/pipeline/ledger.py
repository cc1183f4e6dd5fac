"""The ledger of a run's units, which any worker reads: the unit markers (`progress/`), the
split the run started with (`.shardcook/ledger.json`: how many workers shared the units out,
unit u going to share u % N, and for a job array its first index) and the claim of the worker
that finalizes (`.shardcook/finalizing-N.json`, one per unit count, created only when absent, so
exactly one worker finalizes however many find every unit recorded at once).

Which units a worker takes (`units_for`): an array task of a run an array started takes its own
index's share of that split, whatever its new array's size (`sbatch --array=1` again does share
1); any other launch of M workers (torchrun, srun, one process, or an array resuming a run
something else started) splits the shares among its workers, worker i taking the shares s with
s % M == i. Every unit's output is independent of who writes it, so any of these ends with the
same bytes.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeGuard

from shardcook.config.sections import OutputConfig
from shardcook.errors import ConfigError, DatasetError, ShardcookError
from shardcook.layouts import by_encoding
from shardcook.layouts.base import ENERGON_FINALIZED
from shardcook.layouts.names import LEDGER_JSON, MANIFEST_JSON, OURS_DIR, finalizing_json
from shardcook.output.folder import OutputFolder, run_folder
from shardcook.output.lock import Holder
from shardcook.output.records import record_json
from shardcook.pipeline.plan import WorkUnit
from shardcook.runtime.workers import Place

LEDGER = f"{OURS_DIR}/{LEDGER_JSON}"
#: How `shardcook status` names its argument.
_STATUS_OUTPUT = "The run's output folder"
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
        """The split `data` records, every field in its range (an array's `first` an index
        of 0 or more, any other launch's none), or DatasetError."""
        try:
            d = json.loads(data)
        except (ValueError, RecursionError):
            d = None
        if isinstance(d, dict):
            workers, units, launcher, first = (d.get(k) for k in ("workers", "units",
                                                                  "launcher", "first"))
            if (_count(workers) and workers >= 1 and _count(units)
                    and launcher in _WORKER_NAMES
                    and (_count(first) if launcher == "array" else first is None)):
                return cls(workers, units, launcher, first)
        raise damaged(where)


def _count(value: object) -> TypeGuard[int]:
    """A whole number of 0 or more (not a bool, a float or a string)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def damaged(where: str, why: str = "") -> DatasetError:
    """A damaged ledger: it only records how the units were shared out, so removing it loses
    nothing; the next launch records its own split and skips the units already done."""
    return DatasetError(
        f"{where} is damaged{why}; it only records how the run's units were shared out, so "
        "remove it and rerun the run's command: the finished units are kept.")


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
    """The units worker `place` takes (see the module).

    Raises:
        ConfigError: `place` cannot take a share of `split` (`check_joins`).
    """
    index, count = _share(place, split)
    return [u for u in units if split.share_of(u.unit) % count == index]


def _share(place: Place, split: Split) -> tuple[int, int]:
    """(index, count): worker `place` takes the shares s of `split` with s % count == index."""
    if place.launcher == "array" and split.launcher == "array":
        assert place.task is not None and split.first is not None  # an array's
        index = place.task - split.first
        if not 0 <= index < split.workers:  # it would take no unit, yet say it is done
            last = split.first + split.workers - 1
            raise ConfigError(
                f"Array index {place.task} is not one of this run's: its units were shared "
                f"out among array indexes {split.first}..{last}; resubmit only the indexes "
                "`shardcook status` lists.")
        return index, split.workers
    if place.launcher == "array":
        _consecutive(place)
    return place.index, place.count


def check_joins(folder: OutputFolder, place: Place) -> None:
    """Refuses, before this worker writes anything, a launch that cannot take a share of the
    folder's split: an array with gaps starting a run (or resuming one something else
    started), an array index outside the split of the array that started it.

    Raises:
        ConfigError: as `units_for`.
        DatasetError: the recorded split is damaged.
    """
    split = read_split(folder)
    if split is not None:
        _share(place, split)
    elif place.launcher == "array":
        _consecutive(place)


def _claim(split: Split) -> str:
    return f"{OURS_DIR}/{finalizing_json(split.units)}"


def claim_finalize(folder: OutputFolder, me: Holder, place: Place, split: Split) -> bool:
    """Whether this worker finalizes `split`'s units: it created their claim (of several at
    once, one does)."""
    record = {**asdict(me), "worker": place.describe(), "claimed": time.time()}
    return folder.create_file(_claim(split), record_json(record))


def claimant(folder: OutputFolder, split: Split | None) -> str | None:
    """Who claimed finalizing `split`'s units (`array task 3 of job 12 (pid 4 on node1)`), or
    None."""
    data = None if split is None else folder.read_file(_claim(split))
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
    #: Why a run that asked for finalize is not finalized though every unit is done (`a
    #: finalize was interrupted: .shardcook-undo-x is left`); None otherwise.
    unfinalized: str | None = None

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
            why = f" ({self.unfinalized})" if self.unfinalized else ""
            who = f", claimed by {self.finalizer}" if self.finalizer else ""
            gone = "if that worker is gone, " if self.finalizer else ""
            return [f"{self.where}: all {self.split.units} units are done, but the dataset is not "
                    f"finalized{why}{who}; {gone}rerun the same command once without Slurm's "
                    "variables (one process) to finalize."]
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
            "unfinalized": self.unfinalized,
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
        ConfigError: `output` is not a folder, holds no shardcook run, or cannot be read.
        DatasetError: its records are damaged.
        ShardcookIOError: its store cannot be reached.
    """
    if not output:
        raise ConfigError(f"{_STATUS_OUTPUT} is empty; name the folder (or URL) a run wrote.")
    config = OutputConfig(output_dir=output)
    location = config.located("output_dir", _STATUS_OUTPUT)  # sentences name it as status does
    assert not isinstance(location, list) and location is not None  # one place, given
    # nothing there, or a file (in a bucket: no object under it, or one named as the folder);
    # a store that cannot say is left to the records' reads, which say why
    with contextlib.suppress(OSError):
        there = location.store.what_is()
        if there is None:
            raise ConfigError(f"{_STATUS_OUTPUT} {str(location.store)!r} does not exist; name "
                              "the folder a run wrote.")
        if there == "file":
            raise ConfigError(f"{_STATUS_OUTPUT} {str(location.store)!r} is a file, not a "
                              "folder; name the folder a run wrote.")
    folder = run_folder(config, _STATUS_OUTPUT)
    try:
        return _status(folder, output)
    except OSError as e:
        if isinstance(e, ShardcookError):
            raise
        raise DatasetError(f"{folder}: its records cannot be read ({e.strerror or e}).") from None
    finally:
        folder.close()


def _status(folder: OutputFolder, output: str) -> Status:
    manifest = folder.read_manifest()
    split = read_split(folder)
    if manifest is None and split is None:
        raise ConfigError(f"{output!r} holds no shardcook run (no .shardcook/manifest.json).")
    missing: list[int] = []
    if split is not None:
        _check_units(folder, split, manifest)
        done = folder.read_markers(list(range(split.units)))
        missing = [u for u in range(split.units) if u not in done]
    finalize = bool(((manifest or {}).get("config") or {}).get("output", {}).get("finalize"))
    recorded = bool((manifest or {}).get("complete")) and not missing
    layout = by_encoding(str((manifest or {}).get("encoding")))
    finalized = layout.finalized if layout is not None else ENERGON_FINALIZED
    unfinalized = _unfinalized(folder, finalized) if recorded and finalize else None
    return Status(str(folder), recorded and unfinalized is None, split, missing,
                  claimant(folder, split), unfinalized)


def _check_units(folder: OutputFolder, split: Split, manifest: dict[str, Any] | None) -> None:
    """Refuses a ledger whose unit count the manifest cannot have: every unit holds at least one
    input (a damaged count would have status list, or hold in memory, units no run has)."""
    if manifest is None:
        raise DatasetError(f"{folder} holds a run's {LEDGER} but not its "
                           f"{OURS_DIR}/{MANIFEST_JSON}, so its records are damaged.")
    inputs = manifest.get("num_inputs")
    if not (_count(inputs) and split.units <= inputs):
        says = f"{inputs} inputs" if _count(inputs) else "no number of inputs"
        raise damaged(f"{folder}/{LEDGER}", f": it records {split.units} units, but the run's "
                      f"manifest.json records {says}")


def _unfinalized(folder: OutputFolder, finalized: tuple[str, ...]) -> str | None:
    """Why the dataset in `folder` is not finalized: an interrupted finalize's undo folder, or
    a file of `finalized` (what its layout's finalize writes last) that is missing; None when
    it is finalized."""
    left = folder.interrupted_finalize()
    if left is not None:
        return f"a finalize was interrupted: {left} is left"
    missing = [name for name in finalized if folder.read_file(name) is None]
    if missing:
        return f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
    return None
