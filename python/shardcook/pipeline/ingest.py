"""`shardcook ingest`: MLCommons's pre-encoded Arrow files (local, or downloaded from a manifest)
into a `preencoded_numpy` dataset, one shard per file.

Shard n of a split comes from its n-th file in name order, whatever order downloads finish in;
a thread pool downloads ahead while at most `prefetch_depth` downloaded files are on disk, and
each is deleted once converted (a user's local files never are). A shard gets its name only
when whole, then its progress marker, so a rerun skips finished files and redoes the rest. A file
that fails to download or convert is recorded in report.json with its reason, leaving no shard.
"""

from __future__ import annotations

import logging
import queue
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcook import _native
from shardcook.dataset import finalize
from shardcook.errors import ConfigError, ShardcookError
from shardcook.layouts.mlperf import MLPERF
from shardcook.layouts.names import shard_name, split_shard_prefix
from shardcook.pipeline.download import (
    DownloadError,
    ManifestEntry,
    Retry,
    fetch_manifest,
    md5_of,
    parse_md5_manifest,
    safe_name,
)
from shardcook.pipeline.download import download as fetch
from shardcook.pipeline.ingest_arrow import ConversionError, samples
from shardcook.pipeline.ingest_config import ARROW_SUFFIX, IngestConfig, IngestDataset, check
from shardcook.pipeline.outdir import RunFolder

log = logging.getLogger(__name__)

#: Downloaded Arrow files wait here, inside shardcook's own folder, until converted.
DOWNLOADS_DIR = "downloads"
#: One file is one shard, whatever its row count.
ONE_SHARD = 1 << 62


@dataclass(frozen=True)
class Unit:
    """One input file and the shard it becomes."""

    split: str
    index: int  # within the split: the shard and progress marker number
    name: str
    local: Path | None = None  # a user's file (never deleted)
    url: str | None = None
    md5: str | None = None

    def out(self, output_dir: Path) -> RunFolder:
        """The dataset folder of the unit's split."""
        return split_folder(output_dir, self.split)

    @property
    def prefix(self) -> str:
        return split_shard_prefix(self.split)

    @property
    def shard(self) -> str:
        return shard_name(self.index, self.prefix)

    def describe(self) -> dict[str, Any]:
        return {"split": self.split, "file": self.name, "md5": self.md5,
                "source": str(self.local) if self.local else self.url}


def split_folder(output_dir: Path, split: str) -> RunFolder:
    """Where a split's dataset goes: `OUTPUT_DIR/SPLIT`, as Primus's ingest writes it."""
    return RunFolder(output_dir / split)


def downloads_dir(folder: RunFolder) -> Path:
    """Where the split's downloaded Arrow files wait, inside shardcook's own folder."""
    return folder.ours / DOWNLOADS_DIR


def _local_files(paths: tuple[Path, ...]) -> list[Path]:
    """The Arrow files given: each file as is, each folder's `*.arrow` in name order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.suffix == ARROW_SUFFIX and p.is_file())
            if not inside:
                raise ConfigError(f"{str(path)!r} holds no {ARROW_SUFFIX} files")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise ConfigError(f"input {str(path)!r} does not exist; give Arrow files or folders")
    return found


def plan_units(cfg: IngestConfig) -> list[Unit]:
    """Every input file of every split, numbered; manifests are read here (names checked)."""
    units: list[Unit] = []
    for d in cfg.datasets:
        entries = _entries(d, cfg.retry)
        if cfg.max_files is not None:
            entries = entries[:cfg.max_files]
        for index, (name, local, url, md5) in enumerate(entries):
            units.append(Unit(d.split, index, name, local, url, md5))
    return units


def _entries(d: IngestDataset, retry: Retry) -> list[tuple[str, Path | None, str | None, str | None]]:
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
        base, listed = d.base_url.rstrip("/"), parse_md5_manifest(text, str(d.manifest))
    return [(e.name, None, f"{base}/{e.name}", e.md5) for e in listed]


def _check_resume(out: RunFolder, record: dict[str, Any]) -> None:
    """A folder with an earlier ingest continues only with the same inputs."""
    old = out.read_manifest()
    if old is None:
        return
    if old.get("encoding") != MLPERF.encoding or old.get("inputs") != record["inputs"]:
        raise ConfigError(
            f"{out} holds an earlier run with other inputs or another layout; use the same "
            "inputs to resume, --overwrite to start again, or a new --output-dir")


class _Prefetch:
    """Downloads ahead in a thread pool, at most `depth` files on disk, handed out in order."""

    def __init__(self, units: list[Unit], cfg: IngestConfig) -> None:
        assert cfg.output_dir is not None
        self.output_dir = cfg.output_dir
        self.slots = threading.Semaphore(cfg.prefetch_depth)
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(cfg.max_workers, thread_name_prefix="ingest-download")
        self.ready: queue.Queue[tuple[Unit, Future[Path] | None] | None] = queue.Queue()
        self.on_disk = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.retry = cfg.retry
        self.thread = threading.Thread(target=self._submit, args=(units,), daemon=True)
        self.thread.start()

    def _fetch(self, unit: Unit) -> Path:
        assert unit.url is not None
        dest = downloads_dir(unit.out(self.output_dir)) / safe_name(unit.name)
        with self.lock:
            self.on_disk += 1
            self.peak = max(self.peak, self.on_disk)
        fetch(unit.url, dest, unit.md5, self.retry, self.stop)
        return dest

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
            self.ready.put((unit, self.pool.submit(self._fetch, unit)))
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
        self.stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.thread.join()


def convert(unit: Unit, path: Path, out: Path) -> int:
    """Writes the unit's shard from `path`; returns its sample count. On any error the open
    shard is dropped by the writer, so nothing of the file is left."""
    with _native.ShardWriter(out, shard_size=ONE_SHARD, prefix=unit.prefix,
                             first_shard=unit.index) as writer:
        for key, parts in samples(path, key_prefix=f"{unit.index:06d}"):
            writer.write(key, parts)
        written = writer.close()
    return sum(s.samples for s in written)


def _empty_encodings(cfg: IngestConfig, listed: tuple[str, list[ManifestEntry]] | None,
                     failed: list[dict[str, Any]]) -> list[str]:
    """Downloads the empty-caption encodings (small `.npy` files) beside the splits' folders; a
    file already there with the right MD5 is kept, one that fails is added to `failed`."""
    if cfg.empty_encodings is None or listed is None:
        return []
    assert cfg.output_dir is not None
    folder = cfg.output_dir / cfg.empty_encodings.output_subdir
    folder.mkdir(parents=True, exist_ok=True)
    base, entries = listed
    names = []
    for e in entries:
        dest = folder / e.name
        try:
            if not (dest.is_file() and md5_of(dest) == e.md5):
                fetch(f"{base}/{e.name}", dest, e.md5, cfg.retry)
            names.append(e.name)
        except (DownloadError, OSError) as err:
            failed.append({"split": None, "file": e.name, "md5": e.md5,
                           "source": f"{base}/{e.name}", "stage": "download",
                           "reason": str(err)})
    return names


def _record(units: list[Unit]) -> dict[str, Any]:
    """A split's manifest.json before its shards are counted."""
    return {"encoding": MLPERF.encoding, "tool": "shardcook ingest",
            "inputs": [u.describe() for u in units]}


def _check_split(out: RunFolder, units: list[Unit], overwrite: bool) -> None:
    """Refuses a split folder that cannot be written or resumed, changing nothing (every split
    is checked before any is touched)."""
    if overwrite:
        out.plan_overwrite()
        return
    if out.root.exists() and (not out.root.is_dir() or not out.is_ours()):
        out.check()  # raises its sentence, creating nothing
    _check_resume(out, _record(units))


def _prepare(out: RunFolder, units: list[Unit], overwrite: bool) -> dict[str, Any]:
    """Makes `out` ready for its split's units (resumable, no partial shard or download left);
    returns its manifest record."""
    if overwrite:
        out.clear()
    out.check()
    record = _record(units)
    out.write_manifest(record)
    out.remove_partial_shards()
    downloads = downloads_dir(out)
    shutil.rmtree(downloads, ignore_errors=True)  # a killed run's leftovers
    downloads.mkdir(parents=True)
    return record


def run_ingest(cfg: IngestConfig, *, overwrite: bool = False) -> dict[str, Any]:
    """The whole ingest: each split becomes the dataset `OUTPUT_DIR/SPLIT` (as Primus lays it
    out), with its own manifest, progress markers and report.json. Returns the splits' reports
    together.

    Raises:
        ConfigError: bad options, unreadable manifest, unsafe names, a foreign output folder,
            before any shard is written.
        DatasetError: finalize found a result invalid.
    """
    check(cfg)
    assert cfg.output_dir is not None
    units = plan_units(cfg)
    if not units:
        raise ConfigError("the inputs list no Arrow files")
    empty = (fetch_manifest(cfg.empty_encodings.manifest_url, cfg.retry)
             if cfg.empty_encodings is not None else None)
    splits = {u.split: [v for v in units if v.split == u.split] for u in units}
    for split, members in splits.items():
        _check_split(split_folder(cfg.output_dir, split), members, overwrite)
    records = {split: _prepare(split_folder(cfg.output_dir, split), members, overwrite)
               for split, members in splits.items()}

    start = time.monotonic()
    todo = [u for u in units if u.out(cfg.output_dir).read_marker(u.index) is None]
    failed: list[dict[str, Any]] = []
    bytes_in = 0
    prefetch = _Prefetch(todo, cfg)
    try:
        while (item := prefetch.ready.get()) is not None:
            unit, future = item
            out = unit.out(cfg.output_dir)
            path: Path | None = unit.local
            stage = "download"
            try:
                if future is not None:
                    path = future.result()
                stage = "conversion"
                assert path is not None
                size = path.stat().st_size
                count = convert(unit, path, out.root)
                bytes_in += size
                out.write_marker(unit.index, {
                    "shard": unit.shard if count else None, "samples": count,
                    **unit.describe()})
            except (DownloadError, ConversionError, ShardcookError, OSError) as e:
                failed.append({**unit.describe(), "stage": stage, "reason": str(e)})
                log.warning("%s: %s failed: %s", unit.name, stage, e)
            finally:
                prefetch.done_with(unit, path if future is not None else None)
    finally:
        prefetch.close()
        for split in splits:
            shutil.rmtree(downloads_dir(split_folder(cfg.output_dir, split)), ignore_errors=True)
    empty_names = _empty_encodings(cfg, empty, failed)
    seconds = time.monotonic() - start
    reports = {}
    for split, members in splits.items():
        out = split_folder(cfg.output_dir, split)
        report = _report(out, members, [f for f in failed if f["split"] == split], seconds,
                         prefetch.peak)
        if cfg.finalize and report["shards"]:
            finalize(out.root, encoding=MLPERF.encoding,
                     split_parts={split: f"{split_shard_prefix(split)}.*"}, force=True,
                     validate=True)
        out.write_results({**records[split], "shards": report["shards"]}, report)
        reports[split] = report
    return {"splits": reports, "failed": failed, "bytes_converted": bytes_in,
            "wall_seconds": round(seconds, 3), "peak_downloads_on_disk": prefetch.peak,
            "empty_encodings": empty_names}


def _report(out: RunFolder, units: list[Unit], failed: list[dict[str, Any]], seconds: float,
            peak: int) -> dict[str, Any]:
    shards: dict[str, int] = {}
    for u in units:
        marker = out.read_marker(u.index)
        if marker is not None and marker.get("shard"):
            shards[marker["shard"]] = int(marker["samples"])
    return {"encoding": MLPERF.encoding, "files": len(units), "failed": failed,
            "shards": shards, "samples": sum(shards.values()),
            "wall_seconds": round(seconds, 3), "peak_downloads_on_disk": peak}
