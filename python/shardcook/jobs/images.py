"""The image stage shared by `raw` and `encode` (and chatml's skip reasons): images decoded,
oriented and resized by the Rust image core, the skip reason of a failure, meta.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar, cast

import numpy as np

from shardcook import imaging  # the Rust image core
from shardcook.config import ImageConfig
from shardcook.errors import ConfigError, ImageError, ImageErrorKind, SkipReason
from shardcook.pipeline.run import Loaded, Outcome

P = TypeVar("P")


def classify_error(kind: ImageErrorKind | None) -> SkipReason:
    """The skip reason for an image-core `error_kind`: the size verdicts keep their names (e.g.
    `too_small` for `variable` mode and an image under 16 px); any other failure is a decode
    error."""
    if kind == "too_large" or kind == "too_small":
        return kind
    return "decode_error"


def meta_json(source: str, orig_size: tuple[int, int], crop: tuple[int, int],
              size: tuple[int, int]) -> bytes:
    """meta.json bytes, deterministic: {"source", "orig_size", "crop", "size"}."""
    return json.dumps(
        {"source": source, "orig_size": [int(x) for x in orig_size],
         "crop": [int(x) for x in crop], "size": [int(x) for x in size]},
        ensure_ascii=False,
    ).encode("utf-8")


def resize_mode(image: ImageConfig) -> imaging.Mode:
    """`--resize-mode` as the image core's type (config validation allows only its modes)."""
    return cast(imaging.Mode, image.resize_mode)


def _image_bytes(loaded: Loaded[P]) -> bytes | bytearray | memoryview:
    # `split_skipped` leaves only inputs whose bytes were read in the to-do list.
    assert isinstance(loaded.payload, (bytes, bytearray, memoryview))
    return loaded.payload


def decode_images(
    batch: Sequence[Loaded[P]], todo: list[int], image: ImageConfig, workers: int
) -> tuple[list[tuple[int, imaging.ImageResult]], dict[int, Outcome]]:
    """Decodes and resizes `todo` of `batch` with the image core: ([(n, ImageResult)] of the
    usable ones, {n: skipped Outcome} of the rest, with the reason)."""
    results = imaging.preprocess(
        [_image_bytes(batch[n]) for n in todo], size=image.image_size, mode=resize_mode(image),
        max_size=image.max_size, max_pixels=image.max_pixels, workers=workers,
    ) if todo else []
    good: list[tuple[int, imaging.ImageResult]] = []
    skips: dict[int, Outcome] = {}
    for n, r in zip(todo, results, strict=True):
        item = batch[n].item
        if r.error is not None or r.pixels is None or r.orig_size is None:
            message = r.error or "no pixels"
            skips[n] = Outcome(item, skip=classify_error(r.error_kind), detail=message)
        elif min(r.orig_size) < image.min_size:
            skips[n] = Outcome(item, skip="too_small",
                               detail=f"short side {min(r.orig_size)} "
                                      f"< --min-size {image.min_size}")
        else:
            good.append((n, r))
    return good, skips


def result_pixels(result: imaging.ImageResult) -> np.ndarray:
    """The pixels of a usable `decode_images` result."""
    assert result.pixels is not None
    return result.pixels


def result_meta_json(source: str, result: imaging.ImageResult) -> bytes:
    """meta.json for a usable `decode_images` result: its sizes and crop, and the stored size."""
    assert result.orig_size is not None and result.crop is not None
    h, w = result_pixels(result).shape[:2]
    return meta_json(source, result.orig_size, result.crop, (h, w))


def check_image_options(image: ImageConfig, workers: int) -> None:
    """Raises ConfigError, before anything is written, when the image core would refuse these
    options (a size whose output exceeds --max-pixels, too many workers): a batch of no images
    runs every option check of the core and nothing else."""
    try:
        imaging.preprocess([], size=image.image_size, mode=resize_mode(image),
                           max_size=image.max_size, max_pixels=image.max_pixels, workers=workers)
    except ImageError as e:
        raise ConfigError(
            f"{e} (check --image-size, --max-size, --max-pixels and --workers)."
        ) from None
