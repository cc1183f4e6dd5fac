"""`encode --layout automodel` for a family that encodes video (Wan): each video becomes
AutoModel's `.meta` cache files as its tool's `video` command writes them: one of the whole clip
(`--video-mode video`, `--num-frames` frames evenly spread when the video holds more) or one per
frame (`frames`, `--num-frames` frames evenly spread, each a 1-frame clip). A family whose
processor takes frames at a fixed rate from the start (LTX-2) takes them so, and one that encodes
audio (LTX-2) has each video's audio track decoded beside its frames and encoded beside them. One
whose processor takes exactly N frames (HunyuanVideo-1.5) repeats a shorter video's, and one
conditioned on the first frame (HunyuanVideo-1.5) has it encoded too, in video mode.

A video's size is its bucket's (the budget's bucket nearest its aspect ratio, sides a multiple of
the processor's quantisation) or `--height` x `--width` (no bucket). Reader threads decode and
resize (`media.cover_frames`); the main thread runs the encoders on clips of one shape at a time,
each distinct caption of the batch once.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from shardcook.config import RunConfig
from shardcook.jobs.encode import PREPARED_BYTES
from shardcook.jobs.encode.automodel_run import automodel_of, family_of, pixel_budget
from shardcook.jobs.encode.buckets import bucket_for, buckets
from shardcook.jobs.encode.loadonce import LoadedOnce
from shardcook.layouts import registry_function
from shardcook.layouts.automodel import CACHE_PART, ENTRY_PART, VIDEO_SUFFIX
from shardcook.media import MediaError
from shardcook.media.cover_frames import CoverFrames, CoverFraming, cover_frames, require_opencv
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

#: AutoModel's video pixel budget when neither --max-pixels, --resolution-preset nor --height
#: and --width are given.
DEFAULT_VIDEO_PIXELS = 512 * 512


def video_pixel_budget(cfg: RunConfig) -> int:
    """metadata.json's `max_pixels`, as the tool sets it: the budget given, else the explicit
    size's pixels, else its default."""
    v = cfg.video
    assert v is not None  # a video family's run has the section (`check_encode`)
    explicit = v.height * v.width if v.height is not None and v.width is not None else None
    return pixel_budget(cfg, explicit or DEFAULT_VIDEO_PIXELS)


@dataclass(frozen=True)
class Placement:
    """Where a video goes: its target (width, height), bucket id (None for --height x --width)
    and aspect ratio."""

    target: tuple[int, int]
    bucket_id: int | None
    aspect_ratio: float

    @property
    def name(self) -> str:
        return f"{self.target[0]}x{self.target[1]}"


@dataclass(frozen=True)
class Placed:
    """A decoded video, its frames resized to its placement, and its audio track as the
    family's `AutoModelCache.audio` decodes it (None for a family without audio)."""

    frames: CoverFrames
    placement: Placement
    audio: np.ndarray | None = None


class FirstFrameEncoders(Protocol):
    """The encoders of a family whose `AutoModelCache.first_frame` is set."""

    def encode_first_frames(self, frames: list[np.ndarray]) -> torch.Tensor:
        """[H, W, 3] uint8 first frames -> their embeddings [B, ...]."""
        ...


class AudioEncoders(Protocol):
    """The encoders of a family with an `AutoModelCache.audio` decoder."""

    def encode_audio(self, track: np.ndarray) -> dict[str, torch.Tensor]:
        """One video's decoded audio track -> the cache's audio tensors by name."""
        ...


#: An input as the loop hands it on: its bytes as read, then placed.
Video = bytes | Placed


def placed(loaded: Loaded[Video]) -> Placed:
    assert isinstance(loaded.payload, Placed)  # `prepare` placed every input it did not skip
    return loaded.payload


def cache_name(path: str, placement: Placement, tail: str) -> str:
    """`WxH/<md5>.meta`: the md5 of the absolute path, the size and `tail` (the clip's frame
    count, or `frame<n>` of frames mode's n-th frame from 0), as the tool hashes them."""
    digest = hashlib.md5(f"{path}_{placement.name}_{tail}".encode()).hexdigest()
    return f"{placement.name}/{digest}{VIDEO_SUFFIX}"


class AutoModelVideoProcessor(Processor[Video]):
    """Turns loaded videos into their cache files, one outcome per input (each file a sample),
    in order."""

    prepared_budget = PREPARED_BYTES

    def __init__(self, cfg: RunConfig, load_encoders: Callable[[], Encoders],
                 workers: int) -> None:
        require_opencv()
        v = cfg.video
        assert v is not None
        self.family = family_of(cfg)
        self.automodel = automodel_of(self.family)
        self.build_cache = registry_function(self.automodel.cache)
        self.frames_mode = v.video_mode == "frames"
        self.deterministic = cfg.model.latent_mode == "mode"
        self.explicit = (v.width, v.height) if v.height is not None and v.width is not None \
            else None
        self.choices = buckets(video_pixel_budget(cfg), self.automodel.quantization)
        self.framing = CoverFraming(v.num_frames, cfg.image.resize_mode, v.aspect_ratio,
                                    v.max_pixels, self.automodel.frame_rate,
                                    self.automodel.repeat_frames and not self.frames_mode)
        self.decode_audio = None if self.automodel.audio is None else registry_function(
            self.automodel.audio)
        self.batch_size = cfg.model.batch_size
        self.stage_seconds = {"preprocess": 0.0, "load_encoders": 0.0, "encode": 0.0,
                              "serialize": 0.0}
        self._encoders = LoadedOnce(self._load(load_encoders), self.stage_seconds)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="shardcook-automodel")

    def _load(self, load_encoders: Callable[[], Encoders]) -> Callable[[], Encoders]:
        def load() -> Encoders:
            enc = load_encoders()
            if self.frames_mode:
                enc.frames_in_half = True  # type: ignore[attr-defined]  # Wan's and Hunyuan's
            return enc
        return load

    @property
    def enc(self) -> Encoders:
        return self._encoders.get()

    def start(self) -> None:
        self.enc  # noqa: B018 - loads the encoders while the reader decodes

    def load(self, item: Item) -> Video:
        return item.image_bytes()

    def placement(self, width: int, height: int) -> Placement:
        if self.explicit is not None:
            w, h = self.explicit
            return Placement((w, h), None, w / h)
        b = bucket_for(width, height, self.choices)
        return Placement((b.width, b.height), b.id, b.aspect_ratio)

    def _decode(self, loaded: Loaded[Video]) -> Loaded[Video]:
        assert isinstance(loaded.payload, bytes)
        try:
            frames = cover_frames(loaded.payload, lambda w, h: self.placement(w, h).target,
                                  self.framing)
            audio = None if self.decode_audio is None else self.decode_audio(
                loaded.payload, len(frames.frames))
        except MediaError as e:
            return replace(loaded, payload=None, skip=e.reason, detail=str(e))
        return replace(loaded, payload=Placed(frames, self.placement(*frames.original), audio))

    def prepare(self, batch: list[Loaded[Video]]) -> list[Loaded[Video]]:
        t0 = time.perf_counter()
        prepared = each_unskipped(batch, self._decode, self._pool)
        self.stage_seconds["preprocess"] += time.perf_counter() - t0
        return prepared

    def prepared_bytes(self, batch: list[Loaded[Video]]) -> int:
        return sum(sum(f.nbytes for f in loaded.payload.frames.frames)
                   + (0 if loaded.payload.audio is None else loaded.payload.audio.nbytes)
                   for loaded in batch if isinstance(loaded.payload, Placed))

    def clips(self, video: Placed) -> list[np.ndarray]:
        """The video's clips [T, H, W, 3]: its frames as one, or each frame alone."""
        import numpy as np

        frames = video.frames.frames
        return [f[None] for f in frames] if self.frames_mode else [np.stack(frames)]

    def _text(self, captions: list[str]) -> dict[str, dict[str, torch.Tensor]]:
        distinct = list(dict.fromkeys(captions))
        out: dict[str, dict[str, torch.Tensor]] = {}
        for k in range(0, len(distinct), self.batch_size):
            chunk = distinct[k:k + self.batch_size]
            text = {name: t.cpu() for name, t in self.enc.encode_text(chunk).items()}
            for j, caption in enumerate(chunk):
                # a row of its own: saved as a view, it would carry its batch into the file
                out[caption] = {name: t[j].clone() for name, t in text.items()}
        return out

    def _sounds(self, videos: list[tuple[int, Placed]]) -> dict[int, dict[str, torch.Tensor]]:
        """Each video's audio tensors (none for a family without audio), by its index."""
        if self.decode_audio is None:
            return {}
        enc = cast(AudioEncoders, self.enc)
        return {n: enc.encode_audio(video.audio) for n, video in videos
                if video.audio is not None}

    def _first_frames(self, videos: list[tuple[int, Placed]]) -> dict[int, dict[str, Any]]:
        """Each video's first frame encoded (`image_embeds`), by its index; none in frames mode
        or for a family without `first_frame`."""
        if self.frames_mode or not self.automodel.first_frame or not videos:
            return {}
        enc = cast(FirstFrameEncoders, self.enc)
        embeds = enc.encode_first_frames([video.frames.frames[0] for _, video in videos]).cpu()
        return {n: {"image_embeds": embeds[j].clone()} for j, (n, _) in enumerate(videos)}

    def _file(self, item: Item, video: Placed, clip: int, latent: Any,
              text: dict[str, Any], sound: dict[str, Any]) -> Sample:
        """One cache file and its metadata entry, as the tool's `_process_video_*_mode`."""
        import torch

        from shardcook.encoders.models import CacheSample

        p, frames = video.placement, video.frames
        count = 1 if self.frames_mode else len(frames.frames)
        first = None if self.frames_mode else torch.from_numpy(frames.frames[0].copy())
        sample = CacheSample(
            latent=latent, text=text, path=item.source, prompt=item.caption or "",
            original_resolution=frames.original, bucket_resolution=p.target,
            crop_offset=(0, 0),  # AutoModel's video cache records no crop
            bucket_id=p.bucket_id, aspect_ratio=p.aspect_ratio,
            model_type=self.automodel.model_type,
            extra={"first_frame": first, "num_frames": count,
                   "deterministic": self.deterministic,
                   "mode": "frames" if self.frames_mode else "video",
                   "model_version": self.family.version, **sound})
        data = io.BytesIO()
        torch.save(self.build_cache(sample), data)
        entry: dict[str, object] = {
            "video_path": item.source, "bucket_resolution": list(p.target),
            "original_resolution": list(frames.original), "num_frames": count,
            "prompt": sample.prompt, "bucket_id": p.bucket_id, "aspect_ratio": p.aspect_ratio,
            "pixels": p.target[0] * p.target[1], "model_type": sample.model_type}
        if self.frames_mode:
            entry.update(frame_index=clip + 1, total_frames_extracted=len(frames.frames),
                         source_frame_index=frames.indices[clip])
        tail = f"frame{clip}" if self.frames_mode else str(count)
        meta = {"cache_name": cache_name(item.source, p, tail), "entry": entry}
        key = f"{item.key}_{clip:04d}" if self.frames_mode else item.key
        return key, [(CACHE_PART, data.getvalue()),
                     (ENTRY_PART, json.dumps(meta).encode("utf-8"))]

    def process(self, batch: list[Loaded[Video]]) -> list[Outcome]:
        outcomes, todo = split_skipped(batch)
        t0 = time.perf_counter()
        groups: dict[tuple[int, ...], list[tuple[int, int, np.ndarray]]] = {}
        for n in todo:
            for c, clip in enumerate(self.clips(placed(batch[n]))):
                groups.setdefault(clip.shape, []).append((n, c, clip))
        latents: dict[tuple[int, int], torch.Tensor] = {}
        for group in groups.values():
            for k in range(0, len(group), self.batch_size):
                chunk = group[k:k + self.batch_size]
                keys = [f"{batch[n].item.key}_{c:04d}" for n, c, _ in chunk]
                z = self.enc.encode_pixels([clip for *_, clip in chunk], keys).latents.cpu()
                latents.update(((n, c), z[j].clone()) for j, (n, c, _) in enumerate(chunk))
        texts = self._text([batch[n].item.caption or "" for n in todo])
        sounds = self._sounds([(n, placed(batch[n])) for n in todo])
        firsts = self._first_frames([(n, placed(batch[n])) for n in todo])
        t1 = time.perf_counter()
        self.stage_seconds["encode"] += t1 - t0
        for n in todo:
            item, video = batch[n].item, placed(batch[n])
            rows = [self._file(item, video, c, latents[(n, c)], texts[item.caption or ""],
                               {**sounds.get(n, {}), **firsts.get(n, {})})
                    for c in range(len(video.frames.frames) if self.frames_mode else 1)]
            outcomes[n] = Outcome(item, samples=rows)
        self.stage_seconds["serialize"] += time.perf_counter() - t1
        return completed(outcomes)
