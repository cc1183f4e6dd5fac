"""`encode --layout automodel`: NeMo AutoModel's diffusion cache, as its preprocessing tool
(`tools/diffusion/preprocessing_multiprocess.py`) writes it, through the family `--model-type`
names (its registry entry's `automodel`).

The engine runs as for every layout: units of inputs into shards, a marker per unit, resume.
Each sample of a shard is one cache file: `pt`, the `torch.save` bytes of the family's cache
dict, and `json`, its entry in AutoModel's metadata shards. Finalize then writes the cache
itself from the shards, in input order (`automodel_cache.write_cache`).

Images go as the tool sends them: decoded by Pillow to RGB, given the bucket nearest their
aspect ratio (`buckets`), resized with Lanczos to cover it and centre-cropped; the encoders run
on a batch of one bucket at a time.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from shardcook.config import RunConfig
from shardcook.dataset.view import DatasetView
from shardcook.jobs.encode import PREPARED_BYTES
from shardcook.jobs.encode.automodel_run import (
    automodel_config,
    automodel_of,
    family_of,
    pixel_budget,
)
from shardcook.jobs.encode.buckets import Bucket, bucket_for, buckets, cover_size
from shardcook.jobs.encode.job import EncodeJob, quiet_model_libraries
from shardcook.jobs.encode.loadonce import LoadedOnce
from shardcook.layouts import registry_function
from shardcook.layouts.automodel import CACHE_PART, ENTRY_PART, IMAGE_SUFFIX
from shardcook.output.folder import OutputFolder
from shardcook.pipeline.plan import WorkUnit
from shardcook.pipeline.report import JsonObject
from shardcook.pipeline.run import (
    Loaded,
    Outcome,
    Processor,
    completed,
    each_unskipped,
    split_skipped,
)
from shardcook.runtime.workers import Place
from shardcook.sources.base import Item, Source

if TYPE_CHECKING:
    import numpy as np

    from shardcook.encoders.models import Encoders

#: AutoModel's image pixel budget when neither --max-pixels nor --resolution-preset is given.
DEFAULT_IMAGE_PIXELS = 256 * 256


def cache_name(path: str, bucket: Bucket, suffix: str) -> str:
    """The cache file of input `path` in `bucket`, inside the cache: `WxH/<md5>.pt`, the md5 of
    the absolute path and the bucket as the tool hashes them."""
    digest = hashlib.md5(f"{path}_{bucket.name}".encode()).hexdigest()
    return f"{bucket.name}/{digest}{suffix}"


@dataclass(frozen=True)
class Fitted:
    """An image in its bucket: pixels [H, W, 3] uint8, its own size and the crop's offset."""

    pixels: np.ndarray
    original: tuple[int, int]
    bucket: Bucket
    offset: tuple[int, int]


#: An input as the loop hands it on: its bytes as read, then fitted to its bucket.
Image = bytes | Fitted


def fit(data: bytes, choices: list[Bucket]) -> Fitted:
    """AutoModel's `resize_and_crop(..., crop_mode="center")` of the image in `data`."""
    import numpy as np
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(data)) as opened:
        image = opened.convert("RGB")
    width, height = image.size
    bucket = bucket_for(width, height, choices)
    new_w, new_h = cover_size(width, height, (bucket.width, bucket.height))
    image = image.resize((new_w, new_h), PILImage.Resampling.LANCZOS)
    left, top = (new_w - bucket.width) // 2, (new_h - bucket.height) // 2
    image = image.crop((left, top, left + bucket.width, top + bucket.height))
    return Fitted(np.asarray(image), (width, height), bucket, (left, top))


def fitted(loaded: Loaded[Image]) -> Fitted:
    assert isinstance(loaded.payload, Fitted)  # `prepare` fitted every input it did not skip
    return loaded.payload


class AutoModelImageProcessor(Processor[Image]):
    """Turns loaded images into one cache file each, one outcome per input, in order."""

    prepared_budget = PREPARED_BYTES

    def __init__(self, cfg: RunConfig, load_encoders: Callable[[], Encoders],
                 workers: int) -> None:
        self.family = family_of(cfg)
        self.automodel = automodel_of(self.family)
        self.build_cache = registry_function(self.automodel.cache)
        self.choices = buckets(pixel_budget(cfg, DEFAULT_IMAGE_PIXELS),
                               self.automodel.quantization)
        self.batch_size = cfg.model.batch_size
        self.stage_seconds = {"preprocess": 0.0, "load_encoders": 0.0, "encode": 0.0,
                              "serialize": 0.0}
        self._encoders = LoadedOnce(load_encoders, self.stage_seconds)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="shardcook-automodel")

    @property
    def enc(self) -> Encoders:
        return self._encoders.get()

    def start(self) -> None:
        self.enc  # noqa: B018 - loads the encoders while the reader decodes

    def load(self, item: Item) -> Image:
        return item.image_bytes()

    def _fit(self, loaded: Loaded[Image]) -> Loaded[Image]:
        from PIL import UnidentifiedImageError

        assert isinstance(loaded.payload, bytes)
        try:
            return replace(loaded, payload=fit(loaded.payload, self.choices))
        except UnidentifiedImageError:
            return replace(loaded, payload=None, skip="decode_error",
                           detail="Pillow does not recognise it as an image")
        except (OSError, ValueError) as e:
            return replace(loaded, payload=None, skip="decode_error",
                           detail=f"Pillow cannot decode it: {e}")
        except MemoryError:
            return replace(loaded, payload=None, skip="too_large",
                           detail="too large to decode")

    def prepare(self, batch: list[Loaded[Image]]) -> list[Loaded[Image]]:
        t0 = time.perf_counter()
        prepared = each_unskipped(batch, self._fit, self._pool)
        self.stage_seconds["preprocess"] += time.perf_counter() - t0
        return prepared

    def prepared_bytes(self, batch: list[Loaded[Image]]) -> int:
        return sum(loaded.payload.pixels.nbytes for loaded in batch
                   if isinstance(loaded.payload, Fitted))

    def _sample(self, loaded: Loaded[Image], latent: Any, text: dict[str, Any]
                ) -> Outcome:
        import torch

        from shardcook.encoders.models import CacheSample

        item, image = loaded.item, fitted(loaded)
        b = image.bucket
        sample = CacheSample(latent=latent, text=text, path=item.source,
                             prompt=item.caption or "", original_resolution=image.original,
                             bucket_resolution=(b.width, b.height), crop_offset=image.offset,
                             bucket_id=b.id, aspect_ratio=b.aspect_ratio,
                             model_type=self.automodel.model_type, extra={})
        data = io.BytesIO()
        torch.save(self.build_cache(sample), data)
        entry = {"image_path": item.source, "bucket_resolution": [b.width, b.height],
                 "original_resolution": list(image.original), "prompt": sample.prompt,
                 "bucket_id": b.id, "aspect_ratio": b.aspect_ratio,
                 "pixels": b.width * b.height, "model_type": sample.model_type}
        meta = {"cache_name": cache_name(item.source, b, IMAGE_SUFFIX), "entry": entry}
        return Outcome.of(item, [(CACHE_PART, data.getvalue()),
                                 (ENTRY_PART, json.dumps(meta).encode("utf-8"))])

    def process(self, batch: list[Loaded[Image]]) -> list[Outcome]:
        import numpy as np

        outcomes, todo = split_skipped(batch)
        groups: dict[Bucket, list[int]] = {}
        for n in todo:
            groups.setdefault(fitted(batch[n]).bucket, []).append(n)
        for group in groups.values():
            for k in range(0, len(group), self.batch_size):
                chunk = group[k:k + self.batch_size]
                t0 = time.perf_counter()
                items = [batch[n].item for n in chunk]
                pixels = np.stack([fitted(batch[n]).pixels for n in chunk])
                latents = self.enc.encode_pixels(pixels, [it.key for it in items]).latents
                text = self.enc.encode_text([it.caption or "" for it in items])
                latents = latents.cpu()
                text = {name: t.cpu() for name, t in text.items()}
                t1 = time.perf_counter()
                self.stage_seconds["encode"] += t1 - t0
                for j, n in enumerate(chunk):
                    outcomes[n] = self._sample(batch[n], latents[j].clone(),
                                               {k: t[j].clone() for k, t in text.items()})
                self.stage_seconds["serialize"] += time.perf_counter() - t1
        return completed(outcomes)


class AutoModelJob(EncodeJob):
    """`encode --layout automodel`: AutoModel's inputs and encoders, the engine's shards, and
    AutoModel's cache written from them at finalize."""

    def source(self, cfg: RunConfig, folder: OutputFolder) -> Source:
        from shardcook.sources.automodel import AutoModelFolderSource

        a = automodel_config(cfg)
        assert a.caption_field is not None  # set by the config's checks (`check_captions`)
        return AutoModelFolderSource(cfg.source.input_dir or "", cfg.source.max_samples,
                                     caption_field=a.caption_field,
                                     caption_format=a.caption_format)

    def units(self, source: Source) -> list[WorkUnit]:
        from shardcook.jobs.encode.video import clip_units
        from shardcook.pipeline.driver import ratio_units

        units = ratio_units(self.cfg, source)
        # frames mode writes several cache files of one video, all in its unit's shard
        return clip_units(units) if self.cfg.video is not None else units

    def load_encoders(self, folder: OutputFolder, place: Place) -> Any:
        """The encoders of the family's `automodel` entry."""
        quiet_model_libraries()
        cls = registry_function(automodel_of(family_of(self.cfg)).encoders)
        return self.compiled(cls.for_run(self.cfg.model, self.spec, self.device,
                                         self.token_file))

    def processor(self, cfg: RunConfig, folder: OutputFolder, place: Place,
                  units: list[WorkUnit]) -> Processor[Any]:
        load = partial(self.load_encoders, folder, place)
        if cfg.video is not None:
            from shardcook.jobs.encode.automodel_video import AutoModelVideoProcessor

            return AutoModelVideoProcessor(cfg, load, self.workers)
        return AutoModelImageProcessor(cfg, load, self.workers)

    def finalize(self, view: DatasetView, report: JsonObject) -> None:
        from shardcook.jobs.encode.automodel_cache import finish_cache

        family, a = family_of(self.cfg), automodel_config(self.cfg)
        assert isinstance(report["shards"], dict)
        samples, written = finish_cache(self.cfg.output.location.store, view,
                                        list(report["shards"]), {
            "processor": a.model_type, "model_name": self.cfg.model.model_path,
            "model_type": automodel_of(family).model_type}, self.closing_fields())
        if not written and not self.cfg.output.quiet:
            print(f"shardcook: the cache in {view.location} is complete ({samples} samples, "
                  "recorded by an earlier finalize); nothing to write.", file=sys.stderr)

    def closing_fields(self) -> dict[str, object]:
        """metadata.json's fields after the shards' names, as the tool's command writes them."""
        a, v = automodel_config(self.cfg), self.cfg.video
        if v is None:
            return {"caption_field": a.caption_field,
                    "max_pixels": pixel_budget(self.cfg, DEFAULT_IMAGE_PIXELS)}
        from shardcook.jobs.encode.automodel_video import video_pixel_budget

        return {"caption_format": a.caption_format, "caption_field": a.caption_field,
                "max_pixels": video_pixel_budget(self.cfg), "mode": v.video_mode,
                "target_frames": None}
