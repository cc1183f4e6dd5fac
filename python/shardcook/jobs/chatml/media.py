"""`chatml`'s processor: each conversation's images, videos and audio into sample parts and the
media record of its conversation.json (docs/FORMAT.md, chatml).

Images and video frames are resized by the Rust image core within `--max-pixels` (keeping the
aspect ratio, never up) and encoded as JPEG (a single image per sample: `--image-format`).
Videos are kept as sampled frames or as the MP4 file's bytes (`--video-layout`); audio files are
stored unchanged. Samples are processed in parallel, one per thread.
"""

from __future__ import annotations

import io
import math
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardcook import imaging
from shardcook.config import ChatmlConfig, RunConfig
from shardcook.errors import SkipReason
from shardcook.jobs.images import classify_error
from shardcook.layouts import chatml as layout
from shardcook.media import MediaError, audio, video
from shardcook.pipeline.run import Loaded, Outcome, Processor, split_skipped
from shardcook.sources.base import Item
from shardcook.sources.chat import ChatItem

#: A conversation's media as read: each kind's files' bytes, in the record's order.
Media = dict[str, list[bytes]]


def bounded_size(height: int, width: int, max_pixels: int | None) -> tuple[int, int]:
    """(h, w) scaled down, keeping the aspect ratio, so that h * w <= max_pixels (never up)."""
    if max_pixels is None or height * width <= max_pixels:
        return height, width
    s = math.sqrt(max_pixels / (height * width))
    h, w = max(1, math.floor(height * s)), max(1, math.floor(width * s))
    while h * w > max_pixels:  # floating point can overshoot by one row
        if h >= w:
            h -= 1
        else:
            w -= 1
    return h, w


def _probe(data: bytes) -> tuple[int, int]:
    """(h, w) of an image after EXIF orientation, from its header (Pillow reads no pixels)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        w, h = im.size
        orientation = im.getexif().get(0x0112, 1)
    return (w, h) if orientation in (5, 6, 7, 8) else (h, w)


def bmp(rgb: np.ndarray) -> bytes:
    """An H×W×3 RGB array as an uncompressed top-down 24-bit BMP (what the image core reads
    without any decoding work)."""
    h, w, _ = rgb.shape
    row = 3 * w
    stride = row + (-row) % 4
    body = np.zeros((h, stride), np.uint8)
    body[:, :row] = rgb[:, :, ::-1].reshape(h, row)
    size = body.size
    header = struct.pack("<2sIHHI", b"BM", 54 + size, 0, 0, 54) + struct.pack(
        "<IiiHHIIiiII", 40, w, -h, 1, 24, 0, size, 2835, 2835, 0, 0)
    return header + body.tobytes()


class Skip(Exception):
    """One sample cannot be used: `reason` for report.json, the message as the detail."""

    def __init__(self, reason: SkipReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass
class Built:
    """One sample's parts so far and its media record for conversation.json."""

    parts: list[tuple[str, bytes]] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)


class ChatmlProcessor(Processor[Media]):
    """Loaded conversations (their media's bytes) -> (media parts, conversation.json) parts."""

    def __init__(self, cfg: RunConfig, images: str | None, video_layout: str | None,
                 audio_extension: str | None) -> None:
        self.image = cfg.image
        self.opts: ChatmlConfig = cfg.chatml or ChatmlConfig()
        self.images, self.video_layout, self.audio_extension = images, video_layout, audio_extension
        self.format: imaging.ImageFormat = "png" if (
            images == "single" and cfg.image.image_format == "png") else "jpg"
        self.workers = cfg.image.workers or os.cpu_count() or 1
        self.stage_seconds = {"preprocess": 0.0}
        self._pool = ThreadPoolExecutor(self.workers)

    def load(self, item: Item) -> Media:
        assert isinstance(item, ChatItem)  # the chat source's
        return item.read_media()

    def process(self, batch: list[Loaded[Media]]) -> list[Outcome]:
        outcomes, todo = split_skipped(batch)
        t0 = time.perf_counter()
        samples = self._pool.map(lambda n: self._sample(batch[n]), todo)
        for n, outcome in zip(todo, samples, strict=True):
            outcomes[n] = outcome
        self.stage_seconds["preprocess"] += time.perf_counter() - t0
        return [o for o in outcomes if o is not None]

    def _sample(self, loaded: Loaded[Media]) -> Outcome:
        item = loaded.item
        assert isinstance(item, ChatItem) and item.turns is not None
        media = loaded.payload or {}
        built = Built()
        try:
            self._images(media.get("image", []), built)
            self._videos(media.get("video", []), built)
            self._audio(media.get("audio", []), built)
        except Skip as e:
            return Outcome(item, skip=e.reason, detail=str(e))
        built.parts.append((layout.CONVERSATION_PART, layout.sample_json(item.turns, built.record)))
        return Outcome.of(item, built.parts, summed=built.totals)

    # ---- images ------------------------------------------------------------------------
    def _images(self, images: list[bytes], built: Built) -> None:
        encoded, sizes = [], []
        for j, data in enumerate(images):
            try:
                pixels = self._image(data)
                encoded.append(self._jpeg(pixels, self.format))
            except Skip as e:
                raise Skip(e.reason, f"image {j}: {e}") from None
            sizes.append((int(pixels.shape[0]), int(pixels.shape[1])))
        built.record["num_images"] = len(images)
        built.record["images"] = [_size_record(h, w) for h, w in sizes]
        built.totals.update(images=len(images), image_pixels=sum(h * w for h, w in sizes))
        if self.images == "single":
            built.parts.append((f"image.{self.format}", encoded[0]))
        elif self.images == "multi":
            built.parts.append((layout.MULTI_IMAGE_PART, layout.pickle_bytes_list(encoded)))

    def _image(self, data: bytes) -> np.ndarray:
        """One image decoded and resized by the image core within --max-pixels.

        Raises:
            Skip: unreadable or refused by the image core (its error kind is the reason).
        """
        try:
            h, w = bounded_size(*_probe(data), self.opts.max_pixels)
        except Exception as e:  # noqa: BLE001 - an unreadable header skips this sample
            raise Skip("decode_error", f"unreadable image header ({e})") from None
        for _ in range(2):
            (r,) = imaging.preprocess([data], mode="bucket", buckets=[(w, h)],
                                      max_pixels=self.image.max_pixels, workers=1)
            if r.error is not None or r.pixels is None or r.orig_size is None:
                raise Skip(classify_error(r.error_kind), r.error or "no pixels")
            pixels = r.pixels
            want = bounded_size(r.orig_size[0], r.orig_size[1], self.opts.max_pixels)
            if pixels.shape[:2] == want:
                break
            h, w = want  # the header probe saw another orientation than the decoder: redo
        return pixels

    def _jpeg(self, pixels: np.ndarray, fmt: imaging.ImageFormat = "jpg") -> bytes:
        """Pixels as `fmt` bytes at --image-quality.

        Raises:
            Skip: the encoder failed (`encode_error`).
        """
        try:
            return imaging.encode_image(pixels, format=fmt, quality=self.image.image_quality)
        except Exception as e:  # noqa: BLE001 - any encode failure skips just this sample
            raise Skip("encode_error", f"encode: {e}") from None

    # ---- videos ------------------------------------------------------------------------
    def _videos(self, videos: list[bytes], built: Built) -> None:
        if self.video_layout is None:
            return
        if self.video_layout == "mp4" and len(videos) != 1:
            raise Skip("video_count", f"--video-layout mp4 stores one video per sample; this one "
                                    f"has {len(videos)}")
        records: list[dict[str, Any]] = []
        stored: list[list[bytes]] = []
        for j, data in enumerate(videos):
            try:
                clip = video.probe(data)
                if self.video_layout == "mp4":
                    video.require_mp4(clip)
                    records.append({"frames": len(clip.pts),
                                    **_size_record(clip.height, clip.width),
                                    "duration": round(clip.duration, 6)})
                    continue
                frames, timestamps = self._frames(data, clip)
            except MediaError as e:
                raise Skip(e.reason, f"video {j}: {e}") from None
            h, w = bounded_size(clip.height, clip.width, self.opts.max_pixels)
            stored.append(frames)
            records.append({"frames": len(frames), **_size_record(h, w),
                            "timestamps": timestamps})
        built.record["num_videos"] = len(videos)
        built.record["num_frames"] = sum(r["frames"] for r in records)
        built.record["videos"] = records
        built.totals.update(videos=len(videos), frames=built.record["num_frames"],
                            frame_pixels=sum(r["frames"] * r["pixels"] for r in records))
        if self.video_layout == "mp4":
            built.parts.append((layout.VIDEO_FILE_PART, videos[0]))
        else:
            built.parts.append((self.opts.video_frames_part, layout.pickle_bytes_list(stored)))

    def _frames(self, data: bytes, clip: video.Clip) -> tuple[list[bytes], list[float]]:
        """The selected frames of one video as JPEG bytes, and their timestamps."""
        indices = video.select(clip, self.opts.video_fps, self.opts.max_frames)
        frames = video.decode(data, clip, indices)
        out = []
        for k, rgb in enumerate(frames):
            h, w = bounded_size(rgb.shape[0], rgb.shape[1], self.opts.max_pixels)
            if (h, w) != rgb.shape[:2]:
                (r,) = imaging.preprocess([bmp(rgb)], mode="bucket", buckets=[(w, h)],
                                          max_pixels=self.image.max_pixels, workers=1)
                if r.pixels is None:
                    raise Skip(classify_error(r.error_kind), f"frame {k}: {r.error}")
                rgb = r.pixels
            out.append(self._jpeg(rgb))
        return out, video.timestamps(clip, indices)

    # ---- audio -------------------------------------------------------------------------
    def _audio(self, clips: list[bytes], built: Built) -> None:
        if self.audio_extension is None:
            return
        if len(clips) != 1:
            raise Skip("audio_count", f"a sample of this dataset holds one audio file (field_map "
                                    f"audio: {layout.audio_part(self.audio_extension)}); this "
                                    f"one has {len(clips)}")
        try:
            info = audio.probe(clips[0])
        except MediaError as e:
            raise Skip(e.reason, f"audio 0: {e}") from None
        if info.extension != self.audio_extension:
            raise Skip("audio_format", f"audio 0 is {info.extension}; this dataset stores "
                                           f"{self.audio_extension} (its first audio file's)")
        built.record["audio"] = [info.record()]
        built.totals.update(audio=1)
        built.parts.append((layout.audio_part(info.extension), clips[0]))


def _size_record(height: int, width: int) -> dict[str, int]:
    return {"height": height, "width": width, "pixels": height * width}
