"""`Staged`: a run's shards on their way to a folder that is not on this machine (object
storage, memory).

The native writer writes each shard into a staging folder of this process under
`--scratch-dir`; once closed, its `.tar.idx` is built from the staged copy, the background
`Uploader` puts shard and index into the store (each object appears whole under its final name,
or not at all), then writes the unit's marker, then deletes the staged files. So a marker always
names a shard that is in the store. The staging folder is removed by `close`.

A job's working files (ingest's downloads) go into a folder of the process's own there
(`Owned`), which records who made it, so a later run on this machine removes what a killed one
left.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from shardcook import _native
from shardcook.dataset.index import shardrows
from shardcook.dataset.media import records as mediarecords
from shardcook.errors import ConfigError
from shardcook.files import process_running
from shardcook.output.holder import machine_id
from shardcook.output.uploader import Uploader
from shardcook.storage.store import Store


class Staged:
    """Shards of the folder `store` staged under `scratch` (a local path, checked with the
    config; default: the system temp folder), at most `upload_queue` of them waiting for
    upload."""

    def __init__(self, store: Store, scratch: str | None = None, upload_queue: int = 4) -> None:
        self.store = store
        self._scratch = Path(scratch) if scratch is not None else Path(tempfile.gettempdir())
        self._upload_queue = upload_queue
        self._staging: Path | None = None
        self._uploader: Uploader | None = None

    @property
    def scratch(self) -> Path:
        """`--scratch-dir` (default: the system temp folder), for staging and finalize."""
        return self._scratch

    def check(self) -> None:
        """Makes the staging folder's parent, or raises ConfigError."""
        try:
            self._scratch.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--scratch-dir {str(self._scratch)!r} cannot be made "
                              f"({e.strerror or e}); choose a folder you can write to.") from None

    def local_space(self, prefix: str) -> Owned:
        """A folder `PREFIX…` of this process's own under the scratch folder (made now)."""
        return Owned(self._scratch, prefix)

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

    def finish_unit(self, unit: int, record: dict[str, Any], media: mediarecords.UnitMedia | None,
                    write_marker: Callable[[], None]) -> None:
        """Indexes the unit's staged shard, and hands shard and index to the uploader; once
        both are in the store, the shard's index rows and its media record, when `media` holds
        one (named by the object's ETag: see `dataset/index/shardrows.py`), and then the unit's
        marker are written. Waits while the upload queue is full.

        Raises:
            ShardcookIOError: an earlier upload failed for good.
        """
        staging, uploader = self.shard_dir, self._uploader
        assert uploader is not None  # made with the staging folder
        files: list[Path] = []
        staged: list[Path] = []
        then = write_marker
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
                        f"{named} to {self.store}", staged=staged)

    def _after_upload(self, shard: str, records: dict[Path, str], size: int,
                      write_marker: Callable[[], None]) -> None:
        """Uploads the shard's records (staged file: its name in the store; its index rows, and
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
        """Stops the uploads (those not started are dropped) and removes the staging folder."""
        if self._uploader is not None:
            self._uploader.close()
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)

    def scratch_peak_bytes(self) -> int:
        """The most bytes staged at once (shards and indexes), measured when each shard closes."""
        return self._uploader.peak_bytes if self._uploader is not None else 0

    def remove_partial_shards(self) -> None:
        """Nothing: partial shards only ever exist in a process's own staging folder."""


#: In an `Owned` folder: who made it (`machine`, `pid`).
OWNER_JSON = "owner.json"


class Owned:
    """A new folder `PREFIX…` under `scratch` (made now; those killed runs left removed
    first, `remove_abandoned`), with its owner recorded in it, removed whole at `release`."""

    def __init__(self, scratch: Path, prefix: str) -> None:
        remove_abandoned(scratch, prefix)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch))
        owner = {"machine": machine_id(), "pid": os.getpid()}
        (self.path / OWNER_JSON).write_text(json.dumps(owner), encoding="utf-8")

    def release(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def remove_abandoned(scratch: Path, prefix: str) -> list[str]:
    """Removes the `PREFIX…` folders under `scratch` that processes killed on this machine
    left (their owner's pid no longer runs here); another machine's, a running one's and
    folders without an owner record are kept. Returns the names removed."""
    here = machine_id()
    removed = []
    for folder in sorted(scratch.glob(f"{prefix}*")):
        try:
            owner = json.loads((folder / OWNER_JSON).read_text(encoding="utf-8"))
            mine = here and owner["machine"] == here and not process_running(int(owner["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if mine and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed
