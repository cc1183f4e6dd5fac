"""`Fetched`: how a dataset in a store other than a local folder (a bucket: `msc://PROFILE/path`,
`s3://bucket/path`; a `storage.memory.MemoryStore`) is seen through a local folder, a
`dataset.view.DatasetView`'s `Fetch`. It asks only the `storage.store.Store`.

Under a scratch folder, the view holds the dataset's small files (`.nv-meta/*`, `.shardcook/*`,
every `*.tar.idx`) and, for each shard, a placeholder: a sparse file of the shard's size whose
first block says it was not downloaded, so a shard listing, a size and a name check see the
dataset as it is, and a reader that opens a placeholder by mistake fails instead of finding an
empty tar. A shard's bytes are downloaded only for a step that reads them: a window of a few at
a time, in parallel, each put back to a placeholder once the step is done, so scratch never
holds more than one window of shards.

Indexing downloads no shard: a shard a shardcook run wrote has its rows recorded
(`shardrows`); any other tar is indexed from its bytes, its headers walked with ranged reads or
the tar streamed, as the first tar's reads showed the store to be faster (`tarreads`), many tars
at once, each merged into the index as soon as the ones before it are.

What a command writes (finalize: `.tar.idx` files, `.nv-meta/*`, `.shardcook/finalize.json`) is
uploaded by `publish`, each object written whole, `.info.json` (what makes a folder an Energon
dataset) last; a command that fails before `publish` leaves the store as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from shardcook import _native
from shardcook.dataset.index import shardrows, tarindex
from shardcook.dataset.inplace import scanned_problems
from shardcook.dataset.tarreads import (
    PROBE_PIECE,
    STREAM_PIECE,
    STREAMS_AT_ONCE,
    Choice,
    Probe,
    TarRead,
    choose,
    forced,
)
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import INFO_JSON, META_DIR, OURS_DIR
from shardcook.runtime import waits
from shardcook.storage import (
    Listed,
    RustReads,
    Store,
    access_problem,
    bad_segment,
    credentials_of,
    describe_error,
)

__all__ = ["PLACEHOLDER", "WINDOW", "Fetched"]

log = logging.getLogger(__name__)

#: Shards downloaded at once (and so at most on scratch): enough to keep the link busy.
WINDOW = 4

#: Small files (metadata, `.tar.idx`) copied at once, each a thread waiting on a round trip:
#: a finalize of 200 tars uploads 200 `.tar.idx`, 13 round trips one after the other at 16.
SMALL_FILES_AT_ONCE = 64

#: Tars read at once for their index (`tarreads`): a thread each through MSC's client (more
#: threads contend for the interpreter more than they add reads), or tasks on MSC's Rust client.
#: A walk waits on the store and holds one small read, so on the Rust client as many run as it
#: keeps connections (each read in flight is one; more wait for one): its `max_pool_connections`,
#: 128 unless the profile says otherwise. Streams hold pieces: `tarreads.STREAMS_AT_ONCE`.
WALKS_AT_ONCE = 32
RUST_WALKS_AT_ONCE = 128

#: Walked shards merged into the index at once, at most.
MERGED_AT_ONCE = 64

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
    """`name` once it is known to be a file name inside the dataset folder.

    Raises:
        DatasetError: the object's name is absolute or has an empty, `.` or `..` segment.
    """
    if bad_segment(name) is not None:
        raise DatasetError(f"{url} holds an object named {name!r}, which is no file name inside "
                           "the dataset folder (an empty, '.' or '..' segment); remove or rename "
                           "it")
    return name


def _view_name(store: Store) -> str:
    """The local name of the view of `store`: its last segment, unless a file name cannot be
    that long (an object key's segment can: 1,024 bytes), then one made of its digest."""
    name = store.name or "dataset"
    if len(os.fsencode(name)) <= 255:
        return name
    return f"dataset-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Fetched:
    """A dataset folder in `store`, seen through the local folder `root` (see the module);
    `name` is how messages name it: the store's URL."""

    def __init__(self, store: Store, root: Path, sizes: dict[str, int], window: int,
                 work: Path) -> None:
        self.root = root
        #: The view's own files (index parts, first samples), in a folder beside `root`'s, so
        #: that no dataset's name can stand for one of them.
        self.work = work
        self.name = str(store)
        self.store = store
        self.window = window
        #: Every shard's size in the bucket.
        self.sizes = sizes
        #: Every shard's ETag in the listing (None: the store gave none).
        self.etags: dict[str, str | None] = {}
        #: The small files as copied: name -> sha256, to publish only what changed.
        self.copied: dict[str, str] = {}
        #: Shards whose whole bytes are under `root` now.
        self._present: set[str] = set()
        #: The first samples read so far, kept outside `root` (where only whole shards or
        #: placeholders lie): finalize, its validation and the summary each ask for the first
        #: sample of the same shard, and a store 20 ms away answers slowly.
        self._first_samples = work / "first-samples"
        #: Reads begun before indexing (the first shard's, to read its first sample and measure
        #: the store), continued by indexing.
        self._walks: dict[str, TarRead] = {}
        #: Streaming or walking, as the first tar's reads measured the store; None until then.
        self.choice: Choice | None = None
        self._judge: Callable[[float, int], Choice] | None = None
        self._probing = threading.Lock()
        #: Set when indexing stops early (a duplicate key, a damaged tar): walks still reading
        #: stop at their next read instead of finishing.
        self._stop_walks = threading.Event()

    @classmethod
    @contextmanager
    def open(cls, store: Store, *, scratch_dir: str | os.PathLike[str] | None = None,
             window: int = WINDOW) -> Iterator[Fetched]:
        """Builds the view of the dataset in `store` under a new folder in `scratch_dir`, removed
        when the block ends.

        Raises:
            ConfigError: the folder cannot be listed (no bucket, no access).
            DatasetError: the listing holds no object, an object's name escapes the folder, or
                scratch cannot be written.
        """
        try:
            scratch = Path(tempfile.mkdtemp(prefix="shardcook-view-", dir=scratch_dir))
        except OSError as e:
            where = scratch_dir or "the temporary folder"
            raise DatasetError(f"cannot make a scratch folder in {where} ({e.strerror or e}); "
                               "give --scratch-dir a folder with room") from None
        try:
            view = cls(store, scratch / "view" / _view_name(store), {}, window, scratch / "work")
            view._materialise()
            yield view
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _listing(self) -> list[Listed]:
        try:
            found = list(self.store.listing())
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise ConfigError(access_problem("The dataset", self.name, "read", e) or
                              f"cannot list {self.name} ({describe_error(e)}); check the "
                              f"bucket, the path and {credentials_of(self.name)}") from None
        if not found:
            raise DatasetError(f"{self.name} holds no objects; give the URL of a dataset folder")
        return [Listed(_safe_name(self.name, obj.name), obj.size, obj.etag) for obj in found]

    def _materialise(self) -> None:
        self.root.mkdir(parents=True)
        self.work.mkdir()
        small = []
        for name, size, etag in self._listing():
            if _is_small_file(name):
                small.append(name)
            elif name.endswith(_SHARD_ENDINGS):
                self.sizes[name] = size
                self.etags[name] = etag
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
                self.store.download(name, path)
            else:
                path.write_bytes(self.store.read_range(name, 0, first_bytes) + _END_BLOCKS)
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise DatasetError(f"cannot download {self.store.child(name)} "
                               f"({describe_error(e)})") from None

    def _download(self, name: str, first_sample: bool) -> None:
        if not first_sample:
            self._fetch(name, self._local(name))
            return
        # the first sample and the end blocks: a tar that readers stop in after sample 0
        kept = self._first_samples / name
        if not kept.is_file():
            kept.parent.mkdir(parents=True, exist_ok=True)
            part = kept.with_name(f"{kept.name}.part")  # whole, or not kept at all
            self._fetch(name, part, self._first_sample_end(name))
            part.replace(kept)
        shutil.copyfile(kept, self._local(name))

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

    def read_range(self, shard: str, start: int, end: int) -> bytes:
        """One ranged GET of the shard object."""
        try:
            return self.store.read_range(shard, start, end - start)
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise self._unreadable(shard, e) from None

    def _unreadable(self, shard: str, error: Exception) -> DatasetError:
        return DatasetError(f"cannot read {self.store.child(shard)} ({describe_error(error)})")

    def windows(self, shards: Sequence[str]) -> Iterator[list[str]]:
        for start in range(0, len(shards), self.window):
            window = list(shards[start:start + self.window])
            with self.fetched(window):
                yield window

    def _idx_offsets(self, name: str) -> list[int] | None:
        """The offsets a shard's `.tar.idx` holds (samples, then the end), None when unreadable."""
        path = self.root / f"{name}.idx"
        return tarindex.idx_offsets(path.read_bytes()) if path.is_file() else None

    def shard_object(self, shard: str) -> tuple[int, str] | None:
        """The shard object's size and ETag in the listing; None when the store gave none."""
        etag = self.etags.get(shard)
        return None if etag is None or shard not in self.sizes else (self.sizes[shard], etag)

    def verify_shards(self, shards: Sequence[tuple[str, int | None]]) -> list[str]:
        """Shards whose bytes are here (in a window) get the fresh scan; the others are checked
        against their `.tar.idx` and their size in the listing, nothing downloaded: as many
        entries as `.info.json` says samples (plus the end), increasing block offsets, and an
        object long enough to hold them."""
        here = [(name, n) for name, n in shards if name in self._present]
        problems = scanned_problems(self.root, here) if here else []
        return problems + self._light_problems([s for s in shards if s[0] not in self._present])

    def _light_problems(self, shards: Sequence[tuple[str, int | None]]) -> list[str]:
        return tarindex.light_problems(self.root, shards, self.sizes)

    def index_shards(self, shards: Sequence[str], sqlite_path: Path | None
                     ) -> tuple[list[tuple[str, int]], list[str]]:
        """Each shard's rows appended in order, with their `tar_file_id` shifted, to one index
        whose UNIQUE key column finds a key in two shards: the rows a run recorded when it
        wrote the shard (`shardrows`) while they still describe the object, else those of the
        shard's header walk; no shard is downloaded."""
        target = sqlite_path or self.work / "keys.sqlite"
        building = target.with_name(target.name + ".tmp")
        walked_part = self.work / "walked.sqlite"
        counts: list[tuple[str, int]] = []
        names: dict[str, None] = {}
        try:
            for group, part in self._index_parts(shards, walked_part):
                if not building.exists():
                    shardrows.start_index(building, part)
                shardrows.append_rows(building, part, len(counts), shards)
                group_counts, group_names = shardrows.part_summary(part, group)
                counts += group_counts
                names.update(dict.fromkeys(group_names))
            if sqlite_path is None:
                building.unlink(missing_ok=True)
            else:
                os.replace(building, target)
        finally:
            building.unlink(missing_ok=True)
            walked_part.unlink(missing_ok=True)
        return counts, sorted(names)[:50]

    def _index_parts(self, shards: Sequence[str], part: Path
                     ) -> Iterator[tuple[list[str], Path]]:
        """The shards in order, as (shards, the sqlite of their rows): a recorded shard alone,
        the others read (`_walks_of`, many at once) and merged in runs of consecutive shards
        whose reads are done, so the index grows while later reads are still under way."""
        recorded = {name: self._recorded_rows(name) for name in shards}
        self._stop_walks.clear()
        to_read = [name for name, rows in recorded.items() if rows is None]
        with self._walks_of(to_read) as walks:
            done: list[tuple[str, _native.TarWalk]] = []
            for at, name in enumerate(shards):
                rows = recorded[name]
                if rows is None:
                    done.append((name, waits.result(walks[name]).walk))
                    later = walks.get(shards[at + 1]) if at + 1 < len(shards) else None
                    if later is not None and later.done() and len(done) < MERGED_AT_ONCE:
                        continue
                if done:
                    part.unlink(missing_ok=True)
                    _native.write_walks(self.root, done, part)
                    yield [n for n, _ in done], part
                    done = []
                if rows is not None:
                    yield [name], rows
            if to_read:
                self._said_read([waits.result(walks[name]) for name in to_read])

    def _said_read(self, reads: Sequence[TarRead]) -> None:
        """One line: how many tars were streamed and walked, and the bytes each way read."""
        streamed = [r for r in reads if r.streamed]
        walked = [r for r in reads if not r.streamed]

        def share(rs: Sequence[TarRead]) -> str:
            read, size = sum(r.read_bytes for r in rs), sum(r.size for r in rs)
            return f"{read / 2**20:,.1f} MiB read, {100 * read / max(1, size):.1f}% of them"

        said = [f"{len(rs)} {how} ({share(rs)})"
                for rs, how in ((streamed, "streamed"), (walked, "walked")) if rs]
        log.info("indexed %d tars from their bytes: %s", len(reads), ", ".join(said))

    @contextmanager
    def _walks_of(self, names: Sequence[str]) -> Iterator[dict[str, Future[TarRead]]]:
        """Each shard's read for its index, started at once (after the probe, when no read
        measured the store yet): tasks on MSC's Rust client when the profile turns it on
        (`storage.rustreads`), `RUST_WALKS_AT_ONCE` at a time, of which `STREAMS_AT_ONCE`
        streaming, else a thread each through MSC's client, `WALKS_AT_ONCE` at a time. When the
        block ends, reads still under way stop."""
        walks: dict[str, Future[TarRead]] = {}
        rust = self.store.rust_reads(RUST_WALKS_AT_ONCE) if names else None
        pool = ThreadPoolExecutor(max_workers=WALKS_AT_ONCE)
        try:
            if names and self.choice is None:
                self._probed(names, rust)
            slots = asyncio.Semaphore(STREAMS_AT_ONCE)
            for name in names:
                read = self._walks.pop(name, None) or self._tar_read(name)
                walks[name] = (pool.submit(self._read, read, name) if rust is None else
                               rust.submit(partial(self._read_on, rust, read, name, slots)))
            yield walks
        finally:
            self._stop_walks.set()
            pool.shutdown(cancel_futures=True)
            if rust is not None:
                rust.close()

    def _tar_read(self, name: str, probe: Probe | None = None) -> TarRead:
        """A read of shard `name` in the way the probe chose (before it: walking)."""
        stream = self.choice is not None and self.choice.stream
        return TarRead(self.store.child(name), self.sizes[name], self._stop_walks,
                       stream=stream, judge=self._judge, probe=probe)

    def _probed(self, names: Sequence[str], rust: RustReads | None) -> None:
        """The way to read the tars `names` chosen (or as `tarreads.forced` says) and said, from
        their first reads, timed (`tarreads.Probe`): the first tar's few one after the other,
        then one small read of each of as many tars as walk at once, all at once, then one
        large read of each of as many as stream at once. The reads made are kept in `_walks`
        for indexing to go on from."""
        choice = forced()
        walks_at_once = RUST_WALKS_AT_ONCE if rust is not None else WALKS_AT_ONCE
        link, spacing, tars = None, 0.0, len(names)
        if choice is None:
            probe = Probe()
            reads = [(self._tar_read(name, probe if at == 0 else None), name)
                     for at, name in enumerate(names[:walks_at_once])]
            self._walks.update((name, read) for read, name in reads)
            size = int(statistics.median(self.sizes[n] for n in names))
            for again in (False, True):
                if rust is None:
                    self._probe_reads(reads, probe, again)
                else:
                    waits.result(rust.submit(partial(self._probe_reads_on, rust, reads, probe,
                                                     again)))
                link = probe.link()
                # the middle tar's: one tar of tiny members among big ones does not move it
                spacing = statistics.median(read.spacing() for read, _ in reads)
                close = choose(link, spacing, size, tars=tars, walks_at_once=walks_at_once)
                # a stall of the store or of this machine in a fraction of a second of large
                # reads halves their rate: where the two ways come close, they are read again
                if not 0.5 < close.walk_seconds / max(1e-9, close.stream_seconds) < 2:
                    break
            reads[0][0].probe = None

        def judge(spacing: float, size: int) -> Choice:
            return choice or choose(link, spacing, size, tars=tars, walks_at_once=walks_at_once)

        self._judge = judge
        self.choice = judge(spacing, int(statistics.median(self.sizes[n] for n in names)))
        for name in names:
            if name in self._walks:
                read = self._walks[name]
                read.judge = judge
                read.streaming = read.streamed = self.choice.stream
        log.info("%d tars without an index to read: %s", tars, self.choice.reason)

    def _probe_reads(self, reads: Sequence[tuple[TarRead, str]], probe: Probe,
                     again: bool = False) -> None:
        """The probe's reads through MSC's client: the first tar's one after the other, then
        the others' at once, a thread each; `again`: one more large read of each at once."""
        with ThreadPoolExecutor(max_workers=WALKS_AT_ONCE) as pool:
            if not again:
                self._read(*reads[0])
                started = time.perf_counter()
                list(pool.map(lambda r: self._read_once(r[0], r[1]), reads[1:]))
                probe.reads = (len(reads) - 1, time.perf_counter() - started)
            pieces = reads[:STREAMS_AT_ONCE]
            started = time.perf_counter()
            got = sum(pool.map(lambda r: self._read_once(r[0], r[1], PROBE_PIECE), pieces))
            probe.pieces.append((len(pieces), got, time.perf_counter() - started))

    async def _probe_reads_on(self, rust: RustReads, reads: Sequence[tuple[TarRead, str]],
                              probe: Probe, again: bool = False) -> None:
        """`_probe_reads` on MSC's Rust client, the reads at once as tasks."""
        if not again:
            await self._read_on(rust, *reads[0], None)
            started = time.perf_counter()
            await asyncio.gather(*(self._read_once_on(rust, *r) for r in reads[1:]))
            probe.reads = (len(reads) - 1, time.perf_counter() - started)
        pieces = reads[:STREAMS_AT_ONCE]
        started = time.perf_counter()
        got = await asyncio.gather(*(self._read_once_on(rust, *r, ahead=PROBE_PIECE)
                                     for r in pieces))
        probe.pieces.append((len(pieces), sum(got), time.perf_counter() - started))

    def _read_once(self, read: TarRead, name: str, ahead: int | None = None) -> int:
        """One read of `read` (of at least `ahead` bytes); the bytes it read."""
        span = read.span(ahead)
        if span is None:
            return 0
        started = time.perf_counter()
        data = self.read_range(name, *span)
        read.feed(span[0], data, time.perf_counter() - started)
        return len(data)

    async def _read_once_on(self, rust: RustReads, read: TarRead, name: str,
                            ahead: int | None = None) -> int:
        """`_read_once` on MSC's Rust client."""
        span = read.span(ahead)
        if span is None:
            return 0
        started = time.perf_counter()
        try:
            data = await rust.read_range(name, *_length(span))
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise self._unreadable(name, e) from None
        read.feed(span[0], data, time.perf_counter() - started)
        return len(data)

    def _read(self, read: TarRead, name: str) -> TarRead:
        """`read` made through MSC's client until it says no more."""
        while (span := read.span()) is not None:
            start = time.perf_counter()
            data = self.read_range(name, *span)
            read.feed(span[0], data, time.perf_counter() - start)
        return read

    async def _read_on(self, rust: RustReads, read: TarRead, name: str,
                       slots: asyncio.Semaphore | None) -> TarRead:
        """`_read` with each read awaited on MSC's Rust client. A stream holds one of `slots`
        and asks for its next piece (from where the last one ends) before it parses the last,
        so the next round trip passes while this piece is parsed and the link stays busy: three
        pieces in memory at most (`tarreads.STREAM_MEMORY`)."""
        held = False
        ahead: tuple[int, asyncio.Task[bytes]] | None = None
        tail = (0, b"")  # the end of the last piece, for a header that runs into the next

        async def got(task: Awaitable[bytes]) -> bytes:
            try:
                return await task
            except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
                raise self._unreadable(name, e) from None

        try:
            while (span := read.span()) is not None:
                if read.streaming and slots is not None and not held:
                    await slots.acquire()
                    held = True
                started = time.perf_counter()
                at, task = ahead if ahead is not None else (span[0], None)
                ahead = None
                if task is not None and at <= span[0]:
                    data = await got(task)
                    if span[0] >= at + len(data):  # a member longer than the piece: hop it
                        at, data = span[0], await got(rust.read_range(name, *_length(span)))
                elif task is not None and tail[0] <= span[0]:  # a header across the pieces
                    data = tail[1][span[0] - tail[0]:] + await got(task)
                    at = span[0]
                else:
                    if task is not None:
                        task.cancel()
                    at, data = span[0], await got(rust.read_range(name, *_length(span)))
                end = at + len(data)
                if read.streaming and end < read.size:
                    ahead = (end, _task(rust.read_range(
                        name, end, min(STREAM_PIECE, read.size - end))))
                    tail = (max(at, end - _TAIL), data[-_TAIL:])
                read.feed(at, data, time.perf_counter() - started)
        finally:
            if ahead is not None:
                ahead[1].cancel()
            if held and slots is not None:
                slots.release()
        return read

    def _first_sample_end(self, name: str) -> int | None:
        """Where shard `name`'s second sample starts, from its `.tar.idx`, or when it has none
        from the first reads of its header walk (the probe's, kept for indexing); None for a
        shard of one sample."""
        offsets = self._idx_offsets(name)
        if offsets is not None:
            return offsets[1] if len(offsets) > 2 else None
        with self._probing:
            if name not in self._walks and self.choice is None:
                names = [n for n in self.sizes if n != name and self._recorded_rows(n) is None]
                rust = self.store.rust_reads(RUST_WALKS_AT_ONCE)
                try:
                    self._probed([name, *names], rust)
                finally:
                    if rust is not None:
                        rust.close()
            read = self._walks.setdefault(name, self._tar_read(name))
        while read.walk.second_sample is None and (span := read.span()) is not None:
            start = time.perf_counter()
            read.feed(span[0], self.read_range(name, *span), time.perf_counter() - start)
        return read.walk.second_sample

    def _recorded_rows(self, name: str) -> Path | None:
        """The rows recorded for shard `name` when they describe the object listed now."""
        rows = self.root / shardrows.rows_name(name)
        if name not in self.sizes or not rows.is_file():
            return None
        match = shardrows.rows_match(rows, self.sizes[name], self.etags.get(name),
                                     self._idx_offsets(name))
        return rows if match else None

    def check_writable(self) -> None:
        """Writes and deletes an empty object under `.shardcook/`, so a store that refuses
        writes says so before any shard is downloaded.

        Raises:
            ConfigError: the store refused the write, in one sentence.
        """
        try:
            self.store.probe_write(OURS_DIR)
        except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
            raise ConfigError(access_problem("The dataset", self.name, "write", e) or
                              f"cannot write to {self.name} ({describe_error(e)}); check the "
                              f"bucket and {credentials_of(self.name)}") from None

    def rewritten(self, shard: str, now: bool) -> None:
        """Uploads the shard as rewritten under `root` over its object (when `now`), then
        deletes its `.tar.idx` and recorded rows, here and in the store (each call retried as
        the store retries), so neither describes the old bytes."""
        if now:
            self.store.retrying(f"writing {shard} to {self.store}",
                                partial(self.store.upload, self.root / shard, shard))
            self.sizes[shard] = (self.root / shard).stat().st_size
            self.etags[shard] = None
            (self._first_samples / shard).unlink(missing_ok=True)
        for name in (f"{shard}.idx", shardrows.rows_name(shard)):
            self.store.retrying(f"deleting {name} in {self.store}", partial(self._drop, name))
            (self.root / name).unlink(missing_ok=True)
            self.copied.pop(name, None)

    def _drop(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # gone already: what was wanted
            self.store.delete(name)

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
            self._in_parallel(lambda name: self.store.upload(now[name], name),
                              changed[:len(changed) - len(last)], SMALL_FILES_AT_ONCE)
            for name in gone:
                self.store.delete(name)
            for name in last:
                self.store.upload(now[name], name)
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


#: What a stream keeps of a piece's end, for a header that runs into the next piece.
_TAIL = 64 << 10


def _length(span: tuple[int, int]) -> tuple[int, int]:
    """`(start, end)` as `(start, length)`."""
    return span[0], span[1] - span[0]


def _task(read: Awaitable[bytes]) -> asyncio.Task[bytes]:
    """`read` started as a task on the running loop; its error, when nobody awaits it (the task
    cancelled because the read went elsewhere), is dropped with it."""
    task = asyncio.ensure_future(read)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task
