"""`OutputFolder`, what the pipeline asks of a run's output folder, and `run_folder`, the one
place that builds it: a `runfolder.RunFolder` over the output's store, its shards written in
place where the store is a folder on this machine (`staging.Direct`), else staged and uploaded
(`staged.Staged`). The driver, the per-unit loop and the jobs are typed against the protocol."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from shardcook.config.sections import OutputConfig
from shardcook.dataset.media.records import UnitMedia
from shardcook.output.lock import Holder
from shardcook.output.overwrite import ObjectPlan, OverwritePlan
from shardcook.output.runfolder import RunFolder
from shardcook.output.staged import Staged
from shardcook.output.staging import Direct, LocalSpace
from shardcook.storage.location import Location


class OutputFolder(Protocol):
    """A run's output folder: its checks, `--overwrite`, records, and where shards go."""

    @property
    def location(self) -> Location:
        """The folder as finalize and the summary take it: a path, or a URL."""

    @property
    def scratch(self) -> Path | None:
        """Where a command on this folder keeps local copies (a bucket's: `--scratch-dir`);
        None for a local folder, which needs none."""

    @property
    def report_path(self) -> str: ...

    def check(self) -> None: ...

    def check_ours(self) -> None:
        """Refuses a folder holding anything foreign, writing nothing."""

    def check_access(self) -> None:
        """What can be checked before any input is read, creating nothing that stays: also
        that no other run holds the folder."""

    def lock(self, me: Holder) -> None:
        """Takes the folder for run `me` until `close`; ConfigError names the run holding it."""

    def share(self, me: Holder) -> None:
        """Takes the folder for worker `me` of a run without a process group, shared with its
        other workers (`output/lock.py`); ConfigError names a run that holds it alone."""

    def check_held(self) -> None:
        """Raises DatasetError when another run took the folder over since `lock`."""

    def check_writable(self) -> None: ...

    def plan_overwrite(self) -> OverwritePlan | ObjectPlan:
        """What `--overwrite` would delete; ConfigError when it may not, deleting nothing."""

    def local_file_in(self, paths: Iterable[Path], names: Iterable[str], *,
                      overwrite: bool = False) -> tuple[Path, Path] | None:
        """The first of the local files `paths` that lies in one of `names` (or, with
        `overwrite`, in what `--overwrite` deletes), with where; None when none does."""

    def clear(self) -> list[str]: ...

    def discard_shard(self, name: str) -> None: ...

    def remove_partial_shards(self) -> None: ...

    @property
    def shard_dir(self) -> Path:
        """The local folder the native writer writes this process's shards into."""

    def local_space(self, prefix: str) -> LocalSpace:
        """Where a job keeps its working files on this machine: beside the run's records, or
        for a folder not on this machine a folder `PREFIX…` of its own under --scratch-dir."""

    def finish_unit(self, unit: int, record: dict[str, Any],
                    media: UnitMedia | None = None) -> None:
        """The unit's shard (if any) is closed in `shard_dir`: make it final and record it,
        with its media metadata rows when `media` holds them (recorded before the marker)."""

    def flush(self) -> None:
        """Returns once every finished unit is recorded; raises what stopped one."""

    def close(self) -> None:
        """Releases what the folder holds for this process (staging space, upload threads,
        the run's lock)."""

    def scratch_peak_bytes(self) -> int | None:
        """The most scratch space this process used at once; None when it uses none."""

    def write_file(self, name: str, data: bytes) -> None: ...

    def create_file(self, name: str, data: bytes | str) -> bool:
        """Writes `name` whole only when it does not exist yet; of several processes at once
        exactly one gets True."""

    def read_file(self, name: str) -> bytes | None:
        """The bytes of `name` (relative to the folder), or None when there is none."""

    def read_manifest(self) -> dict[str, Any] | None: ...

    def write_manifest(self, manifest: dict[str, Any]) -> None: ...

    def write_results(self, manifest: dict[str, Any], report: dict[str, Any]) -> None: ...

    def read_markers(self, units: list[int]) -> dict[int, dict[str, Any]]:
        """The records of those of `units` that are done, by unit."""

    def write_marker(self, unit: int, record: dict[str, Any]) -> None:
        """Rewrites the record of `unit`, whose shard is already recorded (ingest: a first
        ingest's marker in the engine's format)."""

    def interrupted_finalize(self) -> str | None:
        """The name of the undo folder a killed finalize left (`dataset/undo.py`): the
        metadata is then half written; None when there is none."""


def run_folder(output: OutputConfig, what: str = "--output-dir") -> OutputFolder:
    """The owner of `output.output_dir`: a folder on this machine, written in place, or any
    other store (object storage), its shards staged under `output.scratch_dir`, at most
    `output.upload_queue` waiting for upload; `what` names it in a bucket's sentences
    (`shardcook status` takes it as an argument).

    Raises:
        ConfigError: no output folder given, or a URL the Multi-Storage Client cannot open.
    """
    store = output.location.store
    path = store.file("")
    staging = (Direct(path) if path is not None
               else Staged(store, output.scratch_dir, output.upload_queue))
    return RunFolder(store, staging, what)
