"""Image bytes to training-size RGB pixels, in Rust, in parallel, with the GIL released.

Each resize mode is a source box in the EXIF-oriented image (fractional coordinates allowed)
resampled to a target size; `geometry` gives the same numbers `preprocess` uses, so batches can
be grouped by shape before decoding. See docs/IMAGING.md for formats and speed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Union

from shardcook import _native
from shardcook.errors import ImageErrorKind
from shardcook.files import read_regular_file

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "FILTERS",
    "MODES",
    "Geometry",
    "ImageResult",
    "default_buckets",
    "encode_image",
    "geometry",
    "preprocess",
]

MODES = ("crop", "stretch", "variable", "bucket")
FILTERS = ("nearest", "box", "bilinear", "hamming", "bicubic", "mitchell", "lanczos3")
DEFAULT_MAX_PIXELS = 178_956_970  # Pillow's decompression-bomb limit

Mode = Literal["crop", "stretch", "variable", "bucket"]
ImageFormat = Literal["jpg", "jpeg", "png", "webp"]
FilterName = Literal[
    "nearest", "box", "bilinear", "hamming", "bicubic", "mitchell", "lanczos3", "lanczos"
]
ImageInput = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ImageResult:
    """The outcome for one input of `preprocess`.

    Attributes:
        pixels: H×W×3 uint8 RGB array, or None when the input could not be used.
        error: None, or why the input could not be used, in one sentence.
        orig_size: (h, w) of the input after EXIF orientation (None on error).
        crop: (top, left) of the source box in target coordinates (None on error).
        error_kind: None, or why the input could not be used as a value (`too_large`,
            `decode_error`, ...; see `shardcook.errors.ImageErrorKind`).
    """

    pixels: np.ndarray | None
    error: str | None
    orig_size: tuple[int, int] | None
    crop: tuple[int, int] | None
    error_kind: ImageErrorKind | None = None

    @property
    def ok(self) -> bool:
        """True when `pixels` holds an image."""
        return self.error is None


@dataclass(frozen=True)
class Geometry:
    """What a mode does to an image of a given (oriented) size.

    Attributes:
        size: (width, height) of the result.
        box: the source box (left, top, right, bottom) in input pixels, as Pillow's
            `Image.resize(size, box=box)` takes it; fractional.
        crop: (top, left) of the box scaled into target coordinates.
    """

    size: tuple[int, int]
    box: tuple[float, float, float, float]
    crop: tuple[int, int]


def default_buckets(size: int = 1024) -> list[tuple[int, int]]:
    """Lists the built-in buckets (width, height) for `size`.

    Sides are multiples of 64 with area close to size² and aspect ratio at most 2: for every
    width w = 64k, h is the multiple of 64 nearest size²/w; pairs with h ≤ w ≤ 2h are kept
    together with their transposes.
    """
    return _native.default_buckets(size)


def geometry(
    width: int,
    height: int,
    *,
    mode: Mode = "crop",
    size: int = 1024,
    max_size: int = 1024,
    buckets: Sequence[tuple[int, int]] | None = None,
) -> Geometry:
    """Computes target size, source box and crop of `mode` for an oriented `width`×`height` image.

    Raises:
        ImageError: unknown mode, bad option, or an image too small for `variable`.
    """
    g = _native.image_geometry(
        width, height, size=size, mode_name=mode, max_size=max_size, buckets=buckets
    )
    return Geometry(size=g.size, box=g.box, crop=g.crop)


def preprocess(
    inputs: Sequence[ImageInput],
    *,
    size: int = 1024,
    mode: Mode = "crop",
    max_size: int = 1024,
    buckets: Sequence[tuple[int, int]] | None = None,
    filter: FilterName = "lanczos3",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    workers: int | None = None,
) -> list[ImageResult]:
    """Decodes, orients and resizes a batch of images in parallel.

    Args:
        inputs: bytes-like objects (encoded images) or file paths.
        size: target side for `crop` and `stretch`, and the area reference of default buckets.
        mode: `crop` (centred square), `stretch` (whole image to size×size), `variable` (longest
            side at most `max_size`, sides multiples of 16, never upscaled) or `bucket` (the
            bucket nearest in aspect ratio, filled and centre-cropped).
        max_size: longest side for `variable`.
        buckets: (width, height) pairs for `bucket`; default `default_buckets(size)`.
        filter: resampling filter, one of `FILTERS` (Pillow's kernels).
        max_pixels: inputs whose header says more pixels than this are errors.
        workers: threads to use, 1 to 1024 (default: all cores).

    Returns:
        One `ImageResult` per input, in order. A bad input gives a result with `error` set; it
        never fails the batch. A path is read only when it names a regular file of at most 1 GiB
        (a folder, FIFO or device is an `unreadable` result, never a hang
        or a read of /dev/zero until memory runs out).

    Raises:
        ImageError: an option is wrong (unknown mode or filter, empty buckets, a size that is not
            a positive integer or whose output exceeds `max_pixels`, `inputs` a single str or
            bytes instead of a list, ...).
    """
    unreadable: dict[int, str] = {}
    if isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes, bytearray)):
        inputs = list(inputs)  # (anything else, the core refuses in one sentence)
        for n, item in enumerate(inputs):
            if isinstance(item, (str, os.PathLike)):
                try:
                    inputs[n] = read_regular_file(item)
                except OSError as e:
                    unreadable[n] = f"cannot read {os.fsdecode(item)}: {e.strerror or e}"
                    inputs[n] = b""
    rows = _native.preprocess_batch(
        inputs,
        size=size,
        mode_name=mode,
        max_size=max_size,
        buckets=buckets,
        filter=filter,
        max_pixels=max_pixels,
        workers=workers,
    )
    return [
        ImageResult(pixels=None, error=unreadable[n], orig_size=None, crop=None,
                    error_kind="unreadable") if n in unreadable else
        ImageResult(pixels=r.pixels, error=r.error, orig_size=r.orig_size, crop=r.crop,
                    error_kind=r.error_kind)
        for n, r in enumerate(rows)
    ]


def encode_image(pixels: np.ndarray, format: ImageFormat = "jpg", quality: int = 95) -> bytes:
    """Encodes an H×W×3 uint8 RGB array as `jpg`, `png` or `webp`.

    JPEG is baseline with 4:2:0 chroma (libjpeg-turbo defaults, as Pillow); WebP is lossy at
    `quality` (libwebp); PNG is lossless (`quality` is ignored). Deterministic: same pixels,
    same bytes.

    Raises:
        ImageError: wrong array shape, unknown format, or quality outside 1..100.
    """
    import numpy as np

    array = np.asarray(pixels)
    if array.dtype != np.uint8 or array.ndim != 3:
        from shardcook.errors import ImageError

        raise ImageError(
            f"pixels must be an H×W×3 uint8 array, got {array.dtype} with shape {array.shape}"
        )
    return _native.encode_image(array, format=format, quality=quality)
