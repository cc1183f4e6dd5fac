"""A run folder over a local folder, as `output.folder.run_folder` builds one for a path, for
tests that drive the per-unit loop or the records without a config."""

from __future__ import annotations

from pathlib import Path

from shardcook.output.runfolder import RunFolder
from shardcook.output.staging import Direct
from shardcook.storage.local import LocalStore


def local_run_folder(out: Path) -> RunFolder:
    return RunFolder(LocalStore(out), Direct(out))
