"""`shardcook ingest`: MLCommons's pre-encoded Arrow files (local, or downloaded from a manifest)
into one `preencoded_numpy` dataset, one shard per file, laid out as Primus's `data
diffusion-ingest` writes it: `OUTPUT_DIR/SPLIT/` holds each split's shards and the dataset at
`OUTPUT_DIR` names them by the split parts `SPLIT: SPLIT/.*`.

Shard n of a split comes from its n-th file in name order, whatever order downloads finish in;
daemon threads download ahead while at most `prefetch_depth` downloaded files are on disk, and
each is deleted once converted (a user's local files never are). A shard gets its name only
when whole, then its progress marker; a rerun skips marked files and redoes the rest, dropping
a shard that lost its marker, so a kill at any instant resumes to the clean run's bytes. A file
that fails to download or convert is recorded in report.json with its reason, leaving no shard.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import shutil
import stat
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shardcook import _native
from shardcook.dataset import finalize, metadata
from shardcook.errors import ConfigError, ShardcookError
from shardcook.files import file_kind, remove_temporaries
from shardcook.jobs.ingest.arrow import ConversionError, Shapes, samples
from shardcook.jobs.ingest.config import ARROW_SUFFIX, IngestConfig, IngestDataset, check
from shardcook.jobs.ingest.download import (
    DownloadError,
    ManifestEntry,
    Retry,
    fetch_manifest,
    http_url,
    md5_of,
    parse_md5_manifest,
    safe_name,
)
from shardcook.jobs.ingest.download import download as fetch
from shardcook.layouts.mlperf import MLPERF
from shardcook.layouts.names import META_DIR, OURS_DIR, shard_name, split_shard_prefix
from shardcook.output import overwrite as overwrite_rules
from shardcook.output.local import RunFolder

log = logging.getLogger(__name__)

TOOL = "shardcook ingest"
#: Downloaded Arrow files wait in `.shardcook/downloads/SPLIT/` until converted ...
DOWNLOADS_DIR = "downloads"
#: ... and are written in `.shardcook/partial/SPLIT/` until whole and verified.
PARTIAL_DIR = "partial"
#: One file is one shard, whatever its row count.
ONE_SHARD = 1 << 62


@dataclass(frozen=True)
class Unit:
    """One input file and the shard it becomes."""

    split: str
    index: int  # within the split: the shard number
    name: str
    local: Path | None = None  # a user's file (never deleted)
    url: str | None = None
    md5: str | None = None
    number: int = 0  # within the dataset: the progress marker number

    @property
    def prefix(self) -> str:
        return split_shard_prefix(self.split)

    @property
    def shard(self) -> str:
        """The shard's path in the dataset: `SPLIT/SPLIT-shard-NNNNNN.tar`."""
        return f"{self.split}/{shard_name(self.index, self.prefix)}"

    def describe(self) -> dict[str, Any]:
        return {"split": self.split, "file": self.name, "md5": self.md5,
                "source": str(self.local) if self.local else self.url}


def split_parts(splits: Iterable[str]) -> dict[str, str]:
    """The dataset's split parts, as Primus's finalize names them: `SPLIT: SPLIT/.*`."""
    return {split: f"{split}/.*" for split in splits}


def downloads_dir(out: RunFolder, split: str) -> Path:
    """Where a split's downloaded Arrow files wait, inside shardcook's own folder."""
    return out.ours / DOWNLOADS_DIR / split


def _regular_file(path: Path) -> Path:
    """`path` when it is a regular file (or a link to one), else ConfigError saying what it is."""
    try:
        mode = path.stat().st_mode
    except OSError:
        raise ConfigError(f"input {str(path)!r} does not exist; give Arrow files or "
                          "folders") from None
    if not stat.S_ISREG(mode):
        raise ConfigError(f"input {str(path)!r} is {file_kind(mode)}, not a regular file; give "
                          "Arrow files or folders")
    return path


def _local_files(paths: tuple[Path, ...]) -> list[Path]:
    """The Arrow files given: each file as is, each folder's `*.arrow` in name order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(_regular_file(p) for p in path.iterdir() if p.suffix == ARROW_SUFFIX)
            if not inside:
                raise ConfigError(f"{str(path)!r} holds no {ARROW_SUFFIX} files")
            found += inside
        else:
            found.append(_regular_file(path))
    return found


def _refuse_duplicates(units: list[Unit]) -> None:
    """Each local file once: the same file twice would be two shards of the same rows."""
    seen: dict[Path, Path] = {}
    for unit in units:
        if unit.local is None:
            continue
        real = unit.local.resolve()
        if real in seen:
            raise ConfigError(f"input {str(unit.local)!r} is given twice (also as "
                              f"{str(seen[real])!r}); give each Arrow file once")
        seen[real] = unit.local


def plan_units(cfg: IngestConfig, skipped: list[dict[str, Any]]) -> list[Unit]:
    """Every input file of every split, numbered within its split; manifests are read here
    (names checked), and their entries that are not Arrow files are added to `skipped`."""
    units: list[Unit] = []
    for d in cfg.datasets:
        entries = _entries(d, cfg.retry, skipped)
        if cfg.max_files is not None:
            entries = entries[:cfg.max_files]
        for index, (name, local, url, md5) in enumerate(entries):
            units.append(Unit(d.split, index, name, local, url, md5))
    _refuse_duplicates(units)
    return units


def _entries(d: IngestDataset, retry: Retry, skipped: list[dict[str, Any]],
             ) -> list[tuple[str, Path | None, str | None, str | None]]:
    if d.paths:
        return [(p.name, p, None, None) for p in _local_files(d.paths)]
    if d.manifest_url is not None:
        base, listed = fetch_manifest(d.manifest_url, retry)
    else:
        assert d.manifest is not None and d.base_url is not None
        try:
            text = d.manifest.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read the manifest {str(d.manifest)!r} ({e})") from None
        base = http_url(d.base_url, "base_url").rstrip("/")
        listed = parse_md5_manifest(text, str(d.manifest))
    return [(e.name, None, f"{base}/{e.name}", e.md5)
            for e in _arrow_entries(d.split, base, listed, skipped)]


def _arrow_entries(split: str, base: str, listed: list[ManifestEntry],
                   skipped: list[dict[str, Any]]) -> list[ManifestEntry]:
    """The manifest's Arrow files; the others MLCommons lists beside them (`dataset_info.json`,
    `state.json`) are skipped, as Primus skips them, and recorded."""
    arrow = [e for e in listed if e.name.endswith(ARROW_SUFFIX)]
    for e in listed:
        if not e.name.endswith(ARROW_SUFFIX):
            log.info("%s: not an Arrow file, skipped", e.name)
            skipped.append({"split": split, "file": e.name, "md5": e.md5,
                            "source": f"{base}/{e.name}", "reason": "not an Arrow file"})
    return arrow


def _earlier_inputs(out: RunFolder) -> dict[str, list[dict[str, Any]]]:
    """The inputs an earlier ingest into `out` recorded, split by split (none: a new folder).

    Raises:
        ConfigError: the folder holds another layout.
    """
    old = out.read_manifest()
    if old is None:
        return {}
    inputs = old.get("inputs")
    if (old.get("encoding") != MLPERF.encoding or not isinstance(inputs, list)
            or not all(isinstance(entry, dict) for entry in inputs)):
        raise ConfigError(f"{out} holds another layout; use --overwrite to start again, or a "
                          "new --output-dir")
    earlier: dict[str, list[dict[str, Any]]] = {}
    for entry in inputs:
        earlier.setdefault(str(entry.get("split")), []).append(entry)
    return earlier


def _number(out: RunFolder, units: list[Unit], overwrite: bool,
            ) -> tuple[list[Unit], list[dict[str, Any]]]:
    """The units with their progress marker numbers, and every input the dataset records: an
    earlier run's splits that this run does not name are kept (their inputs, markers and shards),
    and a split both name must have the same inputs.

    Raises:
        ConfigError: the folder holds another layout, or other inputs for one of the splits.
    """
    earlier = {} if overwrite else _earlier_inputs(out)
    ours: dict[str, list[Unit]] = {}
    for unit in units:
        ours.setdefault(unit.split, []).append(unit)
    for split, members in ours.items():
        if split in earlier and earlier[split] != [u.describe() for u in members]:
            raise ConfigError(
                f"{out} holds an earlier run with other inputs for the {split} split; use the "
                "same inputs to resume, --overwrite to start again, or a new --output-dir")
    numbered: list[Unit] = []
    inputs: list[dict[str, Any]] = []
    for split in [*earlier, *(s for s in ours if s not in earlier)]:
        for unit in ours.get(split, ()):
            numbered.append(replace(unit, number=len(inputs)))
            inputs.append(unit.describe())
        if split not in ours:
            inputs += earlier[split]
    return numbered, inputs


def _cleared(out: RunFolder, units: list[Unit], splits: list[str], overwrite: bool) -> list[Path]:
    """What this run may delete: shardcook's folders, the shards it redoes and, with
    --overwrite, everything the earlier run wrote."""
    paths = [out.ours, *(out.root / s / OURS_DIR for s in splits)]
    paths += [out.root / u.shard for u in units] + [out.root / f"{u.shard}.idx" for u in units]
    return paths + (out.plan_overwrite().remove if overwrite else [])


def _refuse_inputs_inside(cleared: list[Path], inputs: Iterable[Path]) -> None:
    """Refuses an input that lies in what the run deletes, before anything is."""
    gone = [c.resolve() for c in cleared]
    for path in inputs:
        real = path.resolve()
        for where in gone:
            if real == where or real.is_relative_to(where):
                raise ConfigError(f"input {str(path)!r} lies in {str(where)!r}, which ingest "
                                  "deletes; move it out of the output folder first")


class _Prefetch:
    """Downloads ahead in daemon threads, at most `depth` files on disk, handed out in order. The
    threads are daemons so that Ctrl-C ends the process at once, even while one waits on a
    silent server."""

    def __init__(self, units: list[Unit], out: RunFolder, cfg: IngestConfig) -> None:
        self.out = out
        self.slots = threading.Semaphore(cfg.prefetch_depth)
        self.stop = threading.Event()
        self.jobs: queue.Queue[tuple[Unit, Future[Path]] | None] = queue.Queue()
        self.ready: queue.Queue[tuple[Unit, Future[Path] | None] | None] = queue.Queue()
        self.on_disk = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.retry = cfg.retry
        self.workers = [threading.Thread(target=self._work, daemon=True,
                                         name=f"ingest-download-{n}")
                        for n in range(cfg.max_workers)]
        self.thread = threading.Thread(target=self._submit, args=(units,), daemon=True)
        for thread in [*self.workers, self.thread]:
            thread.start()

    def _fetch(self, unit: Unit) -> Path:
        assert unit.url is not None
        dest = downloads_dir(self.out, unit.split) / safe_name(unit.name)
        with self.lock:
            self.on_disk += 1
            self.peak = max(self.peak, self.on_disk)
        fetch(unit.url, dest, unit.md5, self.retry, self.out.ours / PARTIAL_DIR / unit.split,
              self.stop)
        return dest

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            unit, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._fetch(unit))
            except BaseException as e:  # noqa: BLE001 - the main thread gets it with the unit
                future.set_exception(e)

    def _submit(self, units: list[Unit]) -> None:
        for unit in units:
            if unit.url is None:
                self.ready.put((unit, None))
                continue
            while not self.slots.acquire(timeout=0.1):
                if self.stop.is_set():
                    return
            if self.stop.is_set():
                return
            future: Future[Path] = Future()
            self.jobs.put((unit, future))
            self.ready.put((unit, future))
        self.ready.put(None)

    def done_with(self, unit: Unit, path: Path | None) -> None:
        """The unit's download is no longer needed: delete it and free its slot."""
        if unit.url is None:
            return
        if path is not None:
            path.unlink(missing_ok=True)
        with self.lock:
            self.on_disk -= 1
        self.slots.release()

    def close(self) -> None:
        """Stops every download; waits only for the thread handing them out."""
        self.stop.set()
        for _ in self.workers:
            self.jobs.put(None)
        self.thread.join()


def convert(unit: Unit, path: Path, root: Path, shapes: Shapes | None = None) -> int:
    """Writes the unit's shard from `path` into the dataset `root`; returns its sample count.
    Every row's tensors must have the shapes of `shapes` (the split's, filled from this file's
    first row when empty and the file converts whole). On any error the open shard is dropped
    by the writer, so nothing of the file is left."""
    expected: Shapes = dict(shapes or {})
    with _native.ShardWriter(root / unit.split, shard_size=ONE_SHARD, prefix=unit.prefix,
                             first_shard=unit.index) as writer:
        for key, parts in samples(path, f"{unit.index:06d}", expected):
            writer.write(key, parts)
        written = writer.close()
    if shapes is not None:
        shapes.update(expected)
    return sum(s.samples for s in written)


def _empty_encodings(cfg: IngestConfig, out: RunFolder,
                     listed: tuple[str, list[ManifestEntry]] | None,
                     failed: list[dict[str, Any]]) -> list[str]:
    """Downloads the empty-caption encodings (small `.npy` files) into the dataset folder; a
    file already there with the right MD5 is kept, one that fails is added to `failed`."""
    if cfg.empty_encodings is None or listed is None:
        return []
    folder = out.root / cfg.empty_encodings.output_subdir
    folder.mkdir(parents=True, exist_ok=True)
    base, entries = listed
    names = []
    for e in entries:
        dest = folder / e.name
        try:
            if not (dest.is_file() and md5_of(dest) == e.md5):
                fetch(f"{base}/{e.name}", dest, e.md5, cfg.retry,
                      out.ours / PARTIAL_DIR / cfg.empty_encodings.output_subdir)
            names.append(e.name)
        except (DownloadError, OSError) as err:
            failed.append({"split": None, "file": e.name, "md5": e.md5,
                           "source": f"{base}/{e.name}", "stage": "download",
                           "reason": str(err)})
    return names


def _record(inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The dataset's manifest.json before its shards are counted."""
    return {"encoding": MLPERF.encoding, "tool": TOOL, "inputs": inputs}


def _check_output(out: RunFolder, overwrite: bool) -> None:
    """Refuses an output folder that cannot be written or resumed, changing nothing."""
    if overwrite:
        out.plan_overwrite()
    elif out.root.exists() and (not out.root.is_dir() or not out.is_ours()):
        out.check()  # raises its sentence, creating nothing


def _drop_writer_scratch(split_dir: Path) -> None:
    """Removes a split folder's partial shards and, once empty, the writer's folder there."""
    if not split_dir.is_dir():
        return
    _native.remove_partial_shards(split_dir)
    scratch = split_dir / OURS_DIR
    for folder in sorted(scratch.glob("**/"), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: anything else there stays


def _prepare(out: RunFolder, record: dict[str, Any], splits: list[str], overwrite: bool) -> None:
    """Makes `out` ready to resume (no partial shard, download or half-written record left)."""
    if overwrite:
        overwrite_rules.say_kept(out, out.clear())
        out.check_writable()
    else:
        out.check()
    for folder in (out.ours, out.progress_dir, out.root / META_DIR):
        remove_temporaries(folder)
    out.write_manifest(record)
    _remove_scratch(out, splits)  # a killed run's leftovers
    for split in splits:
        downloads_dir(out, split).mkdir(parents=True)


def _done(out: RunFolder, unit: Unit) -> bool:
    """The unit's marker is there and names its shard (or none: a file without rows)."""
    marker = out.read_marker(unit.number)
    return marker is not None and marker.get("shard") in (unit.shard, None)


def _seed_shapes(out: RunFolder, units: list[Unit]) -> dict[str, Shapes]:
    """Each split's tensor shapes, as its converted files recorded them."""
    shapes: dict[str, Shapes] = {}
    for unit in units:
        marker = out.read_marker(unit.number)
        recorded = marker.get("shapes") if marker else None
        if recorded and isinstance(recorded, dict) and unit.split not in shapes:
            shapes[unit.split] = {part: tuple(dims) for part, dims in recorded.items()}
    return shapes


def _convert_all(out: RunFolder, units: list[Unit], cfg: IngestConfig,
                 failed: list[dict[str, Any]]) -> tuple[int, int]:
    """Downloads and converts every unit not done yet, each marked once its shard is in place;
    one that fails is added to `failed`. Returns the bytes converted and the most downloads on
    disk at once."""
    shapes = _seed_shapes(out, units)
    bytes_in = 0
    prefetch = _Prefetch([u for u in units if not _done(out, u)], out, cfg)
    try:
        while (item := prefetch.ready.get()) is not None:
            unit, future = item
            path: Path | None = unit.local
            stage = "download"
            try:
                if future is not None:
                    path = future.result()
                stage = "conversion"
                assert path is not None
                size = path.stat().st_size
                out.discard_shard(unit.shard)  # renamed into place before a kill, not marked
                split_shapes = shapes.setdefault(unit.split, {})
                count = convert(unit, path, out.root, split_shapes)
                bytes_in += size
                out.write_marker(unit.number, {
                    "shard": unit.shard if count else None, "samples": count,
                    "shapes": {p: list(s) for p, s in split_shapes.items()}, **unit.describe()})
            except (DownloadError, ConversionError, ShardcookError, OSError) as e:
                failed.append({**unit.describe(), "stage": stage, "reason": str(e)})
                log.warning("%s: %s failed: %s", unit.name, stage, e)
            finally:
                prefetch.done_with(unit, path if future is not None else None)
    finally:
        prefetch.close()
        _remove_scratch(out, {u.split for u in units})
    return bytes_in, prefetch.peak


def _remove_scratch(out: RunFolder, splits: Iterable[str]) -> None:
    """Removes the downloads, partial downloads and partial shards a run leaves."""
    for scratch in (DOWNLOADS_DIR, PARTIAL_DIR):
        shutil.rmtree(out.ours / scratch, ignore_errors=True)
    for split in splits:
        _drop_writer_scratch(out.root / split)


def run_ingest(cfg: IngestConfig, *, overwrite: bool = False) -> dict[str, Any]:
    """The whole ingest into the one dataset `OUTPUT_DIR` (its manifest, progress markers and
    report.json in `OUTPUT_DIR/.shardcook/`). Returns the report.

    Raises:
        ConfigError: bad options, unreadable manifest, unsafe names, an input the run would
            delete, a foreign output folder, before any shard is written.
        DatasetError: finalize found the result invalid.
    """
    check(cfg)
    assert cfg.output_dir is not None
    out = RunFolder(cfg.output_dir)
    skipped: list[dict[str, Any]] = []
    units = plan_units(cfg, skipped)
    if not units:
        raise ConfigError("the inputs list no Arrow files")
    empty = (fetch_manifest(cfg.empty_encodings.manifest_url, cfg.retry)
             if cfg.empty_encodings is not None else None)
    splits = list(dict.fromkeys(u.split for u in units))
    _check_output(out, overwrite)
    local = [u.local for u in units if u.local is not None]
    _refuse_inputs_inside(_cleared(out, units, splits, overwrite),
                          [*local, *(d.manifest for d in cfg.datasets if d.manifest)])
    units, inputs = _number(out, units, overwrite)
    _prepare(out, _record(inputs), splits, overwrite)

    start = time.monotonic()
    failed: list[dict[str, Any]] = []
    bytes_in, peak = _convert_all(out, units, cfg, failed)
    empty_names = _empty_encodings(cfg, out, empty, failed)
    seconds = time.monotonic() - start
    report = _report(out, inputs, failed, skipped, seconds, peak)
    parts = split_parts(s for s, r in report["splits"].items() if r["shards"])
    if cfg.finalize and report["shards"]:
        finalize(out.root, encoding=MLPERF.encoding, force=True, validate=True, split_parts=parts)
    elif report["shards"]:  # so that a later `shardcook finalize` keeps the split folders
        metadata.write_finalize_record(out.root, metadata.FinalizeRecord(
            encoding=MLPERF.encoding, split_parts=parts))
    out.write_results({**_record(inputs), "shards": report["shards"]}, report)
    return {**report, "bytes_converted": bytes_in, "empty_encodings": empty_names}


def _report(out: RunFolder, inputs: list[dict[str, Any]], failed: list[dict[str, Any]],
            skipped: list[dict[str, Any]], seconds: float, peak: int) -> dict[str, Any]:
    """report.json: every recorded input's shard (this run's and an earlier run's splits), per
    split and together, and this run's failed and skipped files."""
    shards: dict[str, int] = {}
    splits: dict[str, dict[str, Any]] = {}
    for number, entry in enumerate(inputs):
        split = splits.setdefault(str(entry.get("split")), {"files": 0, "shards": {},
                                                            "samples": 0})
        split["files"] += 1
        marker = out.read_marker(number)
        if marker is not None and marker.get("shard"):
            shards[marker["shard"]] = split["shards"][marker["shard"]] = int(marker["samples"])
            split["samples"] += int(marker["samples"])
    return {"encoding": MLPERF.encoding, "files": len(inputs), "failed": failed,
            "skipped": skipped, "shards": shards, "samples": sum(shards.values()),
            "splits": splits, "wall_seconds": round(seconds, 3),
            "peak_downloads_on_disk": peak}
