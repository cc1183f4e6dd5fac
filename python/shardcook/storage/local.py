"""Paths that stay local: a value that is a URL (`s3://`, `msc://`, `https://`), or longer than the
file system allows, is refused before anything is read or written where shardcook reads or writes
only local files (`--config`, `preview --out`, the blend file, model folders ...). Without this
check `--out msc://profile/x` would write a local folder named `msc:`."""

from __future__ import annotations

import os

from shardcook.errors import ConfigError
from shardcook.storage.urls import url_scheme

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
    scheme = url_scheme(text)
    if scheme is not None:
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
