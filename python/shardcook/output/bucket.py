"""`BucketRunFolder`: a run's output folder in object storage (`msc://PROFILE/path`,
`s3://bucket/path`), the second implementation of `output/local.RunFolder`'s methods.

Everything shardcook keeps about the run (`.shardcook/manifest.json`, `report.json`, the unit
markers) is in the bucket, so a resume on another machine continues where this one stopped. The
native writer writes each shard into a staging folder of this process under `--scratch-dir`;
once closed, its `.tar.idx` is built from the staged copy, the background `Uploader` puts shard
and index into the bucket (each object appears whole under its final name, or not at all), then
writes the unit's marker, then deletes the staged files. So a marker always names a shard that is
in the bucket. The staging folder is removed by `close`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

from shardcook import _native
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
from shardcook.output.place import check_bucket_place
from shardcook.output.records import record_json
from shardcook.output.uploader import Uploader, retried
from shardcook.storage import Remote, access_problem, credentials_of, describe_error
from shardcook.storage.location import Location
from shardcook.storage.messages import unreachable

T = TypeVar("T")

_MANIFEST = f"{OURS_DIR}/{MANIFEST_JSON}"
_REPORT = f"{OURS_DIR}/{REPORT_JSON}"
_PROGRESS = f"{OURS_DIR}/{PROGRESS_DIR}/"
#: Markers read at once when many are (a resume, the end of a run).
MARKER_READERS = 8


class BucketRunFolder:
    """The output folder `location` in object storage; shards are staged under `scratch` (a
    local path, checked with the config; default: the system temp folder), at most
    `upload_queue` of them waiting for upload. `what` names the folder in sentences: the
    option or argument that gave it."""

    def __init__(self, location: Location, scratch: str | None = None,
                 upload_queue: int = 4, what: str = "--output-dir") -> None:
        assert isinstance(location.store, Remote), f"{location} is not in a bucket"
        self.store = location.store
        self.url = self.store.url
        self._what = what
        self._scratch = Path(scratch) if scratch is not None else Path(tempfile.gettempdir())
        self._upload_queue = upload_queue
        self._staging: Path | None = None
        self._uploader: Uploader | None = None
        #: The objects there before this process wrote any shard (`discard_shard`).
        self._before: set[str] | None = None
        #: Whether the store took a test write and delete from this process.
        self._probed = False
        self._lock = lock_of(self.store, self.url)

    def __str__(self) -> str:
        return self.url

    @property
    def location(self) -> Location:
        """What finalize and the summary are given: the URL, its client resolved."""
        return Location(self.url, self.store)

    @property
    def scratch(self) -> Path:
        """`--scratch-dir` (default: the system temp folder), for staging and finalize."""
        return self._scratch

    @property
    def report_path(self) -> str:
        return self.store.child(_REPORT)

    @staticmethod
    def _marker(unit: int) -> str:
        return f"{_PROGRESS}{unit:06d}.json"

    # ---- checks ----------------------------------------------------------------------------

    def _checked(self, doing: str, call: Callable[[], T],
                 needs: Literal["read", "write"] = "write") -> T:
        """`call()`, or a ConfigError saying the store cannot be used (never the credentials);
        `needs` is what the command does there."""
        try:
            return call()
        except ConfigError:
            raise  # already one sentence
        except Exception as e:  # noqa: BLE001 - the client raises many kinds; one sentence
            raise ConfigError(access_problem(self._what, self.url, needs, e) or
                f"{self._what} {self.url!r} cannot be used: {doing} failed "
                f"({describe_error(e)}); check that the bucket exists and that "
                f"{credentials_of(self.url)} may list and {needs} there."
            ) from None

    def _read(self, doing: str, call: Callable[[], T]) -> T:
        """`call()`, a read retried as every store call is; when it fails every time,
        ShardcookIOError saying the store cannot be reached (`messages.unreachable`), so what
        it read is never taken for missing."""
        return retried(f"{doing} in {self.url}", call,
                       lambda e: unreachable(self._what, self.url, doing, e))

    def is_ours(self) -> bool:
        """True when nothing is under the URL, or a shardcook run (its manifest, or only
        `.shardcook/`)."""
        if self._checked("reading the manifest", partial(self.store.exists, _MANIFEST)):
            return True
        names = self._checked("listing", lambda: list(self.store.names()))
        return all(n.startswith(f"{OURS_DIR}/") for n in names)

    def check(self) -> None:
        """Raises ConfigError unless the store can be listed and written and the folder holds
        nothing foreign."""
        self.check_ours()
        self.check_writable()

    def check_ours(self) -> None:
        """Raises ConfigError when the folder holds anything foreign; writes nothing."""
        if not self.is_ours():
            raise ConfigError(
                f"Output folder {self.url!r} holds objects that are not a shardcook dataset; "
                "choose a new or empty folder."
            )

    def check_access(self) -> None:
        """Lists the folder, checks it is not inside a dataset (`place.check_bucket_place`)
        and writes and deletes a test object, or raises ConfigError saying whether the store
        refused the credentials or their permissions; before any input is read. The listing
        comes first: a refused key is named only in a reply with a body."""
        self._checked("listing", lambda: next(iter(self.store.names()), None))
        self._checked("reading the folders above it", partial(check_bucket_place, self.store))
        self._checked("reading the lease", self._lock.check_free)
        self.check_writable()

    def lock(self, me: Holder) -> None:
        """Takes the folder's lease for run `me` and renews it until `close` (`lock.Lock`: a
        lease here), or raises ConfigError naming the run that holds it, or saying that
        workers share it."""
        self._lock.acquire(me, self._checked)

    def share(self, me: Holder) -> None:
        """Joins the folder as worker `me` of a run without a process group: a lease of its
        own under `.shardcook/workers/`, renewed until `close`, or ConfigError naming the run
        that holds the folder alone."""
        self._lock.share(me, self._checked)

    def check_held(self) -> None:
        """Raises DatasetError when another run took the folder over (its lease) meanwhile."""
        try:
            self._lock.check_held()
        except OSError as e:
            raise DatasetError(f"{self.url}: cannot read the lease ({e.strerror or e}); nothing "
                               "was finalized: rerun the same command.") from None

    def check_writable(self) -> None:
        """Writes and deletes a small object under `.shardcook/` (once per run: `check_access`
        and `check` both ask), and makes the staging folder's parent, or raises ConfigError."""
        if not self._probed:
            self._checked("writing and deleting a test object",
                          partial(self.store.probe_write, OURS_DIR))
            self._probed = True
        try:
            self._scratch.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--scratch-dir {str(self._scratch)!r} cannot be made "
                              f"({e.strerror or e}); choose a folder you can write to.") from None

    # ---- --overwrite -----------------------------------------------------------------------

    def recorded_shards(self) -> set[str]:
        """The shard objects the earlier run's manifest or unit markers name."""
        listed = self._checked("listing", lambda: list(self.store.names(_PROGRESS)))
        stems = [n[len(_PROGRESS):].removesuffix(".json") for n in listed]
        markers = self.read_markers([int(s) for s in stems if s.isdigit()]).values()
        return records.recorded_shards(self.read_manifest, markers)

    def plan_overwrite(self) -> overwrite.ObjectPlan:
        """What `--overwrite` removes and keeps (`overwrite.plan_object_deletions`), deleting
        nothing.

        Raises:
            ConfigError: not a shardcook run, or objects named like shards no record names, or
                a tar finalize would index.
        """
        if not self.is_ours():
            raise ConfigError(
                f"Output folder {self.url!r} holds objects that are not a shardcook dataset, so "
                "--overwrite deletes nothing there; choose a new or empty folder."
            )
        names = self._checked("listing", lambda: list(self.store.names()))
        return overwrite.plan_object_deletions(self.url, names, self.recorded_shards())

    def clear(self) -> list[str]:
        """Deletes what the earlier shardcook run wrote, after checking everything; returns the
        objects kept."""
        plan = self.plan_overwrite()
        overwrite.delete_planned_objects(self.url, plan, lambda name: retried(
            f"deleting {name} in {self.url}", partial(self._delete, name)))
        return plan.keep

    def discard_shard(self, name: str) -> None:
        """Deletes shard `name`, its `.tar.idx` and its index rows where there (a unit cut off
        before its marker is redone). What is there is listed once, at the first call: objects
        uploaded after it are this run's."""
        if self._before is None:
            self._before = set(retried(f"listing {self.url}", lambda: list(self.store.names())))
        for one in (name, f"{name}.idx", shardrows.rows_name(name),
                    mediarecords.record_name(name)):
            if one in self._before:
                retried(f"deleting {one} in {self.url}", partial(self._delete, one))
                self._before.discard(one)

    def _delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # gone already: what was wanted
            self.store.delete(name)

    def remove_partial_shards(self) -> None:
        """Nothing: partial shards only ever exist in a process's own staging folder."""

    # ---- a unit's shard ----------------------------------------------------------------------

    @property
    def shard_dir(self) -> Path:
        """This process's staging folder under the scratch folder (made on first use)."""
        if self._staging is None:
            try:
                self._scratch.mkdir(parents=True, exist_ok=True)
                self._staging = Path(tempfile.mkdtemp(prefix="shardcook-staging-",
                                                      dir=self._scratch))
            except OSError as e:
                raise ConfigError(f"--scratch-dir {str(self._scratch)!r} cannot hold a staging "
                                  f"folder ({e.strerror or e}); choose a folder you can write "
                                  "to.") from None
            self._uploader = Uploader(self.store, self._upload_queue, self._staging)
        return self._staging

    def finish_unit(self, unit: int, record: dict[str, Any],
                    media: mediarecords.UnitMedia | None = None) -> None:
        """Indexes the unit's staged shard, and hands shard and index to the uploader; once
        both are in the bucket, the shard's index rows and its media record, when `media`
        holds one (named by the object's ETag: see `dataset/index/shardrows.py`), and then the
        unit's marker are written. Waits while the upload queue is full.

        Raises:
            ShardcookIOError: an earlier upload failed for good.
            DatasetError: another run took the folder over.
        """
        if self._lock.lost:
            self.check_held()  # stop writing into a folder another run now holds
        staging, uploader = self.shard_dir, self._uploader
        assert uploader is not None  # made with the staging folder
        files: list[Path] = []
        staged: list[Path] = []
        then = partial(self.store.write_bytes, self._marker(unit), record_json(record))
        shard = record.get("shard")
        if isinstance(shard, str):
            rows = staging / f"{shard}.rows.sqlite"
            rows.unlink(missing_ok=True)
            _native.index_shards(staging, [shard], rows)
            shardrows.compact(rows)
            files = [staging / shard, staging / f"{shard}.idx"]
            records = {rows: shardrows.rows_name(shard)}
            if media is not None:
                media_record = staging / f"{shard}.media.sqlite"
                media.write(media_record, durable=False)  # scratch: uploaded, then deleted
                records[media_record] = mediarecords.record_name(shard)
            staged = list(records)
            then = partial(self._after_upload, shard, records, files[0].stat().st_size, then)
        named = f" ({shard})" if isinstance(shard, str) else ""
        uploader.submit(files, then, f"writing the index rows and the marker of unit {unit}"
                        f"{named} to {self.url}", staged=staged)

    def _after_upload(self, shard: str, records: dict[Path, str], size: int,
                      write_marker: Callable[[], None]) -> None:
        """Uploads the shard's records (staged file: its name in the bucket; its index rows, and
        its media record when there is one) naming the shard object as the store now holds it,
        then writes the marker."""
        etag = self.store.stat(shard).etag
        if etag is not None:
            for path, name in records.items():
                shardrows.record_object(path, size, etag)
                self.store.upload(path, name)
        write_marker()

    def flush(self) -> None:
        """Waits until every unit handed to `finish_unit` is uploaded and recorded.

        Raises:
            ShardcookIOError: an upload failed for good.
        """
        if self._uploader is not None:
            self._uploader.wait()

    def close(self) -> None:
        """Stops the uploads (those not started are dropped), removes the staging folder and
        gives the lease up, if this process holds it."""
        if self._uploader is not None:
            self._uploader.close()
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
        self._lock.release()

    def scratch_peak_bytes(self) -> int | None:
        """The most bytes staged at once (shards and indexes), measured when each shard closes."""
        return self._uploader.peak_bytes if self._uploader is not None else 0

    def write_file(self, name: str, data: bytes) -> None:
        """Writes object `name` (relative to the folder) in one PUT."""
        self._write(name, data)

    def create_file(self, name: str, data: bytes | str) -> bool:
        """Writes object `name` only when there is none (`Remote.create`), retried; whether
        this call did. A try that failed after the store took it makes the next one find the
        name taken: the object holding this call's bytes says it was this call."""
        body = data.encode() if isinstance(data, str) else data
        created = retried(f"creating {name} in {self.url}", partial(self.store.create, name, body))
        return created or self.read_file(name) == body

    def read_file(self, name: str) -> bytes | None:
        """Object `name`, or None when there is none.

        Raises:
            ShardcookIOError: the store cannot be reached.
        """
        return self._read(f"reading {name}", partial(self._object, name))

    def _object(self, name: str) -> bytes | None:
        try:
            return self.store.read(name)
        except FileNotFoundError:
            return None

    # ---- records ---------------------------------------------------------------------------

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when there is none.

        Raises:
            DatasetError: it is damaged or cannot be read.
        """
        if not self._checked("reading the manifest", partial(self.store.exists, _MANIFEST),
                             "read"):
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

    def _write(self, name: str, data: bytes | str) -> None:
        """One object written whole (one PUT), retried; ShardcookIOError when it fails."""
        retried(f"writing {name} to {self.url}", partial(self.store.write_bytes, name, data))

    def write_marker(self, unit: int, record: dict[str, Any]) -> None:
        """Rewrites the unit's marker (its shard is already uploaded), retried."""
        self._write(self._marker(unit), record_json(record))

    def interrupted_finalize(self) -> None:
        """None: finalize works in a local copy (`--scratch-dir`) and uploads the metadata
        only once it validated, `.info.json` last, so a killed one leaves no undo folder here
        (a first one cut off while uploading leaves `.info.json` missing)."""
        return None

    def read_markers(self, units: list[int]) -> dict[int, dict[str, Any]]:
        """The records of those of `units` that are done: one listing of the folder finds the
        markers and the shards, then the markers that are there are read, a few at a time.

        Raises:
            ShardcookIOError: the store cannot be reached (a marker that cannot be read is not
                a unit to redo).
        """
        present = set(self._read("listing the folder", lambda: list(self.store.names())))
        wanted = [u for u in units if self._marker(u) in present]
        with ThreadPoolExecutor(max_workers=MARKER_READERS) as pool:
            records = dict(zip(wanted, pool.map(self._read_record, wanted), strict=True))
        return {u: r for u, r in records.items()
                if r is not None and (r.get("shard") is None or r["shard"] in present)}

    def _read_record(self, unit: int) -> dict[str, Any] | None:
        """The unit's marker as a record whose shard is None or a shard name; None when it is
        gone (deleted since the listing) or damaged (the unit is redone)."""
        name = self._marker(unit)
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

