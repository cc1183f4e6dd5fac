"""`RunFolder`: the one owner of a run's output folder, over any `storage.Store`.

It knows the names shardcook keeps there (`.shardcook/`: manifest.json, report.json, the
per-unit progress markers that make a run resumable), checks the folder before a run, applies
`--overwrite`'s rules (`output/overwrite.py` decides what to delete), holds the run's lock
(`output/lock.py`) and reads and writes those records through the store, the same JSON text
everywhere (`records`). How the shards get there is its `staging.Staging`: written in place, or
staged and uploaded. The shards themselves are named and written by the native writer;
`.nv-meta/` is `dataset/metadata.py`'s.

What the store says decides the rest: a folder on this machine (`Store.file`) has a path that
can be a file or a link, directory entries, undo folders and a plain `OSError` for a failed
write; any other store has objects, each call retried (`storage.bucket.retried`), and a failure is
one sentence naming the store and the credentials.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

from shardcook.dataset import metadata, undo
from shardcook.dataset.index import shardrows
from shardcook.dataset.media import records as mediarecords
from shardcook.dataset.metadata import parse_manifest
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import (
    MANIFEST_JSON,
    OURS_DIR,
    PROGRESS_DIR,
    REPORT_JSON,
    is_shard_path,
)
from shardcook.output import overwrite, records
from shardcook.output.lock import Holder, lock_of
from shardcook.output.place import check_local_place, check_store_place
from shardcook.output.records import record_json
from shardcook.output.staging import LocalSpace, Staging
from shardcook.storage.bucket import retried
from shardcook.storage.location import Location
from shardcook.storage.messages import access_problem, credentials_of, describe_error, unreachable
from shardcook.storage.store import Store

T = TypeVar("T")

_MANIFEST = f"{OURS_DIR}/{MANIFEST_JSON}"
_REPORT = f"{OURS_DIR}/{REPORT_JSON}"
_PROGRESS = f"{OURS_DIR}/{PROGRESS_DIR}/"
#: Markers read at once when many are read from objects (a resume, the end of a run).
MARKER_READERS = 8


def marker_name(unit: int) -> str:
    """The unit's progress marker, relative to the folder."""
    return f"{_PROGRESS}{unit:06d}.json"


class RunFolder:
    """The output folder `store` (which need not exist yet), its shards written by `staging`;
    `what` names it in sentences: the option or argument that gave it."""

    def __init__(self, store: Store, staging: Staging, what: str = "--output-dir") -> None:
        self.store = store
        self.staging = staging
        self._what = what
        #: The folder on this machine, where the store is one; None where it has objects.
        self._path = store.file("")
        #: Whether the store took a test write and delete from this process.
        self._probed = False
        #: The objects there before this process wrote any shard (`discard_shard`).
        self._before: set[str] | None = None
        self._lock = lock_of(store, str(store))

    def __str__(self) -> str:
        return str(self.store)

    @property
    def location(self) -> Location:
        """What finalize and the summary are given: the path or URL, with its store."""
        return Location(str(self.store), self.store)

    @property
    def scratch(self) -> Path | None:
        """Where a command on this folder keeps local copies (`staging.Staging.scratch`)."""
        return self.staging.scratch

    @property
    def report_path(self) -> str:
        return self.store.child(_REPORT)

    # ---- how a failed step is said ---------------------------------------------------------

    def _step(self, doing: str, call: Callable[[], T],
              needs: Literal["read", "write"] = "write") -> T:
        """`call()`; when it fails, a ConfigError saying the folder cannot be used: locally
        that it is not writable, else why the store refused (never the credentials). `needs`
        is what the command does there."""
        if self._path is not None:
            try:
                return call()
            except OSError as e:
                raise self._not_writable(e) from None
        try:
            return call()
        except ConfigError:
            raise  # already one sentence
        except Exception as e:  # noqa: BLE001 - the client raises many kinds; one sentence
            raise ConfigError(access_problem(self._what, str(self), needs, e) or
                f"{self._what} {str(self)!r} cannot be used: {doing} failed "
                f"({describe_error(e)}); check that the bucket exists and that "
                f"{credentials_of(str(self))} may list and {needs} there."
            ) from None

    def _not_writable(self, e: OSError) -> ConfigError:
        return ConfigError(f"Output folder {str(self)!r} is not writable "
                           f"({e.strerror or e}); choose a folder you can write to.")

    def _read(self, doing: str, call: Callable[[], T]) -> T:
        """`call()`, a read of objects retried as every store call is; when it fails every
        time, ShardcookIOError saying the store cannot be reached (`messages.unreachable`), so
        what it read is never taken for missing."""
        return retried(f"{doing} in {self}", call,
                       lambda e: unreachable(self._what, str(self), doing, e))

    def _write(self, name: str, data: bytes | str) -> None:
        """One file written whole: locally (an OSError says why not), or one PUT retried
        (ShardcookIOError when it fails)."""
        if self._path is not None:
            self.store.write_bytes(name, data)
        else:
            retried(f"writing {name} to {self}", partial(self.store.write_bytes, name, data))

    # ---- checks ----------------------------------------------------------------------------

    def is_ours(self) -> bool:
        """True when the folder is missing or empty, or holds a shardcook run (its manifest,
        or only `.shardcook/`): locally its entries (an empty subfolder is one), else its
        objects."""
        if self._path is not None:
            if not self._path.exists():
                return True
            entries = os.listdir(self._path)
            return not entries or self.store.exists(_MANIFEST) or entries == [OURS_DIR]
        if self._step("reading the manifest", partial(self.store.exists, _MANIFEST)):
            return True
        names = self._step("listing", lambda: list(self.store.names()))
        return all(n.startswith(f"{OURS_DIR}/") for n in names)

    def check(self) -> None:
        """Raises ConfigError unless the folder can be made and written and holds nothing
        foreign."""
        self.check_ours()
        self.check_writable()

    def check_ours(self) -> None:
        """Raises ConfigError when the path is a file or the folder holds anything foreign;
        writes nothing."""
        self.check_not_a_file()
        if not self.is_ours():
            raise ConfigError(
                f"Output folder {str(self)!r} holds {self._entries()} that are not a shardcook "
                "dataset; choose a new or empty folder."
            )

    def _entries(self) -> str:
        return "files" if self._path is not None else "objects"

    def check_access(self) -> None:
        """What can be checked before the input is read, creating nothing that stays: the
        folder is not a file, nor inside a dataset or its `.nv-meta`/`.shardcook`
        (`output/place.py`), no other run holds it; a store of objects is listed first (a
        refused key is named only in a reply with a body) and takes a test write."""
        if self._path is not None:
            self.check_not_a_file()
            check_local_place(self._path)
            self._lock.check_free()
            return
        self._step("listing", lambda: next(iter(self.store.names()), None))
        self._step("reading the folders above it", partial(check_store_place, self.store))
        self._step("reading the lease", self._lock.check_free)
        self.check_writable()

    def lock(self, me: Holder) -> None:
        """Takes the folder for run `me` until `close` (`lock.Lock`), or raises ConfigError
        naming the run that holds it; call it once the folder is known to be ours."""
        self._lock.acquire(me, self._step)

    def share(self, me: Holder) -> None:
        """Joins the folder as a worker of a run without a process group (`lock.Lock.share`),
        or raises ConfigError naming the run that holds it alone."""
        self._lock.share(me, self._step)

    def check_held(self) -> None:
        """Raises DatasetError when another run took the folder over meanwhile (a lease)."""
        try:
            self._lock.check_held()
        except OSError as e:
            raise DatasetError(f"{self}: cannot read the lease ({e.strerror or e}); nothing "
                               "was finalized: rerun the same command.") from None

    def check_not_a_file(self) -> None:
        """Raises ConfigError when the folder's path exists and is not a folder, DatasetError
        when its `.shardcook` or `.nv-meta` is a link (the run's records would be written
        through it); nothing where the store has objects."""
        if self._path is None:
            return
        if self._path.exists() and not self._path.is_dir():
            raise ConfigError(f"--output-dir {str(self)!r} is a file; name a folder.")
        metadata.refuse_links(self._path)

    def check_writable(self) -> None:
        """Proves the folder writable (locally: makes `.shardcook/progress/`; else writes and
        deletes a small object under `.shardcook/`, once per run) and the staging space
        makeable, or raises ConfigError."""
        if self._path is not None:
            self._step("writing", partial(self._probe_here, self._path / OURS_DIR))
        elif not self._probed:
            self._step("writing and deleting a test object",
                       partial(self.store.probe_write, OURS_DIR))
            self._probed = True
        self.staging.check()

    @staticmethod
    def _probe_here(ours: Path) -> None:
        (ours / PROGRESS_DIR).mkdir(parents=True, exist_ok=True)
        probe = ours / f".probe{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()

    # ---- --overwrite -----------------------------------------------------------------------

    def recorded_shards(self) -> set[str]:
        """The shards the earlier run's manifest or unit markers name."""
        if self._path is not None:
            progress = self._path / _PROGRESS
            listed = sorted(progress.glob("*.json")) if progress.is_dir() else []
            units = [int(m.stem) for m in listed if m.stem.isdigit()]
            markers = (self._read_marker_here(unit) for unit in units)
            return records.recorded_shards(self.read_manifest, markers)
        listed_names = self._step("listing", lambda: list(self.store.names(_PROGRESS)))
        stems = [n[len(_PROGRESS):].removesuffix(".json") for n in listed_names]
        found = self.read_markers([int(s) for s in stems if s.isdigit()]).values()
        return records.recorded_shards(self.read_manifest, found)

    def plan_overwrite(self) -> overwrite.OverwritePlan | overwrite.ObjectPlan:
        """What `--overwrite` removes and what it keeps, deleting nothing
        (`overwrite.plan_deletions` over a folder's entries, `plan_object_deletions` over
        objects).

        Raises:
            ConfigError: the path is a file or not a shardcook run; or it holds files named like
                shards that no record names, or a tar anywhere that finalize would index.
        """
        self.check_not_a_file()
        if self._path is not None and not self._path.exists():
            return overwrite.OverwritePlan()
        if not self.is_ours():
            raise ConfigError(
                f"Output folder {str(self)!r} holds {self._entries()} that are not a shardcook "
                "dataset, so --overwrite deletes nothing there; choose a new or empty folder."
            )
        if self._path is not None:
            return overwrite.plan_deletions(self._path, self.recorded_shards())
        names = self._step("listing", lambda: list(self.store.names()))
        manifest = self.read_manifest()
        cache = manifest is not None and manifest.get("encoding") == overwrite.CACHE_ENCODING
        return overwrite.plan_object_deletions(str(self), names, self.recorded_shards(), cache)

    def local_file_in(self, paths: Iterable[Path], names: Iterable[str], *,
                      overwrite: bool = False) -> tuple[Path, Path] | None:
        """The first of the local files `paths` that lies in one of `names` (files or folders
        in this folder; with `overwrite` also what `--overwrite` deletes, `plan_overwrite`),
        with where it lies, both ends with their links followed; None when none does, as in a
        store of objects, where no local file lies."""
        if self._path is None:
            return None
        cleared = [*names, *(self.plan_overwrite().remove if overwrite else [])]
        gone = [(self._path / name).resolve() for name in cleared]
        for path in paths:
            real = path.resolve()
            for where in gone:
                if real == where or real.is_relative_to(where):
                    return path, where
        return None

    def clear(self) -> list[str]:
        """Removes what the earlier shardcook run wrote, after checking everything
        (`plan_overwrite`), saying what; returns the entries kept (files shardcook did not
        write)."""
        plan = self.plan_overwrite()
        if isinstance(plan, overwrite.OverwritePlan):
            assert self._path is not None  # planned from the folder's entries
            overwrite.delete_planned(self._path, plan)
        else:
            overwrite.delete_planned_objects(str(self), plan, lambda name: retried(
                f"deleting {name} in {self}", partial(self._delete, name)))
        return plan.keep

    def discard_shard(self, name: str) -> None:
        """Removes shard `name`, its `.tar.idx`, its index rows and its media record where
        there (a unit cut off before its marker is redone). In a store of objects what is
        there is listed once, at the first call: objects uploaded after it are this run's."""
        if self._path is not None:
            for one in (name, f"{name}.idx", mediarecords.record_name(name)):
                (self._path / one).unlink(missing_ok=True)
            return
        if self._before is None:
            self._before = set(retried(f"listing {self}", lambda: list(self.store.names())))
        for one in (name, f"{name}.idx", shardrows.rows_name(name),
                    mediarecords.record_name(name)):
            if one in self._before:
                retried(f"deleting {one} in {self}", partial(self._delete, one))
                self._before.discard(one)

    def _delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # gone already: what was wanted
            self.store.delete(name)

    # ---- a unit's shard (the staging's) ----------------------------------------------------

    def remove_partial_shards(self) -> None:
        self.staging.remove_partial_shards()

    @property
    def shard_dir(self) -> Path:
        return self.staging.shard_dir

    def local_space(self, prefix: str) -> LocalSpace:
        """Where a job keeps its working files on this machine (`staging.Staging.local_space`)."""
        return self.staging.local_space(prefix)

    def finish_unit(self, unit: int, record: dict[str, Any],
                    media: mediarecords.UnitMedia | None = None) -> None:
        """Makes the unit's closed shard final (`staging.Staging.finish_unit`), then writes its
        marker.

        Raises:
            ShardcookIOError: an earlier upload failed for good.
            DatasetError: another run took the folder over.
        """
        if self._lock.lost:
            self.check_held()  # stop writing into a folder another run now holds
        self.staging.finish_unit(unit, record, media, partial(
            self.store.write_bytes, marker_name(unit), record_json(record)))

    def flush(self) -> None:
        self.staging.flush()

    def close(self) -> None:
        """Releases the staging space and the upload threads, then the folder's lock, if this
        process holds it."""
        self.staging.close()
        self._lock.release()

    def scratch_peak_bytes(self) -> int | None:
        return self.staging.scratch_peak_bytes()

    # ---- files and records -----------------------------------------------------------------

    def write_file(self, name: str, data: bytes) -> None:
        """Writes `name` (relative to the folder, e.g. `empty_encodings/t5_empty.npy`) whole."""
        self._write(name, data)

    def create_file(self, name: str, data: bytes | str) -> bool:
        """Writes `name` whole only when it does not exist (`Store.create`); whether this call
        did. Retried in a store of objects: a try that failed after the store took it makes
        the next one find the name taken, and the object holding this call's bytes says it
        was this call."""
        if self._path is not None:
            return self.store.create(name, data)
        body = data.encode() if isinstance(data, str) else data
        created = retried(f"creating {name} in {self}", partial(self.store.create, name, body))
        return created or self.read_file(name) == body

    def read_file(self, name: str) -> bytes | None:
        """File `name`, or None when there is none (locally also where a file stands in the
        way of the folder: writing there is refused, in its own sentence, by
        `check_writable`).

        Raises:
            ShardcookIOError: a store of objects cannot be reached.
        """
        if self._path is not None:
            try:
                return self.store.read(name)
            except (FileNotFoundError, NotADirectoryError):
                return None
        return self._read(f"reading {name}", partial(self._object, name))

    def _object(self, name: str) -> bytes | None:
        try:
            return self.store.read(name)
        except FileNotFoundError:
            return None

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when there is none (locally `metadata.read_manifest`, which
        dataset commands use too).

        Raises:
            DatasetError: it is damaged or cannot be read.
        """
        if self._path is not None:
            return metadata.read_manifest(self._path)
        if not self._step("reading the manifest", partial(self.store.exists, _MANIFEST), "read"):
            return None
        label = self.store.child(_MANIFEST)
        try:
            data = self.store.read(_MANIFEST)
        except OSError as e:
            raise DatasetError(f"{label}: {e.strerror or e}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise DatasetError(f"{label} is not UTF-8 text") from None
        return parse_manifest(text, label)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self._write(_MANIFEST, record_json(manifest))

    def write_results(self, manifest: dict[str, Any], report: dict[str, Any]) -> None:
        """The report, then the manifest that calls the run complete."""
        self._write(_REPORT, record_json(report))
        self._write(_MANIFEST, record_json(manifest))

    def write_marker(self, unit: int, record: dict[str, Any]) -> None:
        """Rewrites the unit's marker (its shard is already final)."""
        self._write(marker_name(unit), record_json(record))

    def interrupted_finalize(self) -> str | None:
        """The undo folder a killed finalize left here (`undo.interrupted`), by name; None in
        a store of objects, where finalize works in a local copy (`--scratch-dir`) and uploads
        the metadata only once it validated, `.info.json` last."""
        if self._path is None:
            return None
        left = undo.interrupted(self._path)
        return left[0].name if left else None

    def read_markers(self, units: list[int]) -> dict[int, dict[str, Any]]:
        """The records of those of `units` that are done (marker readable, its shard present).
        In a store of objects one listing finds the markers and the shards, then the markers
        there are read, a few at a time.

        Raises:
            ShardcookIOError: a store of objects cannot be reached (a marker that cannot be
                read is not a unit to redo).
        """
        if self._path is not None:
            here = {unit: self._read_marker_here(unit) for unit in units}
            return {unit: r for unit, r in here.items() if r is not None}
        present = set(self._read("listing the folder", lambda: list(self.store.names())))
        wanted = [u for u in units if marker_name(u) in present]
        with ThreadPoolExecutor(max_workers=MARKER_READERS) as pool:
            found = dict(zip(wanted, pool.map(self._read_object_marker, wanted), strict=True))
        return {u: r for u, r in found.items()
                if r is not None and (r.get("shard") is None or r["shard"] in present)}

    def _read_marker_here(self, unit: int) -> dict[str, Any] | None:
        """The unit's record in a local folder if the unit is done (marker readable and its
        shard present), else None."""
        assert self._path is not None
        try:
            record = json.loads((self._path / marker_name(unit)).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None
        shard = record.get("shard")
        if shard is not None and not (isinstance(shard, str)
                                      and (self._path / shard).is_file()):
            return None
        return record

    def _read_object_marker(self, unit: int) -> dict[str, Any] | None:
        """The unit's marker as a record whose shard is None or a shard name; None when it is
        gone (deleted since the listing) or damaged (the unit is redone)."""
        name = marker_name(unit)
        data = self._read(f"reading {name}", partial(self._object, name))
        try:
            record = json.loads(data) if data is not None else None
        except (ValueError, RecursionError):
            return None
        if not isinstance(record, dict):
            return None
        shard = record.get("shard")
        recorded = shard is None or (isinstance(shard, str) and is_shard_path(shard))
        return record if recorded else None
