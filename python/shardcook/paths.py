"""Paths that stay local: a value that is a URL (`s3://`, `msc://`, `https://`), or longer than the
file system allows, is refused before anything is read or written where shardcook reads or writes
only local files (`--config`, `preview --out`, the blend file, model folders ...). Without this
check `--out msc://profile/x` would write a local folder named `msc:`. Options that object storage
serves check their URLs with `storage.check_url` instead. `dataset_folder` adds that an existing
dataset must be a folder (not an image or a shard)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from shardcook.errors import ConfigError, DatasetError
from shardcook.files import file_kind

__all__ = ["check_local_path", "dataset_folder"]

#: `scheme://` in a string, or `scheme:/` at the start, which is what `pathlib.Path` (and so
#: typer's Path options) makes of a URL: `Path("s3://b/x")` is `s3:/b/x`.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):/|(?P<inner>[A-Za-z][A-Za-z0-9+.-]*)://")


#: Linux's limits (NAME_MAX, PATH_MAX): a longer path fails in every file call with ENAMETOOLONG.
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4095


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 120 else f"{text[:60]!r}... ({len(text):,} characters)"


def check_local_path(value: object, what: str) -> None:
    """Raises ConfigError unless `value` is a local path: a str or `os.PathLike` of str, not a
    URL, without a NUL byte, and no longer than the file system allows. `what` names the option
    or argument in the message (`--output-dir`, `path`).

    Raises:
        ConfigError: `value` is not a str or path, names an object store or web location, holds
            a NUL byte, or has a name over 255 bytes or is over 4095 bytes in all.
    """
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise ConfigError(f"{what} must be a path (a str or pathlib.Path), not "
                          f"{type(value).__name__} {value!r:.60}.")
    if "\0" in text:
        raise ConfigError(f"{what} {_shown(text)} contains a NUL byte, which no path may hold.")
    match = _URL.search(text)
    if match is not None:
        scheme = match.group("scheme") or match.group("inner")
        raise ConfigError(
            f"{what} {_shown(text)} is a URL ({scheme}://); {what} takes local paths only, so "
            "give a local path (a mounted bucket works)."
        )
    encoded = os.fsencode(text)
    if len(encoded) > MAX_PATH_BYTES or any(
            len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
        raise ConfigError(
            f"{what} {_shown(text)} is longer than the file system allows ({MAX_NAME_BYTES} bytes "
            f"per name, {MAX_PATH_BYTES} in all); give a shorter path."
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
        kind = "a file" if root.is_file() else file_kind(root.stat().st_mode)
        raise DatasetError(f"{root} is {kind}, not a dataset folder; give the folder that holds "
                           "the .tar shards and .nv-meta/.")
    return root
