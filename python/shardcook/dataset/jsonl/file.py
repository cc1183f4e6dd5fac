"""JSONL datasets: one `NAME.jsonl` file of JSON objects, one a line, and its index
`NAME.jsonl.idx` beside it (`jsonlindex`), which Energon reads as crude samples with one `json`
part each, the same for every split (its `DefaultCrudeJsonlDatasetFactory`). A path or URL whose
name ends in `.jsonl` is one (`jsonl_file`), and `finalize`, `validate`, `info`, `preview` and
`blend` hand it to what is here: the file is read through its folder's `storage.Store`, so a
local file and an object in a bucket (streamed, never downloaded whole) are read alike.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from shardcook.dataset.jsonl.offsets import INDEX_DTYPE, record_offsets
from shardcook.errors import DatasetError
from shardcook.layouts.names import JSONL_INDEX_SUFFIX, JSONL_SUFFIX
from shardcook.storage.location import Location, locate
from shardcook.storage.store import Store

__all__ = ["ENERGON_CLASS", "PART", "JsonlFile", "describe", "index_problems", "jsonl_file",
           "record_problems"]

#: The part each record is to Energon (`sample["json"]`).
PART = "json"
#: The class Energon reads a JSONL dataset with (`megatron.energon.get_dataset_from_config`).
ENERGON_CLASS = "megatron.energon.DefaultCrudeJsonlDatasetFactory"
#: How many bad records `--deep` names one by one; the rest are counted.
NAMED_BAD_RECORDS = 5


@dataclass(frozen=True)
class JsonlFile:
    """A JSONL dataset: its `location` as given, and `name` in its folder's `store`."""

    location: Location
    store: Store
    name: str

    def __str__(self) -> str:
        return str(self.location)

    @property
    def index_name(self) -> str:
        return self.name.removesuffix(JSONL_SUFFIX) + JSONL_INDEX_SUFFIX

    @property
    def index_shown(self) -> str:
        return self.store.child(self.index_name)

    def scan(self) -> np.ndarray:
        """The index of the file as it is now (`jsonlindex.record_offsets`).

        Raises:
            DatasetError: the file is missing or unreadable, or not JSONL.
        """
        with self._reading(self.name), self.store.open_stream(self.name) as stream:
            return record_offsets(stream, str(self))

    def write_index(self, offsets: np.ndarray) -> None:
        """Writes `offsets` as the index, whole or not at all; locally with the file's
        permissions, readable and writable by its owner, as `energon prepare` leaves it.

        Raises:
            DatasetError: the folder does not take the file.
        """
        with self._reading(self.index_name, "written"):
            self.store.write_bytes(self.index_name, offsets.astype(INDEX_DTYPE).tobytes())
        self.store.keep_mode(self.index_name, self.name)

    def read_index(self) -> np.ndarray:
        """The index on disk.

        Raises:
            DatasetError: it is missing, unreadable, or not an index of this file's size.
        """
        size = self.size()
        with self._reading(self.index_name), self.store.open_stream(self.index_name) as stream:
            data = stream.read()
        return self._checked_index(np.frombuffer(data, INDEX_DTYPE) if len(data) % 8 == 0
                                   else None, size)

    def indexed(self) -> tuple[int, bytes]:
        """The number of records the index gives, and the first record's bytes, reading only
        the index's ends and that record (cheap in a bucket).

        Raises:
            DatasetError: as `read_index`.
        """
        size = self.size()
        with self._reading(self.index_name):
            entries, odd = divmod(self.store.stat(self.index_name).size, 8)
            ends = (np.frombuffer(self.store.read_range(self.index_name, 0, 16)
                                  + self.store.read_range(self.index_name, entries * 8 - 8, 8),
                                  INDEX_DTYPE) if entries >= 2 and not odd else None)
        checked = self._checked_index(ends, size)
        return entries - 1, self.record(int(checked[0]), int(checked[1]))

    def first_records(self, count: int) -> list[bytes]:
        """The first `count` records (all, when there are fewer), by the index (checked as
        `indexed` checks it), in one read.

        Raises:
            DatasetError: as `read_index`.
        """
        samples, _ = self.indexed()
        with self._reading(self.index_name):
            offsets = np.frombuffer(
                self.store.read_range(self.index_name, 0, 8 * (min(count, samples) + 1)),
                INDEX_DTYPE).tolist()
        data = self.record(offsets[0], offsets[-1])
        return [data[start - offsets[0]:end - offsets[0]]
                for start, end in itertools.pairwise(offsets)]

    def size(self) -> int:
        """The file's size in bytes (DatasetError when it is missing or unreadable)."""
        with self._reading(self.name):
            return self.store.stat(self.name).size

    def record(self, start: int, end: int) -> bytes:
        """Bytes `start`..`end` of the file: a record by its index's offsets."""
        with self._reading(self.name):
            return self.store.read_range(self.name, start, end - start)

    def records(self, offsets: np.ndarray) -> Iterator[bytes]:
        """Every record in order, by `offsets`, the file read once as a stream."""
        with self._reading(self.name), self.store.open_stream(self.name) as stream:
            for size in np.diff(offsets).tolist():
                yield stream.read(size)

    def _checked_index(self, offsets: np.ndarray | None, size: int) -> np.ndarray:
        """`offsets` (None: not a list of uint64 ending with the size), once its last entry is
        the file's `size`, as Energon checks before it reads the file."""
        fix = f"run `shardcook finalize {self}` to index it"
        if offsets is None or len(offsets) < 2:
            raise DatasetError(f"{self.index_shown} is not an index of JSONL records (uint64 "
                               f"offsets, then the file's size); {fix}")
        if int(offsets[-1]) != size:
            raise DatasetError(f"{self.index_shown} indexes {int(offsets[-1]):,} bytes, but "
                               f"{self} holds {size:,}: the file changed after it was indexed "
                               f"(Energon refuses it); {fix}")
        return offsets

    @contextlib.contextmanager
    def _reading(self, name: str, done: str = "read") -> Iterator[None]:
        """A block reading (or writing) file `name`, its OSError turned into one sentence."""
        shown = self.store.child(name)
        try:
            yield
        except FileNotFoundError:
            fix = (f"run `shardcook finalize {self}` to write it" if name == self.index_name
                   else "give an existing .jsonl file")
            raise DatasetError(f"{shown} does not exist; {fix}.") from None
        except OSError as e:
            raise DatasetError(f"{shown} cannot be {done} ({e.strerror or e}).") from None


def jsonl_file(value: object) -> JsonlFile | None:
    """The JSONL dataset `value` (a path, URL or `storage.Location`) names: one whose name ends
    in `.jsonl` and is no folder (Energon's test; in a bucket: no object lies under it); None
    for anything else.

    Raises:
        ConfigError: `value` is no path, or a URL no client can open (see `storage.locate`).
    """
    location = locate(value, "The dataset")
    if not str(location).endswith(JSONL_SUFFIX):
        return None
    with contextlib.suppress(OSError):  # a store that cannot say: the file's reads say why
        if location.store.what_is() == "folder":
            return None
    folder, name = location.split()
    return JsonlFile(location, folder.store, name)


def index_problems(jsonl: JsonlFile) -> tuple[list[str], np.ndarray | None]:
    """The index against a fresh scan of the file: the problems, and the offsets both agree on
    (None when they do not)."""
    try:
        fresh = jsonl.scan()
        on_disk = jsonl.read_index()
    except DatasetError as e:
        return [str(e)], None
    if np.array_equal(fresh, on_disk):
        return [], fresh
    return [f"{jsonl.index_shown} is not the index of {jsonl} as it is now (records or their "
            f"offsets differ: {len(on_disk) - 1:,} indexed, {len(fresh) - 1:,} in the file); run "
            f"`shardcook finalize {jsonl}` to index it again"], None


def record_problems(jsonl: JsonlFile, offsets: np.ndarray, every: bool) -> list[str]:
    """The records (the first, or `every` one) that are not JSON, as Energon's loader parses
    them: the bytes from one record's offset to the next."""
    if every:
        records: Iterator[bytes] = jsonl.records(offsets)
    else:
        records = iter([jsonl.record(int(offsets[0]), int(offsets[1]))])
    bad: list[str] = []
    more = 0
    for n, data in enumerate(records):
        try:
            json.loads(data)
        except ValueError as e:  # JSONDecodeError, or bytes of no Unicode encoding
            if len(bad) == NAMED_BAD_RECORDS:
                more += 1
                continue
            bad.append(f"{jsonl} sample {n} (the record at byte {int(offsets[n]):,}) is not "
                       f"valid JSON ({str(e).splitlines()[0]})")
    return bad + ([f"{jsonl}: {more:,} more samples are not valid JSON"] if more else [])


def describe(first: bytes) -> str:
    """What `info` says of the first record's `json` part."""
    try:
        value = json.loads(first)
    except ValueError:
        return f"{len(first):,} bytes, not valid JSON"
    keys = ", ".join(value) if isinstance(value, dict) else ""
    return f"{len(first):,} bytes" + (f", keys {keys}" if keys else "")
