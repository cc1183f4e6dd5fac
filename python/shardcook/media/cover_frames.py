"""A video's frames as NeMo AutoModel's video tool takes them (`encode --layout automodel` for
Wan, LTX-2): decoded one at a time (PyAV, `clips.decode_frames`: the same RGB pixels as its
OpenCV capture), the frames at `np.linspace(0, T-1, N).astype(int)` when the video holds more
than N (else all; with `repeat`, HunyuanVideo-1.5's, exactly N, a shorter video's
repeating), or, at a fixed rate (LTX-2's 24 fps), the frame nearest each of N instants
from t=0; each resized with OpenCV to cover the target and centre-cropped (or stretched to
it) as it is decoded. OpenCV's resize, not Pillow's: Pillow antialiases when it shrinks, and
the cache is to hold what AutoModel's tool stores, value for value."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

import numpy as np

from shardcook.errors import ConfigError
from shardcook.media import MediaError
from shardcook.media.clips import decode_frames, packets
from shardcook.media.video import rgb

#: A target (width, height) for a video of (width, height).
Target = Callable[[int, int], tuple[int, int]]


def require_opencv() -> None:
    """ConfigError in one sentence when OpenCV is not installed."""
    try:
        import cv2  # noqa: F401
    except ImportError:
        raise ConfigError("--layout automodel resizes video frames with OpenCV, as "
                          "AutoModel's tool does; install it with pip install "
                          "'shardcook[automodel]'.") from None


@dataclass(frozen=True)
class CoverFraming:
    """How frames become pixels: how many (N), the interpolation (`--resize-mode`), crop or
    stretch, the most pixels one video's kept frames may hold, and the rate N frames are taken
    at from t=0 (None: evenly spread)."""

    num_frames: int
    interpolation: str = "bilinear"
    center_crop: bool = True
    max_pixels: int | None = None
    rate: float | None = None
    #: Exactly N frames evenly spread, repeating frames of a shorter video (HunyuanVideo's
    #: `adjust_frame_count`), rather than at most N.
    repeat: bool = False


@dataclass(frozen=True)
class CoverFrames:
    """The frames kept, resized [H, W, 3] uint8, their indices in the video, the video's own
    (width, height) and the target (width, height)."""

    frames: list[np.ndarray]
    indices: list[int]
    original: tuple[int, int]
    target: tuple[int, int]


def picks(total: int, wanted: int, repeat: bool = False) -> list[int]:
    """The tool's frame indices of a video of `total` frames: `wanted` of them evenly spread,
    or all of a shorter video; with `repeat`, `wanted` of a shorter one too, some repeated."""
    if wanted < total or (repeat and total):
        return [int(i) for i in np.linspace(0, total - 1, wanted).astype(int)]
    return list(range(total))


def retimed(total: int, fps: float, wanted: int, rate: float) -> list[int]:
    """LTX-2's frame indices (`LTX2Processor.load_video`) of a video of `total` frames at `fps`:
    the frame nearest each of `wanted` instants `1 / rate` apart from t=0 (a frame repeats when
    the video's rate is lower).

    Raises:
        MediaError: the video is shorter than the instants span.
    """
    if total / fps < wanted / rate:
        raise MediaError("too_few_frames", (
            f"the video lasts {total / fps:.2f} s, shorter than the {wanted / rate:.2f} s "
            f"{wanted} frames at {rate:g} fps span"))
    indices = np.clip(np.round(np.arange(wanted) * (fps / rate)).astype(int), 0, total - 1)
    return [int(i) for i in indices]


def cover(frame: np.ndarray, target: tuple[int, int], framing: CoverFraming) -> np.ndarray:
    """One frame resized as the tool's `load_video_frames` does: scaled to cover `target`
    (each side truncated), then its middle cropped; without `center_crop`, stretched."""
    import cv2

    interpolation = {"bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC,
                     "nearest": cv2.INTER_NEAREST, "area": cv2.INTER_AREA,
                     "lanczos": cv2.INTER_LANCZOS4}[framing.interpolation]
    width, height = target
    h, w = frame.shape[:2]
    if not framing.center_crop:
        resized: np.ndarray = cv2.resize(frame, (width, height), interpolation=interpolation)
        return resized
    scale = max(width / w, height / h)
    new_w, new_h = int(w * scale), int(h * scale)
    resized = cv2.resize(frame, (new_w, new_h), interpolation=interpolation)
    x0, y0 = (new_w - width) // 2, (new_h - height) // 2
    return np.ascontiguousarray(resized[y0:y0 + height, x0:x0 + width])


def _kept(data: bytes, wanted: set[int], target_of: Target, framing: CoverFraming,
          last: int | None) -> tuple[dict[int, np.ndarray], int, tuple[int, int]]:
    """({n: frame n resized} for each wanted n, frames decoded, the video's (width, height));
    decoding stops after frame `last` (None: the end)."""
    kept: dict[int, np.ndarray] = {}
    decoded, size, target, pixels = 0, (0, 0), (0, 0), 0
    with closing(decode_frames(data)) as frames:
        for n, frame in enumerate(frames):
            decoded = n + 1
            if n == 0:
                size = (frame.width, frame.height)
                target = target_of(*size)
            if n in wanted:
                kept[n] = cover(rgb(frame), target, framing)
                pixels += target[0] * target[1]
                if framing.max_pixels is not None and pixels > framing.max_pixels:
                    raise MediaError("too_large", (
                        f"{len(kept):,} frames of {target[0]}x{target[1]} already hold more "
                        f"than the {framing.max_pixels:,} pixels one video may give the VAE; "
                        "pass a smaller --num-frames or pixel budget to encode it"))
            if n == last:
                break
    return kept, decoded, size


def cover_frames(data: bytes, target_of: Target, framing: CoverFraming) -> CoverFrames:
    """The frames the tool takes of the video in `data`, resized to `target_of(width, height)`
    of its own size. The frame count comes from the packets (the container's count, which the
    tool reads); when decoding gives another, the picks are those of the frames decoded.

    Raises:
        MediaError: not a readable video, no frames, too short for `framing.rate`, or too
            large.
    """
    stream = packets(data)
    total = stream.count
    if framing.rate is None:
        def chosen(count: int) -> list[int]:
            return picks(count, framing.num_frames, framing.repeat)
    else:
        rate = framing.rate
        fps = stream.rate or rate  # AutoModel takes a video without one as at its rate

        def chosen(count: int) -> list[int]:
            return retimed(count, fps, framing.num_frames, rate)
    wanted = chosen(total)
    kept, decoded, size = _kept(data, set(wanted), target_of, framing, None)
    if decoded != total:
        wanted = chosen(decoded)
        kept, _, size = _kept(data, set(wanted), target_of, framing,
                              max(wanted) if wanted else None)
    if not wanted:
        raise MediaError("too_few_frames", "the video holds no frames")
    return CoverFrames([kept[i] for i in wanted], wanted, size, target_of(*size))
