"""Type stubs for the native core (rust/py/); tests/test_native_stub.py checks them against the
built module: every name, every parameter, and the types of real results."""

from collections.abc import Iterable, Iterator, Mapping
from os import PathLike
from typing import Any, Literal, NamedTuple, TypeAlias, final

import numpy as np
import numpy.typing as npt
from typing_extensions import Self

from shardcook.errors import ImageErrorKind

_Path: TypeAlias = str | PathLike[str]
#: What the native layer accepts as bytes: anything with a byte buffer (numpy arrays too).
_Bytes: TypeAlias = bytes | bytearray | memoryview | npt.NDArray[np.uint8]
_Mode: TypeAlias = Literal["crop", "stretch", "variable", "bucket"]
_Filter: TypeAlias = Literal[
    "nearest", "box", "bilinear", "hamming", "bicubic", "mitchell", "lanczos3", "lanczos"
]
_Format: TypeAlias = Literal["jpg", "jpeg", "png", "webp"]

@final
class ShardCount(NamedTuple):
    """A shard file name and its sample count."""

    name: str
    samples: int

@final
class Sample(NamedTuple):
    """One sample of a shard: its key and its parts, in file order."""

    key: str
    parts: dict[str, bytes]

@final
class ShardWriter:
    """Writes samples into numbered, deterministic tar shards (`{prefix}{n:06d}.tar`).

    Each shard is written in the writer's tmp folder, fsync'd, then renamed, every `shard_size`
    samples. Use as a context manager: a clean exit closes, an exception drops the open shard.
    `shard_size` (at least 1) and `first_shard` (at least 0) out of range are a ConfigError.
    """

    def __init__(
        self, directory: _Path, *, shard_size: int = 1000, prefix: str = "", first_shard: int = 0
    ) -> None: ...
    def write(self, key: str, parts: Mapping[str, _Bytes] | Iterable[tuple[str, _Bytes]]) -> None:
        """Appends one sample; parts are written in the order given."""
    def close(self) -> list[ShardCount]:
        """Completes the open shard; returns every shard written with its sample count."""
    def abort(self) -> None:
        """Drops the shard being written; finished shards stay."""
    @property
    def directory(self) -> str: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: object, _exc_value: object = None, _traceback: object = None
    ) -> bool: ...

@final
class ShardReader(Iterator[Sample]):
    def __iter__(self) -> Self: ...
    def __next__(self) -> Sample: ...

def read_shard(path: _Path) -> ShardReader:
    """Streams `Sample(key, {part: bytes})` in file order, grouping members as Energon does."""

def count_samples(path: _Path) -> int:
    """Counts the samples of a shard from its headers alone."""

@final
class IndexSummary:
    """What `index_shards` wrote."""

    @property
    def shards(self) -> list[ShardCount]:
        """Each shard indexed, in the order given, with its sample count."""
    @property
    def part_names(self) -> list[str]:
        """Every part name seen, sorted."""

def index_shards(
    root: _Path, shards: list[str], sqlite_path: _Path | None = None
) -> IndexSummary:
    """Writes `.tar.idx` files and optionally index.sqlite."""

@final
class TarWalk:
    """One tar's header walk from ranged reads: fetch what `needed` names, `feed` it."""

    def __init__(self, name: str, size: int) -> None: ...
    def needed(self) -> tuple[int, int] | None:
        """`(offset, length)` of the bytes to fetch next; None once complete."""
    def feed(self, offset: int, data: bytes) -> None:
        """The bytes at `offset` (what `needed` named, and any read ahead)."""
    @property
    def position(self) -> int:
        """Bytes of the tar walked so far."""
    @property
    def samples(self) -> int:
        """Samples whose first header the walk has read."""
    @property
    def second_sample(self) -> int | None:
        """Where the second sample starts (the first one's end), once a header of it was read."""
    @property
    def offsets(self) -> list[int] | None:
        """The `.tar.idx` offsets (samples, then the end) once complete."""

def write_walks(root: _Path, walks: list[tuple[str, TarWalk]], sqlite_path: _Path) -> None:
    """Writes each walked shard's `.tar.idx` and all their rows into a new sqlite database."""

@final
class ShardCheck:
    """One shard as `verify_shards` found it."""

    @property
    def name(self) -> str: ...
    @property
    def count(self) -> int | None:
        """Samples counted, or None when the shard could not be read to the end."""
    @property
    def problems(self) -> list[str]:
        """What is wrong with this shard, one sentence each; empty when whole."""

@final
class ShardVerification:
    """What `verify_shards` found."""

    @property
    def shards(self) -> list[ShardCheck]: ...
    @property
    def problems(self) -> list[str]:
        """Problems of the dataset as a whole."""

def verify_shards(root: _Path, shards: list[tuple[str, int | None]]) -> ShardVerification:
    """Rescans shards and compares them with their `.tar.idx` and expected counts."""

def shard_file_name(number: int, *, prefix: str = "") -> str:
    """The file name the writer gives shard `number` with `prefix`."""

def remove_partial_shards(directory: _Path) -> int:
    """Removes a killed run's partial shards from the writer's tmp folder; returns how many."""

# Image core (rust/py/imaging.rs); the public face is shardcook.imaging.

@final
class PreprocessedImage:
    """The outcome for one input of `preprocess_batch`."""

    @property
    def pixels(self) -> npt.NDArray[np.uint8] | None:
        """H×W×3 uint8 RGB, or None when the input could not be used."""
    @property
    def error(self) -> str | None: ...
    @property
    def error_kind(self) -> ImageErrorKind | None: ...
    @property
    def orig_size(self) -> tuple[int, int] | None:
        """(h, w) after EXIF orientation."""
    @property
    def crop(self) -> tuple[int, int] | None:
        """(top, left) of the source box in target coordinates."""

def preprocess_batch(
    inputs: Iterable[_Bytes | _Path],
    *,
    size: int = 1024,
    mode_name: _Mode = "crop",
    max_size: int = 1024,
    buckets: Iterable[tuple[int, int]] | None = None,
    filter: _Filter = "lanczos3",
    max_pixels: int = 178_956_970,
    workers: int | None = None,
) -> list[PreprocessedImage]:
    """Decodes, orients and resizes a batch in parallel; one result per input, in order."""

@final
class ImageGeometry:
    """What a mode does to an image of a given (oriented) size."""

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the result."""
    @property
    def box(self) -> tuple[float, float, float, float]:
        """The source box (left, top, right, bottom) in input pixels."""
    @property
    def crop(self) -> tuple[int, int]:
        """(top, left) of the box in target coordinates."""

def image_geometry(
    width: int,
    height: int,
    *,
    size: int = 1024,
    mode_name: _Mode = "crop",
    max_size: int = 1024,
    buckets: Iterable[tuple[int, int]] | None = None,
) -> ImageGeometry:
    """The geometry of a mode for an oriented `width`×`height` image."""

def default_buckets(size: int) -> list[tuple[int, int]]:
    """The built-in buckets (width, height) for `size`."""

def encode_image(
    pixels: npt.NDArray[np.uint8], format: _Format = "jpg", quality: int = 95
) -> bytes:
    """Encodes an HxWx3 uint8 array as jpg, png or (lossy) webp."""

def pillow_header(data: bytes) -> tuple[int, int, str, str] | None:
    """Pillow's (width, height, format, mode) of a JPEG, PNG or WebP file from its header;
    None when the header does not settle them."""

def build_info() -> dict[str, Any]:
    """The native core's build: version, profile, opt_level, target, rustc, pyo3, jpeg {library,
    simd_compiled, simd_active, nasm}, webp, png, resize {library, cpu_extensions}."""
