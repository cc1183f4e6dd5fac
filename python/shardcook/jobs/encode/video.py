"""`encode` for a model that encodes video (the model registry's `input_kind: video`, e.g. Wan):
each input video becomes one clip (`--video-mode video`) or N 1-frame clips (`frames`).

The shared loop's reader thread decodes and resizes the next batches' videos in `--workers`
threads (PyAV and Pillow release the GIL: `prepare`); the main thread runs the encoders
(`process`): clips of one shape are batched through the VAE together, whatever input they come
from, and each distinct caption of the batch goes through the text encoder once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from shardcook.config import RunConfig
from shardcook.encoders.transfer import HostCopy
from shardcook.jobs.encode import PREPARED_BYTES
from shardcook.jobs.encode.loadonce import LoadedOnce
from shardcook.jobs.encode.sample import ClipPartBuilder, EncodedClip
from shardcook.layouts import registry_function
from shardcook.media import MediaError
from shardcook.media.clips import Framing, clips_of
from shardcook.pipeline.plan import WorkUnit
from shardcook.pipeline.run import (
    Loaded,
    Outcome,
    Processor,
    Sample,
    completed,
    each_unskipped,
    split_skipped,
)
from shardcook.sources.base import Item

if TYPE_CHECKING:
    import numpy as np
    import torch

    from shardcook.encoders.models import Encoders


@dataclass(frozen=True)
class Clips:
    """A video input's clips, each its resized frames stacked [T, H, W, 3] (by the decoding
    worker, so the encoder's thread copies nothing before the upload)."""

    pixels: list[np.ndarray]


#: A video input as the loop hands it on: its bytes as read, then its clips once prepared.
Video = bytes | Clips


def clips(loaded: Loaded[Video]) -> Clips:
    """The clips `prepare` made of an input it did not skip."""
    assert isinstance(loaded.payload, Clips)
    return loaded.payload


def framing(cfg: RunConfig) -> Framing:
    """The run's `Framing`, from its video section and --resize-mode."""
    v = cfg.video
    assert v is not None  # a video model's run has the section (`check_encode`)
    target = (v.height, v.width) if v.height is not None and v.width is not None else None
    return Framing(target, cfg.image.resize_mode, v.aspect_ratio, v.center_crop, v.video_mode,
                   v.num_frames, v.max_frames, v.frame_stride, v.max_pixels)


#: The frames a clip is taken to hold when nothing bounds it (Wan's 81 at 16 fps).
TYPICAL_FRAMES = 81


def prefetch_clips(cfg: RunConfig) -> int:
    """How many decoded reader batches may wait for the encoders: PREPARED_BYTES' worth of
    clips at the run's size, 1-16 (a video of unknown size counts as 480 x 832). The loop also
    counts the decoded frames' bytes against PREPARED_BYTES (`prepared_bytes`), so videos kept
    at a larger native size hold no more."""
    v = cfg.video
    assert v is not None
    frames = v.num_frames if v.video_mode == "frames" else (v.max_frames or TYPICAL_FRAMES)
    side = (v.height or 480) * (v.width or 832)
    return max(1, min(16, PREPARED_BYTES // (cfg.model.batch_size * frames * side * 3)))


class ClipUnit(WorkUnit):
    """A unit of --shard-size videos: every clip of them goes in the unit's one shard."""

    @property
    def capacity(self) -> int:
        return 1 << 62


def clip_units(units: list[WorkUnit]) -> list[WorkUnit]:
    """The engine's units of a video run, as `ClipUnit`s."""
    return [ClipUnit(u.unit, u.start, u.stop) for u in units]


def sample_key(index: int, frame: int | None) -> str:
    """Bridge's keys: `{video:06}`, or `{video:06}_{frame:02}` (1-based) for frames."""
    return f"{index:06}" if frame is None else f"{index:06}_{frame:02}"


class VideoEncodeProcessor(Processor[Video]):
    """Turns loaded videos into the run's layout's samples, one outcome per input (its clips as
    rows), in order."""

    prepared_budget = PREPARED_BYTES

    def __init__(self, cfg: RunConfig, load_encoders: Callable[[], Encoders],
                 stored_dtype: torch.dtype, workers: int) -> None:
        from shardcook.encoders.models import MODELS

        assert cfg.layout is not None and cfg.layout.encode is not None
        self.model = cfg.model
        self.family = MODELS[cfg.layout.encode.model]
        self.framing = framing(cfg)
        self.build_parts: ClipPartBuilder = registry_function(cfg.layout.encode.part_builder)
        self.batch_size = cfg.model.batch_size
        self.stored_dtype = stored_dtype
        self.stage_seconds = {"preprocess": 0.0, "load_encoders": 0.0, "encode": 0.0,
                              "serialize": 0.0}
        self._encoders = LoadedOnce(load_encoders, self.stage_seconds)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="shardcook-video")

    @property
    def enc(self) -> Encoders:
        return self._encoders.get()

    def start(self) -> None:
        self.enc  # noqa: B018 - loads the encoders while the reader decodes

    def load(self, item: Item) -> Video:
        return item.image_bytes()

    def _decode(self, loaded: Loaded[Video]) -> Loaded[Video]:
        data = loaded.payload
        assert data is not None and not isinstance(data, Clips)  # read, not yet decoded
        import numpy as np

        try:
            frames, picks = clips_of(data, self.framing, loaded.item.span)
        except MediaError as e:
            return replace(loaded, payload=None, skip=e.reason, detail=str(e))
        pixels = [np.stack([frames[i] for i in pick]) for pick in picks]
        return replace(loaded, payload=Clips(pixels))

    def prepare(self, batch: list[Loaded[Video]]) -> list[Loaded[Video]]:
        """The batch with each video decoded and resized into its clips, or skipped with the
        reason."""
        t0 = time.perf_counter()
        prepared = each_unskipped(batch, self._decode, self._pool)
        self.stage_seconds["preprocess"] += time.perf_counter() - t0
        return prepared

    def prepared_bytes(self, batch: list[Loaded[Video]]) -> int:
        """The decoded frames' bytes."""
        return sum(p.nbytes for loaded in batch if isinstance(loaded.payload, Clips)
                   for p in loaded.payload.pixels)

    @cached_property
    def _facts(self) -> dict[str, object]:
        m = self.model
        return {"latent_mode": m.latent_mode, **self.enc.latent_facts,
                "latent_seed": m.seed if m.latent_mode == "sample" else None}

    def _texts(self, captions: list[str]) -> list[tuple[list[str], list[str], HostCopy]]:
        """The distinct captions, in chunks, each with the names of its text tensors and the
        tensors on their way to the CPU in the stored dtype."""
        distinct = list(dict.fromkeys(captions))
        chunks = [distinct[k:k + self.batch_size] for k in range(0, len(distinct),
                                                                 self.batch_size)]
        out = []
        for chunk in chunks:
            text = self.enc.encode_text(chunk)
            out.append((chunk, list(text), HostCopy(list(text.values()), self.stored_dtype)))
        return out

    def process(self, batch: list[Loaded[Video]]) -> list[Outcome]:
        outcomes, todo = split_skipped(batch)
        enc = self.enc
        t0 = time.perf_counter()
        # (input, clip number, key, frames [T, H, W, 3]) of every clip, grouped by shape
        groups: dict[tuple[int, ...], list[tuple[int, int, str, np.ndarray]]] = {}
        for n in todo:
            single = self.framing.mode == "frames"
            for c, pixels in enumerate(clips(batch[n]).pixels):
                key = sample_key(batch[n].item.index, c + 1 if single else None)
                groups.setdefault(pixels.shape, []).append((n, c, key, pixels))
        # every encoder batch is queued before the first result is waited for
        pending_texts = self._texts([batch[n].item.caption or "" for n in todo])
        pending: list[tuple[list[tuple[int, int]], HostCopy]] = []
        for group in groups.values():
            for k in range(0, len(group), self.batch_size):
                chunk = group[k:k + self.batch_size]
                z = enc.encode_pixels([p for *_, p in chunk],
                                      [key for _, _, key, _ in chunk]).latents
                pending.append(([(n, c) for n, c, _, _ in chunk],
                                HostCopy([z], self.stored_dtype)))
        texts: dict[str, dict[str, torch.Tensor]] = {}
        for chunk_captions, names, copy in pending_texts:
            tensors = copy.get()
            for j, caption in enumerate(chunk_captions):
                texts[caption] = {name: t[j] for name, t in zip(names, tensors, strict=True)}
        latents: dict[tuple[int, int], torch.Tensor] = {}
        for where, copy in pending:
            latents.update(zip(where, copy.get()[0], strict=True))
        self.stage_seconds["encode"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for n in todo:
            item, made = batch[n].item, clips(batch[n])
            rows: list[Sample] = []
            for c, pixels in enumerate(made.pixels):
                frame = (c + 1, len(made.pixels)) if self.framing.mode == "frames" else None
                key = sample_key(item.index, None if frame is None else frame[0])
                t, h, w = pixels.shape[:3]
                clip = EncodedClip(item, key, latents[(n, c)], texts[item.caption or ""],
                                   (t, h, w), frame, self.framing.settings(),
                                   self._facts, self.family)
                rows.append((key, list(self.build_parts(clip))))
            outcomes[n] = Outcome(item, samples=rows)
        self.stage_seconds["serialize"] += time.perf_counter() - t0
        return completed(outcomes)
