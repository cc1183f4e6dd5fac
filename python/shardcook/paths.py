"""Local paths only, until object storage is supported: a path value that is a URL (`s3://`,
`msc://`, `https://`) is refused before anything is read or written. Without this check
`--output-dir msc://profile/x` writes a local folder named `msc:` and exits 0, so on a cluster
node the data fills the local disk and never reaches the bucket. `dataset_folder` adds that an
existing dataset must be a folder (not an image or a shard)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from shardcook.errors import ConfigError, DatasetError

__all__ = ["check_local_path", "dataset_folder"]

#: `scheme://` in a string, or `scheme:/` at the start, which is what `pathlib.Path` (and so
#: typer's Path options) makes of a URL: `Path("s3://b/x")` is `s3:/b/x`.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):/|(?P<inner>[A-Za-z][A-Za-z0-9+.-]*)://")


def check_local_path(value: object, what: str) -> None:
    """Raises ConfigError when `value` (a str or path-like; anything else is left to the caller's
    own checks) is a URL. `what` names the option or argument in the message (`--output-dir`,
    `path`).

    Raises:
        ConfigError: `value` names an object store or web location, not a local path.
    """
    if not isinstance(value, (str, os.PathLike)):
        return
    text = os.fspath(value)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    match = _URL.search(text)
    if match is None:
        return
    scheme = match.group("scheme") or match.group("inner")
    raise ConfigError(
        f"{what} {text!r} is a URL ({scheme}://); shardcook reads and writes local paths only "
        "(object storage is not supported yet), so give a local path (a mounted bucket works)."
    )


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
        raise DatasetError(f"{root} is a file, not a dataset folder; give the folder that holds "
                           "the .tar shards and .nv-meta/.")
    return root
