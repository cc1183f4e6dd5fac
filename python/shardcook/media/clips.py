"""Clips for video encoders (`encode --layout wan`): every frame of a video decoded (PyAV), the
frames a run keeps, and each resized as Megatron-Bridge's Wan prep script resizes it.

Resize (Bridge's `_calculate_resize_dimensions` / `_resize_frame`): by default the frame is
fitted inside the target keeping its aspect ratio (the side that overflows is matched, the other
truncated to an int: the frame may come out smaller than the target); `center_crop` matches the
short side instead, then crops the middle (padding with black when a side falls short);
`keep_aspect=False` stretches to the target. Bridge resizes with OpenCV; shardcook with Pillow,
whose filters of the same names antialias when shrinking, so a clip that is resized differs
from Bridge's in its low bits (a clip already at the target size is untouched by both).

Frames (`--video-mode frames --num-frames N`): those at `np.linspace(0, T-1, N, dtype=int)`,
each a 1-frame clip. `--video-mode video` keeps every frame, or every `stride`-th, at most
`max_frames` (shardcook's: Bridge encodes the whole clip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcook.media import MediaError
from shardcook.media.video import _open, rgb, video_stream

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


def decode_frames(data: bytes, span: tuple[int, int] | None = None) -> list[Any]:
    """Every frame of the video's first video stream (from `span`'s first to its last frame,
    inclusive, when given) as PyAV decoded frames, in decode order: `rgb` turns the ones a run
    keeps into pixels (in `frames` mode, a few of many).

    Raises:
        MediaError: not a readable video.
    """
    import av

    first, last = span if span is not None else (0, None)
    frames: list[Any] = []
    container = _open(data)
    try:
        stream = video_stream(container)
        for n, frame in enumerate(container.decode(stream)):
            if last is not None and n > last:
                break
            if n >= first:
                frames.append(frame)
    except av.error.FFmpegError as e:
        raise MediaError("video_decode_error", f"the video cannot be decoded ({e})") from None
    finally:
        container.close()
    return frames


def clips_of(data: bytes, framing: Framing, span: tuple[int, int] | None = None
             ) -> tuple[list[np.ndarray], list[list[int]]]:
    """(the resized frames a video's clips use, each clip's indices into them): every kept
    frame is decoded and resized once.

    Raises:
        MediaError: not a readable video, no frames, too few for `--num-frames`.
    """
    frames = decode_frames(data, span)
    picks = frame_picks(len(frames), framing)
    used = sorted({i for clip in picks for i in clip})
    resized = {i: resize_frame(rgb(frames[i]), framing) for i in used}
    order = {i: n for n, i in enumerate(used)}
    return [resized[i] for i in used], [[order[i] for i in clip] for clip in picks]
