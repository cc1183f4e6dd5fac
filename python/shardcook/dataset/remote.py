"""The local view of a dataset in object storage (`msc://PROFILE/path`, `s3://bucket/path`).

Under a scratch folder, the view holds the dataset's small files (`.nv-meta/*`, `.shardcook/*`,
every `*.tar.idx`) and, for each shard, a placeholder: a sparse file of the shard's size whose
first block says it was not downloaded, so a shard listing, a size and a name check see the
dataset as it is, and a reader that opens a placeholder by mistake fails instead of finding an
empty tar. A shard's bytes are downloaded only for a step that reads them: a window of a few at
a time, in parallel, each put back to a placeholder once the step is done, so scratch never
holds more than one window of shards.

What a command writes (finalize: `.tar.idx` files, `.nv-meta/*`, `.shardcook/finalize.json`) is
uploaded by `publish`, each object written whole, `.info.json` (what makes a folder an Energon
dataset) last; a command that fails before `publish` leaves the bucket as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import struct
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path, PurePosixPath

from shardcook import _native
from shardcook.dataset.view import DatasetView
from shardcook.errors import ConfigError, DatasetError, DuplicateKeyError
from shardcook.layouts.names import INFO_JSON, META_DIR, OURS_DIR
from shardcook.storage import Remote, access_problem, describe_error, remote

__all__ = ["PLACEHOLDER", "WINDOW", "RemoteView"]

#: Shards downloaded at once (and so at most on scratch): enough to keep the link busy.
WINDOW = 4

#: Small files (metadata, `.tar.idx`) copied at once.
SMALL_FILES_AT_ONCE = 16

#: The first bytes of a shard not downloaded (not a tar header: tar readers refuse it).
PLACEHOLDER = b"shardcook: this shard is in object storage and was not downloaded\n"

#: What a tar ends with after its last sample's end offset: two zero blocks.
_END_BLOCKS = bytes(1024)

_SHARD_ENDINGS = (".tar", ".tgz")


def _is_small_file(name: str) -> bool:
    """The files a view always copies: metadata and indexes, never shard bytes."""
    top = name.split("/", 1)[0]
    return top in (META_DIR, OURS_DIR) or name.endswith(".tar.idx")


def _safe_name(url: str, name: str) -> str:
    """`name` once it is known to stay inside the dataset folder.

    Raises:
        DatasetError: the object's name is absolute or climbs out with `..`.
    """
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or any(p in ("..", ".") for p in parts):
        raise DatasetError(f"{url} holds an object named {name!r}, which escapes the dataset "
                           "folder; remove or rename it")
    return name


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class RemoteView(DatasetView):
    """A dataset folder in object storage, seen through a local folder (see the module)."""

    def __init__(self, folder: Remote, root: Path, sizes: dict[str, int], window: int) -> None:
        super().__init__(root, folder.url)
        self.folder = folder
        self.window = window
        #: Every shard's size in the bucket.
        self.sizes = sizes
        #: The small files as copied: name -> sha256, to publish only what changed.
        self.copied: dict[str, str] = {}
        #: Shards whose whole bytes are under `root` now.
        self._present: set[str] = set()

    @classmethod
    @contextmanager
    def open(cls, value: str | os.PathLike[str], *,
             scratch_dir: str | os.PathLike[str] | None = None,
             window: int = WINDOW) -> Iterator[RemoteView]:
        """Builds the view of the URL `value` under a new folder in `scratch_dir`, removed when
        the block ends.

        Raises:
            ConfigError: the URL cannot be opened (see `storage.check_url`) or listed (no
                bucket, no access).
            DatasetError: the listing holds no object, an object's name escapes the folder, or
                scratch cannot be written.
        """
        folder = remote(value, "The dataset URL")
        try:
            scratch = Path(tempfile.mkdtemp(prefix="shardcook-view-", dir=scratch_dir))
        except OSError as e:
            where = scratch_dir or "the temporary folder"
            raise DatasetError(f"cannot make a scratch folder in {where} ({e.strerror or e}); "
                               "give --scratch-dir a folder with room") from None
        try:
            base = PurePosixPath(folder.url.split("://", 1)[1]).name or "dataset"
            view = cls(folder, scratch / base, {}, window)
            view._materialise()
            yield view
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _listing(self) -> list[tuple[str, int]]:
        try:
            found = list(self.folder.sized_names())
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise ConfigError(access_problem("The dataset", self.name, "read", e) or
                              f"cannot list {self.name} ({describe_error(e)}); check the "
                              "bucket, the path and the profile's credentials") from None
        if not found:
            raise DatasetError(f"{self.name} holds no objects; give the URL of a dataset folder")
        return [(_safe_name(self.name, name), size) for name, size in found]

    def _materialise(self) -> None:
        self.root.mkdir()
        small = []
        for name, size in self._listing():
            if _is_small_file(name):
                small.append(name)
            elif name.endswith(_SHARD_ENDINGS):
                self.sizes[name] = size
                self._placeholder(name)
        self._in_parallel(lambda name: self._fetch(name, self._local(name)), small,
                          SMALL_FILES_AT_ONCE)
        self.copied = {name: _digest(self.root / name) for name in small}

    def _local(self, name: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _placeholder(self, name: str) -> None:
        with open(self._local(name), "wb") as f:
            f.write(PLACEHOLDER)
            f.truncate(self.sizes[name])

    def _in_parallel(self, work: Callable[[str], object], names: Sequence[str],
                     at_once: int | None = None) -> None:
        with ThreadPoolExecutor(max_workers=max(1, at_once or self.window)) as pool:
            for _ in pool.map(work, names):
                pass

    def _fetch(self, name: str, path: Path, first_bytes: int | None = None) -> None:
        """Object `name` (or its first `first_bytes`, then a tar's end blocks) at `path`.

        Raises:
            DatasetError: the store fails, in one sentence.
        """
        try:
            if first_bytes is None:
                self.folder.download(name, path)
            else:
                path.write_bytes(self.folder.read_range(name, 0, first_bytes) + _END_BLOCKS)
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise DatasetError(f"cannot download {self.folder.child(name)} "
                               f"({describe_error(e)})") from None

    def _download(self, name: str, first_sample: bool) -> None:
        offsets = self._idx_offsets(name) if first_sample else None
        # the first sample and the end blocks: a tar that readers stop in after sample 0
        first_bytes = offsets[1] if offsets is not None and len(offsets) > 2 else None
        self._fetch(name, self._local(name), first_bytes)

    @contextmanager
    def fetched(self, shards: Sequence[str], *, first_sample: bool = False) -> Iterator[None]:
        wanted = [s for s in dict.fromkeys(shards) if s in self.sizes]
        try:
            self._in_parallel(lambda name: self._download(name, first_sample), wanted)
            if not first_sample:
                self._present.update(wanted)
            yield
        finally:
            self._present.difference_update(wanted)
            for name in wanted:
                self._placeholder(name)

    def windows(self, shards: Sequence[str]) -> Iterator[list[str]]:
        for start in range(0, len(shards), self.window):
            window = list(shards[start:start + self.window])
            with self.fetched(window):
                yield window

    def _idx_offsets(self, name: str) -> list[int] | None:
        """The offsets a shard's `.tar.idx` holds (samples, then the end), None when unreadable."""
        path = self.root / f"{name}.idx"
        if not path.is_file():
            return None
        data = path.read_bytes()
        if len(data) % 8:
            return None
        return [n for (n,) in struct.iter_unpack("=Q", data)]

    def verify_shards(self, shards: Sequence[tuple[str, int | None]]) -> list[str]:
        """Shards whose bytes are here (in a window) get the fresh scan; the others are checked
        against their `.tar.idx` and their size in the listing, nothing downloaded: as many
        entries as `.info.json` says samples (plus the end), increasing block offsets, and an
        object long enough to hold them."""
        here = [(name, n) for name, n in shards if name in self._present]
        problems = super().verify_shards(here) if here else []
        return problems + self._light_problems([s for s in shards if s[0] not in self._present])

    def _light_problems(self, shards: Sequence[tuple[str, int | None]]) -> list[str]:
        fix = "; run `shardcook finalize --force`"
        problems = []
        for name, expected in shards:
            offsets = self._idx_offsets(name)
            if offsets is None:
                problems.append(f"{name}: the index file {name}.idx is missing or not whole{fix}")
                continue
            if expected is not None and len(offsets) != expected + 1:
                problems.append(f"{name}.idx has {len(offsets)} entries where the shard needs "
                                f"{expected + 1} (samples + 1){fix}")
            elif any(b <= a for a, b in pairwise(offsets)) or any(n % 512 for n in offsets):
                problems.append(f"{name}.idx does not hold increasing tar block offsets{fix}")
            elif offsets and offsets[-1] + 512 > self.sizes[name]:
                problems.append(f"{name}: the shard is {self.sizes[name]:,} bytes but its index "
                                f"ends at byte {offsets[-1]:,}; it was cut short or replaced{fix}")
        return problems

    def index_shards(self, shards: Sequence[str], sqlite_path: Path | None
                     ) -> tuple[list[tuple[str, int]], list[str]]:
        """The native indexer on one window at a time: each window's rows go to a sqlite of
        their own, appended in order to the whole index with their `tar_file_id` shifted; its
        UNIQUE key column finds a key in two windows (the indexer finds the rest)."""
        target = sqlite_path or self.root.parent / "keys.sqlite"
        building = target.with_name(target.name + ".tmp")
        part = self.root.parent / "window.sqlite"
        counts: list[tuple[str, int]] = []
        names: dict[str, None] = {}
        try:
            for window in self.windows(shards):
                summary = _native.index_shards(self.root, window, part)
                first_id = len(counts)
                if first_id == 0:
                    os.replace(part, building)
                else:
                    _append_rows(building, part, first_id, shards)
                counts += [(name, n) for name, n in summary.shards]
                names.update(dict.fromkeys(summary.part_names))
            if sqlite_path is None:
                building.unlink()
            else:
                os.replace(building, target)
        finally:
            building.unlink(missing_ok=True)
            part.unlink(missing_ok=True)
        return counts, sorted(names)[:50]

    def check_writable(self) -> None:
        """Writes and deletes an empty object under `.shardcook/`, so a store that refuses
        writes says so before any shard is downloaded.

        Raises:
            ConfigError: the store refused the write, in one sentence.
        """
        try:
            self.folder.probe_write(OURS_DIR)
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise ConfigError(access_problem("The dataset", self.name, "write", e) or
                              f"cannot write to {self.name} ({describe_error(e)}); check the "
                              "bucket and the profile's credentials") from None

    def publish(self) -> None:
        """Uploads the small files that changed or appeared under the view and deletes the
        ones that went away; `.info.json` goes last, so Energon sees a new index only whole."""
        now = {str(p.relative_to(self.root)): p for p in self.root.rglob("*")
               if p.is_file() and _is_small_file(str(p.relative_to(self.root)))}
        changed = sorted((name for name, path in now.items()
                          if self.copied.get(name) != _digest(path)),
                         key=lambda n: (n == f"{META_DIR}/{INFO_JSON}", not n.endswith(".idx"), n))
        gone = [name for name in self.copied if name not in now]
        last = changed[-1:] if changed and changed[-1] == f"{META_DIR}/{INFO_JSON}" else []
        try:
            self._in_parallel(lambda name: self.folder.upload(now[name], name),
                              changed[:len(changed) - len(last)], SMALL_FILES_AT_ONCE)
            for name in gone:
                self.folder.delete(name)
            for name in last:
                self.folder.upload(now[name], name)
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise DatasetError(
                f"cannot write the new index to {self.name} ({describe_error(e)}); what was "
                "written is incomplete, so fix access to the bucket and run `shardcook finalize "
                "--force` on it again") from None
        self.copied = {name: _digest(path) for name, path in now.items()}

    @property
    def location(self) -> str:
        return self.name

    def shown(self, text: str) -> str:
        return text.replace(str(self.root), self.name)


def _append_rows(target: Path, part: Path, first_id: int, shards: Sequence[str]) -> None:
    """Appends `part`'s rows to `target` in their order, `tar_file_id` shifted by `first_id`.

    Raises:
        DuplicateKeyError: a key of `part` is already in `target`, naming both shards.
    """
    with contextlib.closing(sqlite3.connect(target)) as db:
        db.execute("ATTACH DATABASE ? AS part", (str(part),))
        try:
            with db:
                db.execute("INSERT INTO samples SELECT tar_file_id + ?, sample_key, sample_index, "
                           "byte_offset, byte_size FROM part.samples ORDER BY rowid", (first_id,))
                db.execute("INSERT INTO sample_parts SELECT tar_file_id + ?, sample_index, "
                           "part_name, content_byte_offset, content_byte_size "
                           "FROM part.sample_parts ORDER BY rowid", (first_id,))
        except sqlite3.IntegrityError:
            key, first, second = db.execute(
                "SELECT p.sample_key, s.tar_file_id, p.tar_file_id + ? FROM part.samples p "
                "JOIN samples s ON s.sample_key = p.sample_key ORDER BY p.rowid LIMIT 1",
                (first_id,)).fetchone()
            raise DuplicateKeyError(
                f"duplicate sample key {json.dumps(key)}: in {shards[first]} and in "
                f"{shards[second]}; keys must be unique across the dataset (rename or drop one)"
            ) from None
        finally:
            db.execute("DETACH DATABASE part")
