"""`shardcook.ShardWriter`, `count_samples` and `read_shard`: the native writer and reader with
their arguments checked first, so a Python caller gets one sentence naming the wrong value instead
of PyO3's TypeError, never writes shards that finalize would later refuse, and never waits on a
FIFO forever. (The native class cannot be subclassed, so this wraps it; shardcook's own
pipelines, whose arguments are already checked, use the native module directly.)"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from shardcook import _native
from shardcook.braces import BRACE_CHARS
from shardcook.errors import ConfigError, InvalidNameError, ShardError
from shardcook.files import file_kind
from shardcook.storage.local import check_local_path

if TYPE_CHECKING:
    from typing_extensions import Self

    from shardcook._native import ShardCount, ShardReader

__all__ = ["ShardWriter", "count_samples", "read_shard"]


def _check_shard_file(path: str | os.PathLike[str]) -> None:
    """Refuses a path that is not a regular file before the native reader opens it (opening a
    FIFO would wait for a writer forever); a missing file is left to the reader's own error."""
    check_local_path(path, "The shard")
    try:
        mode = os.stat(path).st_mode
    except (OSError, TypeError, ValueError):
        return
    if not stat.S_ISREG(mode):
        raise ShardError(f"{os.fsdecode(path)} is {file_kind(mode)}, not a .tar shard file.")


def count_samples(path: str | os.PathLike[str]) -> int:
    """Counts the samples of a shard from its headers alone.

    Raises:
        ShardError: the path is not a regular file, or not a tar shard we can read.
    """
    _check_shard_file(path)
    return _native.count_samples(path)


def read_shard(path: str | os.PathLike[str]) -> ShardReader:
    """Streams `Sample(key, {part: bytes})` in file order, grouping members as Energon does.

    Raises:
        ShardError: the path is not a regular file, or not a tar shard we can read.
    """
    _check_shard_file(path)
    return _native.read_shard(path)


class ShardWriter:
    """Writes samples into numbered, deterministic tar shards (`{prefix}{n:06d}.tar`).

    Each shard is written in the writer's tmp folder, fsync'd, then renamed, every `shard_size`
    samples. Use as a context manager: a clean exit closes, an exception drops the open shard.

    Raises:
        ConfigError: `directory` is a URL or not a path, `shard_size` below 1 or `first_shard`
            below 0, or an argument of the wrong type.
        InvalidNameError: a `prefix` with `/`, a brace or a backslash (Energon's split.yaml
            brace-expands shard names, so finalize refuses those).
    """

    def __init__(self, directory: str | os.PathLike[str], *, shard_size: int = 1000,
                 prefix: str = "", first_shard: int = 0) -> None:
        check_local_path(directory, "directory")
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a str, not {prefix!r}.")
        if BRACE_CHARS.search(prefix):
            raise InvalidNameError(
                f"shard name prefix {prefix!r} may not contain a brace or a backslash: Energon "
                "brace-expands shard names, so finalize would refuse these shards.")
        self._writer = _native.ShardWriter(directory, shard_size=shard_size, prefix=prefix,
                                           first_shard=first_shard)

    def write(self, key: str, parts: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
        """Appends one sample; parts are written in the order given.

        Raises:
            ConfigError: `key` is not a str, or `parts` is not a mapping (or pairs) of part
                names to bytes.
            InvalidNameError: a key or part name that docs/FORMAT.md forbids.
        """
        if not isinstance(key, str):
            raise ConfigError(f"sample key {key!r} must be a str, not {type(key).__name__}.")
        pairs = parts.items() if isinstance(parts, Mapping) else parts
        if isinstance(parts, (str, bytes)) or not isinstance(pairs, Iterable):
            raise ConfigError(f"the parts of sample {key!r} must map part names to bytes, not "
                              f"{type(parts).__name__}.")
        pairs = list(pairs)
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                name = pair[0] if isinstance(pair, tuple) and pair else pair
                raise ConfigError(f"part name {name!r} of sample {key!r} must be a str, not "
                                  f"{type(name).__name__}.")
        self._writer.write(key, pairs)

    def close(self) -> list[ShardCount]:
        """Completes the open shard; returns every shard written with its sample count."""
        return self._writer.close()

    def abort(self) -> None:
        """Drops the shard being written; finished shards stay."""
        self._writer.abort()

    @property
    def directory(self) -> str:
        return self._writer.directory

    def __enter__(self) -> Self:
        self._writer.__enter__()
        return self

    def __exit__(self, exc_type: object, exc_value: object = None,
                 traceback: object = None) -> bool:
        return self._writer.__exit__(exc_type, exc_value, traceback)
