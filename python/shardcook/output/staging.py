"""How a run's shards reach its output folder: the `Staging` strategy a `runfolder.RunFolder`
is given. `Direct`: the native writer writes into the folder itself (a folder on this
machine); `staged.Staged`: into a scratch folder, each closed shard then uploaded (any other
store)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from shardcook import _native
from shardcook.dataset.index import shardrows
from shardcook.dataset.media import records as mediarecords
from shardcook.layouts.names import OURS_DIR, TMP_DIR


class LocalSpace(Protocol):
    """A folder on this machine a job writes its working files into (ingest's downloads) until
    `release`: `Kept` where the output folder is on this machine, else `staged.Owned`."""

    @property
    def path(self) -> Path: ...

    def release(self) -> None:
        """Gives the folder back: what is the space's own goes."""
        ...


class Kept:
    """A folder the output folder holds (its `.shardcook/`): it stays, the job removes its own
    files from it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def release(self) -> None:
        """Nothing: the folder is the run's."""


class Staging(Protocol):
    """Where the writer writes a unit's shard and how it becomes final in the folder."""

    @property
    def scratch(self) -> Path | None:
        """Where a command on the folder keeps local copies (`--scratch-dir`); None when the
        folder is its own copy."""
        ...

    @property
    def shard_dir(self) -> Path:
        """The local folder the native writer writes this process's shards into."""
        ...

    def check(self) -> None:
        """Raises ConfigError when the local space the shards pass through cannot be made."""
        ...

    def local_space(self, prefix: str) -> LocalSpace:
        """Where a job keeps its working files on this machine (ingest's downloads): beside
        the run's records where the folder is on this machine, else a folder `PREFIX…` of
        this process's own under --scratch-dir."""
        ...

    def finish_unit(self, unit: int, record: dict[str, Any], media: mediarecords.UnitMedia | None,
                    write_marker: Callable[[], None]) -> None:
        """The unit's shard (if any) is closed in `shard_dir`: make it final, write its media
        record when `media` holds one, then `write_marker()`."""
        ...

    def flush(self) -> None:
        """Returns once every finished unit is recorded; raises what stopped one."""
        ...

    def close(self) -> None:
        """Releases the staging space and the threads, if any."""
        ...

    def scratch_peak_bytes(self) -> int | None:
        """The most scratch space this process used at once; None when it uses none."""
        ...

    def remove_partial_shards(self) -> None:
        """Removes the partial shards a killed run left where the writer writes."""
        ...


class Direct:
    """The writer writes into the folder `root` itself: a shard is final once the writer
    renamed it, nothing is uploaded."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def scratch(self) -> None:
        """None: a local folder is its own copy."""
        return None

    @property
    def shard_dir(self) -> Path:
        return self.root

    def check(self) -> None:
        """Nothing: `RunFolder.check_writable` proves the folder itself writable."""

    def local_space(self, prefix: str) -> Kept:
        """The folder's `.shardcook/`, beside the run's records."""
        return Kept(self.root / OURS_DIR)

    def finish_unit(self, unit: int, record: dict[str, Any], media: mediarecords.UnitMedia | None,
                    write_marker: Callable[[], None]) -> None:
        """Records a unit once the writer closed its shard (already under its final name): its
        media record (naming the shard as it is now), then its marker."""
        shard = record.get("shard")
        if media is not None and isinstance(shard, str):
            media.write(self.root / mediarecords.record_name(shard),
                        shardrows.local_object(self.root / shard))
        write_marker()

    def flush(self) -> None:
        """Nothing: every unit handed to `finish_unit` is recorded by now."""

    def close(self) -> None:
        """Nothing: no scratch space is used."""

    def scratch_peak_bytes(self) -> None:
        """None: shards are written in place, not staged."""
        return None

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
