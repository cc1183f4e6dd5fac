"""Clips for video encoders (`encode --layout wan`): a video's frames decoded one at a time
(PyAV), the frames a run keeps, each resized as Megatron-Bridge's Wan prep script resizes it as
it is decoded (the others dropped at once), and the bound on the pixels one video may give.

Resize (Bridge's `_calculate_resize_dimensions` / `_resize_frame`): by default the frame is
fitted inside the target keeping its aspect ratio (the side that overflows is matched, the other
truncated to an int: the frame may come out smaller than the target); `center_crop` matches the
short side instead, then crops the middle (padding with black when a side falls short);
`keep_aspect=False` stretches to the target. Bridge resizes with OpenCV; shardcook with Pillow,
whose filters of the same names antialias when shrinking, so a clip that is resized differs
from Bridge's in its low bits (a clip already at the target size is untouched by both).

Frames (`--video-mode frames --num-frames N`): those at `np.linspace(0, T-1, N, dtype=int)`,
each a 1-frame clip. `--video-mode video` keeps every frame, or every `stride`-th, at most
`max_frames` (shardcook's: Bridge encodes the whole clip). A video whose kept frames, resized,
hold more than `max_pixels` pixels is refused (`too_large`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcook.media import MediaError
from shardcook.media.video import open_video, rgb, video_stream

#: `--resize-mode` for video: Bridge's interpolation names.
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "area", "lanczos")


@dataclass(frozen=True)
class Framing:
    """How a clip becomes pixels: the target (None: the video's own size), the interpolation,
    Bridge's aspect and crop flags, and which frames."""

    target: tuple[int, int] | None
    interpolation: str = "bilinear"
    keep_aspect: bool = True
    center_crop: bool = False
    mode: str = "video"
    num_frames: int = 10
    max_frames: int | None = None
    stride: int = 1
    #: The most pixels (frames x height x width, resized) one video's clips may hold; None: any.
    max_pixels: int | None = None

    def settings(self) -> dict[str, object]:
        """Bridge's `resize_settings` json field."""
        return {"target_size": list(self.target) if self.target else None,
                "resize_mode": self.interpolation, "maintain_aspect_ratio": self.keep_aspect,
                "center_crop": self.center_crop}


def resize_dimensions(height: int, width: int, framing: Framing) -> tuple[int, int]:
    """(height, width) a frame is resized to before any crop (Bridge's rule)."""
    if framing.target is None:
        return height, width
    target_h, target_w = framing.target
    if not framing.keep_aspect:
        return target_h, target_w
    aspect = width / max(1, height)
    wider = aspect > target_w / max(1, target_h)
    if framing.center_crop:
        return (target_h, int(target_h * aspect)) if wider else (int(target_w / aspect), target_w)
    return (int(target_w / aspect), target_w) if wider else (target_h, int(target_h * aspect))


def resize_frame(frame: np.ndarray, framing: Framing) -> np.ndarray:
    """One H x W x 3 uint8 frame resized (and cropped or padded) by `framing`."""
    h, w = resize_dimensions(frame.shape[0], frame.shape[1], framing)
    if (h, w) != frame.shape[:2]:
        from PIL import Image

        filters = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC,
                   "nearest": Image.Resampling.NEAREST, "area": Image.Resampling.BOX,
                   "lanczos": Image.Resampling.LANCZOS}
        frame = np.asarray(Image.fromarray(frame).resize((w, h), filters[framing.interpolation]))
    if framing.target is None or not (framing.keep_aspect and framing.center_crop):
        return frame
    target_h, target_w = framing.target
    y0, x0 = max(0, (h - target_h) // 2), max(0, (w - target_w) // 2)
    frame = frame[y0:y0 + target_h, x0:x0 + target_w]
    pad_h, pad_w = target_h - frame.shape[0], target_w - frame.shape[1]
    if pad_h > 0 or pad_w > 0:
        frame = np.pad(frame, ((0, max(0, pad_h)), (0, max(0, pad_w)), (0, 0)))
    return frame


def frame_picks(total: int, framing: Framing) -> list[list[int]]:
    """The frame indices of each clip a video of `total` frames gives: one clip of all kept
    frames (`video`), or N 1-frame clips (`frames`).

    Raises:
        MediaError: no frames, or fewer than `--num-frames`.
    """
    if total < 1:
        raise MediaError("too_few_frames", "the video holds no frames")
    if framing.mode == "video":
        kept = list(range(0, total, framing.stride))
        return [kept[:framing.max_frames] if framing.max_frames else kept]
    if total < framing.num_frames:
        raise MediaError("too_few_frames", f"{total} frame(s), fewer than --num-frames "
                                           f"{framing.num_frames}")
    if framing.num_frames <= 1:
        return [[0]]
    return [[int(i)] for i in np.linspace(0, total - 1, framing.num_frames, dtype=int)]


def decode_frames(data: bytes, span: tuple[int, int] | None = None
                  ) -> Generator[Any, None, None]:
    """The frames of the video's first video stream (from `span`'s first to its last frame,
    inclusive, when given) as PyAV decoded frames, in decode order, one at a time: none is kept
    here, and the container is closed when the iterator is (`contextlib.closing`).

    Raises:
        MediaError: not a readable video.
    """
    import av

    first, last = span if span is not None else (0, None)
    container = open_video(data)
    try:
        stream = video_stream(container)
        for n, frame in enumerate(container.decode(stream)):
            if last is not None and n > last:
                break
            if n >= first:
                yield frame
    except av.error.FFmpegError as e:
        raise MediaError("video_decode_error", f"the video cannot be decoded ({e})") from None
    finally:
        container.close()


def frame_count(data: bytes, span: tuple[int, int] | None = None) -> int:
    """How many frames `decode_frames` gives (every one decoded, none kept)."""
    with closing(decode_frames(data, span)) as frames:
        return sum(1 for _ in frames)


@dataclass(frozen=True)
class Packets:
    """What a video's first stream says of itself without decoding."""

    #: The frames its packets hold: nearly always what decoding gives, which is checked.
    count: int
    #: Its average frame rate (OpenCV's `CAP_PROP_FPS`), else its guessed one; None for neither.
    rate: float | None


def packets(data: bytes) -> Packets:
    """The first video stream's packet count and frame rate, from one read of the container.

    Raises:
        MediaError: not a readable video.
    """
    import av

    container = open_video(data)
    try:
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate
        count = sum(1 for packet in container.demux(stream) if packet.size)
    except av.error.FFmpegError as e:
        raise MediaError("video_decode_error", f"the video cannot be decoded ({e})") from None
    finally:
        container.close()
    return Packets(count, float(rate) if rate else None)


def packet_count(data: bytes, span: tuple[int, int] | None = None) -> int:
    """How many frames the first video stream's packets say it holds (within `span`).

    Raises:
        MediaError: not a readable video.
    """
    count = packets(data).count
    first, last = span if span is not None else (0, None)
    return max(0, (count if last is None else min(count, last + 1)) - first)


def _kept(data: bytes, framing: Framing, span: tuple[int, int] | None,
          wanted: Callable[[int], bool], last: int | None) -> tuple[dict[int, np.ndarray], int]:
    """({n: frame n resized} for each frame n that is `wanted`, the number of frames decoded):
    each frame converted and resized as it is decoded and the others dropped, decoding stopped
    after frame `last` (None: the end).

    Raises:
        MediaError: not a readable video, or the kept frames hold more than
            `framing.max_pixels` pixels (`too_large`).
    """
    kept: dict[int, np.ndarray] = {}
    pixels = decoded = 0
    with closing(decode_frames(data, span)) as frames:
        for n, frame in enumerate(frames):
            decoded = n + 1
            if wanted(n):
                kept[n] = resized = resize_frame(rgb(frame), framing)
                h, w = resized.shape[:2]
                pixels += h * w
                if framing.max_pixels is not None and pixels > framing.max_pixels:
                    raise MediaError("too_large", _too_large(len(kept), h, w, framing))
            if n == last:
                break
    return kept, decoded


def _too_large(count: int, height: int, width: int, framing: Framing) -> str:
    smaller = "pass --height and --width" if framing.target is None else (
        "pass a smaller --height and --width")
    return (f"{count:,} frames of {height}x{width} already hold more than the "
            f"{framing.max_pixels:,} pixels one video may give the VAE; {smaller}"
            + (" or --max-frames" if framing.mode == "video" else "") + " to encode it")


def clips_of(data: bytes, framing: Framing, span: tuple[int, int] | None = None
             ) -> tuple[list[np.ndarray], list[list[int]]]:
    """(the resized frames a video's clips use, each clip's indices into them): each used frame
    is resized once as it is decoded, every other one dropped at once, and decoding stops after
    the last used frame, so a few frames of a long video never hold the whole video. The clips
    are those `frame_picks` gives for the number of frames the video decodes to; in frames mode
    that number is taken from the packets first and checked as the frames decode (another
    number: decoded again with it).

    Raises:
        MediaError: not a readable video, no frames, too few for `--num-frames`, too large.
    """
    if framing.mode == "video":
        last = None if framing.max_frames is None else (framing.max_frames - 1) * framing.stride
        kept, decoded = _kept(data, framing, span, lambda n: n % framing.stride == 0, last)
        picks = frame_picks(decoded, framing)
    else:
        guess = packet_count(data, span)
        picks = frame_picks(guess, framing) if guess >= max(1, framing.num_frames) else []
        used = {i for clip in picks for i in clip}
        kept, decoded = _kept(data, framing, span, used.__contains__, None) if picks else ({}, -1)
        if decoded != guess:  # the packets miscounted: the picks of the frames decoded
            picks = frame_picks(frame_count(data, span), framing)
            used = {i for clip in picks for i in clip}
            kept, _ = _kept(data, framing, span, used.__contains__, max(used))
    used_order = sorted({i for clip in picks for i in clip})
    order = {i: n for n, i in enumerate(used_order)}
    return [kept[i] for i in used_order], [[order[i] for i in clip] for clip in picks]
