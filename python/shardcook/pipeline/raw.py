"""`raw`: images decoded, oriented, resized/cropped and re-encoded by the Rust image core, written
with their captions and meta.json (docs/FORMAT.md §3, raw)."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from shardcook import imaging  # the Rust image core
from shardcook.config import ImageConfig, RunConfig
from shardcook.errors import ConfigError, ImageError, ImageErrorKind
from shardcook.pipeline.run import Loaded, Outcome, split_skipped

DECODE_ERROR = "decode_error"
TOO_LARGE = "too_large"
TOO_SMALL = "too_small"
ENCODE_ERROR = "encode_error"


def classify_error(kind: ImageErrorKind | None) -> str:
    """The skip reason for an image-core `error_kind`: the size verdicts keep their names (e.g.
    `too_small` for `variable` mode and an image under 16 px); any other failure is a decode
    error."""
    if kind == TOO_LARGE or kind == TOO_SMALL:
        return kind
    return DECODE_ERROR


def meta_json(source: str, orig_size, crop, size) -> bytes:
    """meta.json bytes, deterministic: {"source", "orig_size", "crop", "size"}."""
    return json.dumps(
        {"source": source, "orig_size": [int(x) for x in orig_size],
         "crop": [int(x) for x in crop], "size": [int(x) for x in size]},
        ensure_ascii=False,
    ).encode("utf-8")


def decode_images(batch: list[Loaded], todo: list[int], image: ImageConfig, workers: int):
    """Decodes and resizes `todo` of `batch` with the image core: ([(n, ImageResult)] of the
    usable ones, {n: skipped Outcome} of the rest, with the reason)."""
    results = imaging.preprocess(
        [batch[n].image for n in todo], size=image.image_size, mode=image.resize_mode,
        max_size=image.max_size, max_pixels=image.max_pixels, workers=workers,
    ) if todo else []
    good, skips = [], {}
    for n, r in zip(todo, results):
        item = batch[n].item
        if r.error is not None or r.pixels is None:
            message = r.error or "no pixels"
            skips[n] = Outcome(item, skip=classify_error(r.error_kind), detail=message)
        elif min(r.orig_size) < image.min_size:
            skips[n] = Outcome(item, skip=TOO_SMALL,
                               detail=f"short side {min(r.orig_size)} < --min-size {image.min_size}")
        else:
            good.append((n, r))
    return good, skips


class RawProcessor:
    """Turns loaded inputs into (image, txt, meta.json) parts."""

    def __init__(self, cfg: RunConfig):
        self.image = cfg.image
        self.workers = cfg.image.workers or os.cpu_count() or 1
        self.stage_seconds = {"preprocess": 0.0, "encode": 0.0}
        self._pool = ThreadPoolExecutor(self.workers) if self.workers > 1 else None

    def _encode(self, pixels) -> bytes:
        i = self.image
        return imaging.encode_image(pixels, format=i.image_format, quality=i.image_quality)

    def process(self, batch: list[Loaded]) -> list[Outcome]:
        i = self.image
        outcomes, todo = split_skipped(batch)
        t0 = time.perf_counter()
        keep, skips = decode_images(batch, todo, i, self.workers)
        for n, o in skips.items():
            outcomes[n] = o
        t1 = time.perf_counter()
        self.stage_seconds["preprocess"] += t1 - t0
        pixels = [r.pixels for _, r in keep]
        encoded = list(self._pool.map(self._try_encode, pixels)) if self._pool else [
            self._try_encode(p) for p in pixels]
        self.stage_seconds["encode"] += time.perf_counter() - t1
        for (n, r), data in zip(keep, encoded):
            item = batch[n].item
            if isinstance(data, str):
                outcomes[n] = Outcome(item, skip=ENCODE_ERROR, detail=data)
                continue
            h, w = r.pixels.shape[:2]
            parts = [
                (i.image_format, data),
                ("txt", (item.caption or "").encode("utf-8")),
                ("meta.json", meta_json(item.source, r.orig_size, r.crop, (h, w))),
            ]
            outcomes[n] = Outcome(item, parts=parts)
        return outcomes  # type: ignore[return-value]

    def _try_encode(self, pixels):
        try:
            return self._encode(pixels)
        except Exception as e:  # noqa: BLE001 - any encode failure skips just this image
            return str(e) or type(e).__name__


def check_image_options(image: ImageConfig, workers: int) -> None:
    """Raises ConfigError, before anything is written, when the image core would refuse these
    options (a size whose output exceeds --max-pixels, too many workers): a batch of no images
    runs every option check of the core and nothing else."""
    try:
        imaging.preprocess([], size=image.image_size, mode=image.resize_mode,  # type: ignore[arg-type]
                           max_size=image.max_size, max_pixels=image.max_pixels, workers=workers)
    except ImageError as e:
        raise ConfigError(
            f"{e} (check --image-size, --max-size, --max-pixels and --workers)."
        ) from None


def run_raw(cfg: RunConfig) -> dict | None:
    """`shardcook raw`: the whole run for this rank; returns report.json's content on rank 0."""
    from shardcook.pipeline.driver import run_pipeline

    workers = cfg.image.workers or os.cpu_count() or 1
    check_image_options(cfg.image, workers)
    return run_pipeline(cfg, encoding="raw", make_processor=RawProcessor,
                        batch_size=max(16, 4 * workers))
