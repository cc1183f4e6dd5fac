"""`raw`: images decoded, oriented, resized/cropped and re-encoded by the Rust image core, written
with their captions and meta.json (docs/FORMAT.md §3, raw)."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import numpy as np
from shardcook import imaging  # the Rust image core
from shardcook.config import ImageConfig, RunConfig
from shardcook.errors import ConfigError, ImageError, ImageErrorKind, SkipReason
from shardcook.pipeline.report import JsonObject
from shardcook.pipeline.run import Loaded, Outcome, Processor, completed, split_skipped


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


def _image_bytes(loaded: Loaded) -> bytes:
    # `split_skipped` leaves only inputs whose bytes were read in the to-do list.
    assert loaded.image is not None
    return loaded.image


def decode_images(
    batch: list[Loaded], todo: list[int], image: ImageConfig, workers: int
) -> tuple[list[tuple[int, imaging.ImageResult]], dict[int, Outcome]]:
    """Decodes and resizes `todo` of `batch` with the image core: ([(n, ImageResult)] of the
    usable ones, {n: skipped Outcome} of the rest, with the reason)."""
    results = imaging.preprocess(
        [_image_bytes(batch[n]) for n in todo], size=image.image_size, mode=resize_mode(image),
        max_size=image.max_size, max_pixels=image.max_pixels, workers=workers,
    ) if todo else []
    good: list[tuple[int, imaging.ImageResult]] = []
    skips: dict[int, Outcome] = {}
    for n, r in zip(todo, results):
        item = batch[n].item
        if r.error is not None or r.pixels is None or r.orig_size is None:
            message = r.error or "no pixels"
            skips[n] = Outcome(item, skip=classify_error(r.error_kind), detail=message)
        elif min(r.orig_size) < image.min_size:
            skips[n] = Outcome(item, skip="too_small",
                               detail=f"short side {min(r.orig_size)} < --min-size {image.min_size}")
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


class RawProcessor(Processor):
    """Turns loaded inputs into (image, txt, meta.json) parts."""

    def __init__(self, cfg: RunConfig) -> None:
        self.image = cfg.image
        self.workers = cfg.image.workers or os.cpu_count() or 1
        self.stage_seconds = {"preprocess": 0.0, "encode": 0.0}
        self._pool = ThreadPoolExecutor(self.workers) if self.workers > 1 else None

    def _encode(self, pixels: np.ndarray) -> bytes:
        i = self.image
        # config validation allows only the image core's formats
        image_format = cast(imaging.ImageFormat, i.image_format)
        return imaging.encode_image(pixels, format=image_format, quality=i.image_quality)

    def process(self, batch: list[Loaded]) -> list[Outcome]:
        i = self.image
        outcomes, todo = split_skipped(batch)
        t0 = time.perf_counter()
        keep, skips = decode_images(batch, todo, i, self.workers)
        for n, o in skips.items():
            outcomes[n] = o
        t1 = time.perf_counter()
        self.stage_seconds["preprocess"] += t1 - t0
        pixels = [result_pixels(r) for _, r in keep]
        encoded = list(self._pool.map(self._try_encode, pixels)) if self._pool else [
            self._try_encode(p) for p in pixels]
        self.stage_seconds["encode"] += time.perf_counter() - t1
        for (n, r), data in zip(keep, encoded):
            item = batch[n].item
            if isinstance(data, str):
                outcomes[n] = Outcome(item, skip="encode_error", detail=data)
                continue
            parts = [
                (i.image_format, data),
                ("txt", (item.caption or "").encode("utf-8")),
                ("meta.json", result_meta_json(item.source, r)),
            ]
            outcomes[n] = Outcome(item, parts=parts)
        return completed(outcomes)

    def _try_encode(self, pixels: np.ndarray) -> bytes | str:
        try:
            return self._encode(pixels)
        except Exception as e:  # noqa: BLE001 - any encode failure skips just this image
            return str(e) or type(e).__name__


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


def run_raw(cfg: RunConfig) -> JsonObject | None:
    """`shardcook raw`: the whole run for this rank; returns report.json's content on rank 0."""
    from shardcook.pipeline.driver import run_pipeline

    workers = cfg.image.workers or os.cpu_count() or 1
    check_image_options(cfg.image, workers)
    return run_pipeline(cfg, encoding="raw", make_processor=RawProcessor,
                        batch_size=max(16, 4 * workers))
