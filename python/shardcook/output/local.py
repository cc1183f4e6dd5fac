"""`RunFolder`: the one owner of a run's output folder.

It knows the paths shardcook keeps there (`.shardcook/`: manifest.json, report.json, the
per-unit progress markers that make a run resumable, the writer's tmp folder), checks the folder
before a run, applies `--overwrite`'s rules (`output/overwrite.py` decides what to delete) and
reads and writes those records, every write through its `storage.LocalStore` (as a bucket run's
through its `Remote`: `files.write_atomic`, the same JSON text, `records`). The shards themselves
are named and written by the native writer; `.nv-meta/` is `dataset/metadata.py`'s. Callers ask
it for what they need instead of joining paths, so an output folder kept elsewhere (object
storage) can be a second class with the same methods.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shardcook import _native
from shardcook.dataset import metadata, undo
from shardcook.dataset.index import shardrows
from shardcook.dataset.media import records as mediarecords
from shardcook.errors import ConfigError
from shardcook.layouts.names import (
    MANIFEST_JSON,
    OURS_DIR,
    PROGRESS_DIR,
    REPORT_JSON,
    TMP_DIR,
)
from shardcook.output import overwrite, records
from shardcook.output.lock import Holder, lock_of
from shardcook.output.place import check_local_place
from shardcook.output.records import record_json
from shardcook.storage.local import LocalStore
from shardcook.storage.location import Location


class RunFolder:
    """A run's output folder `root` (which need not exist yet)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        #: The folder's bytes, as a bucket run's are its `Remote`'s.
        self.store = LocalStore(root)
        self._lock = lock_of(self.store, str(root))

    def __str__(self) -> str:
        return str(self.root)

    @property
    def location(self) -> Location:
        """What finalize and the summary are given: the folder."""
        return Location(str(self.root))

    @property
    def scratch(self) -> None:
        """None: a local folder is its own copy."""
        return None

    # ---- paths -----------------------------------------------------------------------------

    @property
    def ours(self) -> Path:
        """`.shardcook/`: everything shardcook keeps about the run; Energon never reads it."""
        return self.root / OURS_DIR

    @property
    def manifest_path(self) -> Path:
        return self.ours / MANIFEST_JSON

    @property
    def report_path(self) -> Path:
        return self.ours / REPORT_JSON

    @property
    def progress_dir(self) -> Path:
        return self.ours / PROGRESS_DIR

    def marker_path(self, unit: int) -> Path:
        return self.progress_dir / f"{unit:06d}.json"

    # ---- checks ----------------------------------------------------------------------------

    def is_ours(self) -> bool:
        """True when the folder is missing, empty, or holds a shardcook run (its manifest or
        only `.shardcook/`)."""
        if not self.root.exists():
            return True
        entries = os.listdir(self.root)
        if not entries:
            return True
        if self.manifest_path.is_file():
            return True
        return entries == [OURS_DIR]

    def check(self) -> None:
        """Raises ConfigError unless the folder can be created and written and holds nothing
        foreign."""
        self.check_ours()
        self.check_writable()

    def check_ours(self) -> None:
        """Raises ConfigError when the path is a file or the folder holds anything foreign;
        writes nothing."""
        self.check_not_a_file()
        if not self.is_ours():
            raise ConfigError(
                f"Output folder {str(self.root)!r} holds files that are not a shardcook dataset; "
                "choose a new or empty folder."
            )

    def check_access(self) -> None:
        """What can be checked before the input is read, writing nothing: the path is not a
        file, nor inside a dataset or its `.nv-meta`/`.shardcook` (`place.check_local_place`),
        and no other run holds the folder. `check` creates the folder, so it waits."""
        self.check_not_a_file()
        check_local_place(self.root)
        self._lock.check_free()

    def lock(self, me: Holder) -> None:
        """Takes the folder for run `me` until `close` (`lock.Lock`: an flock here), or raises
        ConfigError naming the run that holds it; call it once the folder is known to be
        ours."""
        self._lock.acquire(me, self._locally)

    def share(self, me: Holder) -> None:
        """Joins the folder as a worker of a run without a process group (`lock.Lock.share`),
        or raises ConfigError naming the run that holds it alone."""
        self._lock.share(me, self._locally)

    def _locally(self, doing: str, call: Callable[[], None]) -> None:
        """`call()`; a file system that refuses it says the folder is not writable."""
        try:
            call()
        except OSError as e:
            raise self._not_writable(e) from None

    def check_held(self) -> None:
        """Nothing to check: the lock is held until this process ends."""
        self._lock.check_held()

    def check_not_a_file(self) -> None:
        """Raises ConfigError when the folder's path exists and is not a folder, DatasetError
        when its `.shardcook` or `.nv-meta` is a link (the run's records would be written
        through it)."""
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"--output-dir {str(self.root)!r} is a file; name a folder.")
        metadata.refuse_links(self.root)

    def check_writable(self) -> None:
        """Creates `.shardcook/progress/` and proves it writable, or raises ConfigError."""
        try:
            self.progress_dir.mkdir(parents=True, exist_ok=True)
            probe = self.ours / f".probe{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise self._not_writable(e) from None

    def _not_writable(self, e: OSError) -> ConfigError:
        return ConfigError(f"Output folder {str(self.root)!r} is not writable "
                           f"({e.strerror or e}); choose a folder you can write to.")

    # ---- --overwrite -----------------------------------------------------------------------

    def recorded_shards(self) -> set[str]:
        """The shard files the earlier run's manifest or unit markers name."""
        progress = self.progress_dir
        listed = sorted(progress.glob("*.json")) if progress.is_dir() else []
        markers = (self.read_marker(int(m.stem)) for m in listed if m.stem.isdigit())
        return records.recorded_shards(self.read_manifest, markers)

    def plan_overwrite(self) -> overwrite.OverwritePlan:
        """What `--overwrite` removes and what it keeps, deleting nothing
        (`overwrite.plan_deletions`).

        Raises:
            ConfigError: the path is a file or not a shardcook run; or it holds files named like
                shards that no record names, or a tar anywhere that finalize would index.
        """
        self.check_not_a_file()
        if not self.root.exists():
            return overwrite.OverwritePlan()
        if not self.is_ours():
            raise ConfigError(
                f"Output folder {str(self.root)!r} holds files that are not a shardcook dataset, "
                "so --overwrite deletes nothing there; choose a new or empty folder."
            )
        return overwrite.plan_deletions(self.root, self.recorded_shards())

    def clear(self) -> list[str]:
        """Removes what the earlier shardcook run wrote, after checking everything
        (`plan_overwrite`), saying what; returns the entries kept (files shardcook did not
        write)."""
        plan = self.plan_overwrite()
        overwrite.delete_planned(self.root, plan)
        return plan.keep

    def discard_shard(self, name: str) -> None:
        """Removes shard `name`, its `.tar.idx` and its media record, where there (a unit cut
        off before its marker is redone)."""
        for path in (self.root / name, self.root / f"{name}.idx",
                     self.root / mediarecords.record_name(name)):
            path.unlink(missing_ok=True)

    def remove_partial_shards(self) -> None:
        """Empties the writer's tmp folder: the partial shards of a killed run; in a split's
        folder (ingest's `train/`), the writer's folder goes too once empty."""
        _native.remove_partial_shards(self.root)
        for split in self.root.glob(f"*/{OURS_DIR}/"):
            if re.fullmatch(r"[a-z]+", split.parent.name):
                _native.remove_partial_shards(split.parent)
                for folder in (split / TMP_DIR, split):
                    with contextlib.suppress(OSError):
                        folder.rmdir()  # only when empty: anything else there stays

    # ---- a unit's shard ----------------------------------------------------------------------

    @property
    def shard_dir(self) -> Path:
        """Where the native writer writes shards: the folder itself."""
        return self.root

    def finish_unit(self, unit: int, record: dict[str, Any],
                    media: mediarecords.UnitMedia | None = None) -> None:
        """Records a unit once the writer closed its shard (already under its final name): its
        media record (naming the shard as it is now), then its marker."""
        shard = record.get("shard")
        if media is not None and isinstance(shard, str):
            media.write(self.root / mediarecords.record_name(shard),
                        shardrows.local_object(self.root / shard))
        self.write_marker(unit, record)

    def flush(self) -> None:
        """Every unit handed to `finish_unit` is recorded by now (nothing is uploaded here)."""

    def close(self) -> None:
        """Lets go of the folder's lock, if this process holds it (no scratch space is used)."""
        self._lock.release()

    def scratch_peak_bytes(self) -> int | None:
        """None: shards are written in place, not staged."""
        return None

    def write_file(self, name: str, data: bytes) -> None:
        """Writes `name` (a path relative to the folder, e.g. `empty_encodings/t5_empty.npy`)
        whole."""
        self.store.write_bytes(name, data)

    def create_file(self, name: str, data: bytes | str) -> bool:
        """Writes `name` whole only when it does not exist (`files.create_new`); whether this
        call did."""
        return self.store.create(name, data)

    def read_file(self, name: str) -> bytes | None:
        """File `name`, or None when there is none (also where a file stands in the way of
        the folder: writing there is refused, in its own sentence, by `check_writable`)."""
        try:
            return self.store.read(name)
        except (FileNotFoundError, NotADirectoryError):
            return None

    # ---- records ---------------------------------------------------------------------------

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when there is none (`metadata.read_manifest`, which dataset
        commands use too).

        Raises:
            DatasetError: it is damaged.
        """
        return metadata.read_manifest(self.root)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self._write_json(self.manifest_path, manifest)

    def write_results(self, manifest: dict[str, Any], report: dict[str, Any]) -> None:
        """The report, then the manifest that calls the run complete."""
        self._write_json(self.report_path, report)
        self._write_json(self.manifest_path, manifest)

    def write_marker(self, unit: int, record: dict[str, Any]) -> None:
        """Records a finished unit (after its shard got its final name)."""
        self._write_json(self.marker_path(unit), record)

    def _write_json(self, path: Path, obj: Any) -> None:
        self.store.write_bytes(path.relative_to(self.root).as_posix(), record_json(obj))

    def interrupted_finalize(self) -> str | None:
        """The undo folder a killed finalize left here (`undo.interrupted`), by name."""
        left = undo.interrupted(self.root)
        return left[0].name if left else None

    def read_markers(self, units: list[int]) -> dict[int, dict[str, Any]]:
        """The records of those of `units` that are done (`read_marker`)."""
        records = {unit: self.read_marker(unit) for unit in units}
        return {unit: r for unit, r in records.items() if r is not None}

    def read_marker(self, unit: int) -> dict[str, Any] | None:
        """The unit's record if the unit is done (marker readable and its shard present),
        else None."""
        try:
            record = json.loads(self.marker_path(unit).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None
        shard = record.get("shard")
        if shard is not None and not (isinstance(shard, str) and (self.root / shard).is_file()):
            return None
        return record

