"""Type stubs for the native core (rust/py/)."""

from collections.abc import Iterable, Iterator, Mapping
from os import PathLike
from typing import TypeAlias

from typing_extensions import Self

_Path: TypeAlias = str | PathLike[str]
_Bytes: TypeAlias = bytes | bytearray | memoryview

class ShardWriter:
    """Writes samples into numbered, deterministic tar shards (`{prefix}{n:06d}.tar`).

    Each shard is written under `.shardcook/tmp/`, fsync'd, then renamed, every `shard_size`
    samples. Use as a context manager: a clean exit closes, an exception drops the open shard.
    """

    def __init__(
        self, directory: _Path, *, shard_size: int = 1000, prefix: str = "", first_shard: int = 0
    ) -> None: ...
    def write(self, key: str, parts: Mapping[str, _Bytes] | Iterable[tuple[str, _Bytes]]) -> None:
        """Appends one sample; parts are written in the order given."""
    def close(self) -> list[tuple[str, int]]:
        """Completes the open shard; returns every shard written with its sample count."""
    def abort(self) -> None:
        """Drops the shard being written; finished shards stay."""
    @property
    def directory(self) -> str: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: object, exc_value: object = None, traceback: object = None
    ) -> bool: ...

class ShardReader(Iterator[tuple[str, dict[str, bytes]]]):
    def __next__(self) -> tuple[str, dict[str, bytes]]: ...

def read_shard(path: _Path) -> ShardReader:
    """Streams `(key, {part: bytes})` in file order, grouping members as Energon does."""

def count_samples(path: _Path) -> int:
    """Counts the samples of a shard from its headers alone."""

def index_shards(
    root: _Path, shards: list[str], sqlite_path: _Path | None = None
) -> tuple[list[tuple[str, int]], list[str]]:
    """Writes `.tar.idx` files and optionally index.sqlite; returns counts and part names."""

def verify_shards(
    root: _Path, shards: list[tuple[str, int | None]]
) -> tuple[list[tuple[str, int | None, list[str]]], list[str]]:
    """Rescans shards and compares them with their `.tar.idx` and expected counts."""

# Image core (rust/py/imaging.rs); the public face is shardcook.imaging.

def preprocess_batch(
    inputs: list[_Bytes | _Path],
    *,
    size: int = 1024,
    mode_name: str = "crop",
    max_size: int = 1024,
    buckets: list[tuple[int, int]] | None = None,
    filter: str = "lanczos3",
    max_pixels: int = 178_956_970,
    workers: int | None = None,
) -> list[tuple[object | None, str | None, tuple[int, int] | None, tuple[int, int] | None]]:
    """Decodes, orients and resizes a batch in parallel; (pixels HxWx3 uint8, error, orig_size (h, w), crop (top, left)) per input."""

def image_geometry(
    width: int,
    height: int,
    *,
    size: int = 1024,
    mode_name: str = "crop",
    max_size: int = 1024,
    buckets: list[tuple[int, int]] | None = None,
) -> tuple[tuple[int, int], tuple[float, float, float, float], tuple[int, int]]:
    """((width, height), (left, top, right, bottom), (crop_top, crop_left)) of a mode."""

def default_buckets(size: int) -> list[tuple[int, int]]:
    """The built-in buckets (width, height) for `size`."""

def encode_image(pixels: object, format: str = "jpg", quality: int = 95) -> bytes:
    """Encodes an HxWx3 uint8 array as jpg, png or (lossy) webp."""
