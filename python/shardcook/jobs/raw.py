"""`raw`: images decoded, oriented, resized/cropped and re-encoded by the Rust image core, written
with their captions and meta.json (docs/FORMAT.md §3, raw)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import cast

import numpy as np

from shardcook import imaging  # the Rust image core
from shardcook.config import RunConfig
from shardcook.dataset.view import DatasetView
from shardcook.jobs.images import (
    check_image_options,
    decode_images,
    result_meta_json,
    result_pixels,
)
from shardcook.layouts import RAW
from shardcook.output.folder import OutputFolder
from shardcook.pipeline.driver import JobBasics, finalize_by_ratio, ratio_units
from shardcook.pipeline.plan import WorkUnit
from shardcook.pipeline.report import JsonObject
from shardcook.pipeline.run import Loaded, Outcome, Processor, completed, split_skipped
from shardcook.runtime.workers import Place
from shardcook.sources.base import Item, Source


class RawProcessor(Processor[bytes]):
    """Turns loaded inputs (their image's bytes) into (image, txt, meta.json) parts."""

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

    def load(self, item: Item) -> bytes:
        return item.image_bytes()

    def process(self, batch: list[Loaded[bytes]]) -> list[Outcome]:
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
        for (n, r), data in zip(keep, encoded, strict=True):
            item = batch[n].item
            if isinstance(data, str):
                outcomes[n] = Outcome(item, skip="encode_error", detail=data)
                continue
            parts = [
                (i.image_format, data),
                ("txt", (item.caption or "").encode("utf-8")),
                ("meta.json", result_meta_json(item.source, r)),
            ]
            outcomes[n] = Outcome.of(item, parts)
        return completed(outcomes)

    def _try_encode(self, pixels: np.ndarray) -> bytes | str:
        try:
            return self._encode(pixels)
        except Exception as e:  # noqa: BLE001 - any encode failure skips just this image
            return str(e) or type(e).__name__


class RawJob(JobBasics):
    """`shardcook raw` as a job: `open_source`'s inputs in units of --shard-size, the image core,
    finalize by --split's ratios."""

    layout = RAW
    prefetch = 2
    backend = "gloo"
    manifest_extra: JsonObject | None = None

    def __init__(self, cfg: RunConfig) -> None:
        """Raises ConfigError when the image core would refuse the image options."""
        self.cfg = cfg
        workers = cfg.image.workers or os.cpu_count() or 1
        check_image_options(cfg.image, workers)
        self.batch_size = max(16, 4 * workers)

    def running(self, place: Place) -> AbstractContextManager[object]:
        return nullcontext()

    def units(self, source: Source) -> list[WorkUnit]:
        return ratio_units(self.cfg, source)

    def processor(self, cfg: RunConfig, folder: OutputFolder, place: Place,
                  units: list[WorkUnit]) -> RawProcessor:
        return RawProcessor(cfg)

    def finalize(self, view: DatasetView, report: JsonObject) -> None:
        finalize_by_ratio(self.cfg, view, self.layout)
