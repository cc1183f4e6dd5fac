"""Local dataset folders: `dataset_folder` checks that an existing dataset is a folder (not an
image or a shard). `check_local_path` (`storage.local`) refuses a URL where only local files are
read or written."""

from __future__ import annotations

import os
from pathlib import Path

from shardcook.errors import DatasetError
from shardcook.files import file_kind
from shardcook.storage.local import check_local_path

__all__ = ["check_local_path", "dataset_folder"]


def dataset_folder(directory: str | os.PathLike[str]) -> Path:
    """`directory` as a Path, once it is known to be a local folder that exists.

    Raises:
        ConfigError: `directory` is a URL.
        DatasetError: it does not exist, or is a file (an image, a shard, a .yaml).
    """
    check_local_path(directory, "The dataset folder")
    root = Path(directory)
    if not root.exists():
        raise DatasetError(f"{root} does not exist; give a dataset folder.")
    if not root.is_dir():
        kind = "a file" if root.is_file() else file_kind(root.stat().st_mode)
        raise DatasetError(f"{root} is {kind}, not a dataset folder; give the folder that holds "
                           "the .tar shards and .nv-meta/.")
    return root
