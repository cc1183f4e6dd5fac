"""Videos: their frame times (a demux pass, no decoding), the frames `--video-fps` and
`--max-frames` select, and those frames decoded (PyAV).

Selection: the clip's frames are sampled on a grid of `fps` per second from its first frame
(`t0 + k / fps`, k = 0 .. ceil(duration * fps) - 1); each grid time takes the first frame not
taken yet at or after it (half a source frame of tolerance). A clip that runs out of frames before
the grid ends has fewer frames than asked and is refused (frames are never repeated). When the
grid has more than `max_frames` times, `max_frames` of them are kept, evenly spread.
"""

from __future__ import annotations

import io
import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcook.media import MediaError


@dataclass(frozen=True)
class Clip:
    """What a demux pass finds: every frame's pts (presentation order) and its time base."""

    pts: list[int]
    time_base: float
    container: str
    height: int
    width: int

    @property
    def times(self) -> list[float]:
        return [p * self.time_base for p in self.pts]

    @property
    def duration(self) -> float:
        """From the first frame to the end of the last (one average frame interval after it)."""
        times = self.times
        step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
        return times[-1] - times[0] + step


def open_video(data: bytes) -> Any:  # an av container (PyAV's types are loose)
    """The container of the video in `data` (MediaError when it is none or holds no video)."""
    import av

    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.error.FFmpegError, ValueError, OSError) as e:
        raise MediaError("video_decode_error", f"not a readable video ({e})") from None
    if not container.streams.video:
        container.close()
        raise MediaError("video_decode_error", "the file holds no video stream")
    return container


def video_stream(container: Any) -> Any:
    """The container's first video stream, set to decode in the calling thread: the readers
    decode several videos at once, one per thread, and FFmpeg's own frame threads would add a
    thread start-up per video (more than decoding a small clip) for no gain in throughput."""
    stream = container.streams.video[0]
    stream.thread_type = "NONE"
    return stream


_reformatters = threading.local()


def rgb(frame: Any) -> np.ndarray:
    """A decoded frame as H×W×3 uint8 RGB, through this thread's reformatter: PyAV's
    `frame.to_ndarray(format=...)` builds a new swscale context for every frame, which costs
    more than decoding a small frame; a kept reformatter reuses its context while the frame's
    size and format stay the same. The pixels are the same either way."""
    reformatter = getattr(_reformatters, "reformatter", None)
    if reformatter is None:
        from av.video.reformatter import VideoReformatter

        reformatter = _reformatters.reformatter = VideoReformatter()
    return reformatter.reformat(frame, format="rgb24").to_ndarray()


def probe(data: bytes) -> Clip:
    """The frame times of a video's first video stream, from its packets (nothing decoded).

    Raises:
        MediaError: not a readable video, or no frames.
    """
    import av

    container = open_video(data)
    try:
        stream = container.streams.video[0]
        pts = sorted(p.pts for p in container.demux(stream) if p.pts is not None and p.size)
        clip = Clip(pts, float(stream.time_base), container.format.name,
                    stream.codec_context.height, stream.codec_context.width)
    except av.error.FFmpegError as e:
        raise MediaError("video_decode_error", f"the video cannot be read ({e})") from None
    finally:
        container.close()
    if not pts:
        raise MediaError("video_decode_error", "the video holds no frames")
    return clip


def select(clip: Clip, fps: float, max_frames: int) -> list[int]:
    """Indices (into `clip.pts`) of the frames to keep, by the rule in the module docstring.

    Raises:
        MediaError: the clip has fewer frames than the grid asks for.
    """
    times = clip.times
    t0, n = times[0], len(times)
    wanted = max(1, math.ceil(clip.duration * fps - 1e-9))
    tolerance = 0.5 * clip.duration / n
    picked: list[int] = []
    i = 0
    for k in range(wanted):
        target = t0 + k / fps - tolerance
        while i < n and times[i] < target:
            i += 1
        if i == n:
            raise MediaError(
                "too_few_frames",
                f"{n} frame(s) over {clip.duration:.3f} s give {len(picked)} of the {wanted} "
                f"frames --video-fps {fps:g} asks for")
        picked.append(i)
        i += 1
    if wanted <= max_frames:
        return picked
    if max_frames == 1:
        return [picked[0]]
    return [picked[round(j * (wanted - 1) / (max_frames - 1))] for j in range(max_frames)]


def timestamps(clip: Clip, indices: list[int]) -> list[float]:
    """Seconds from the clip's first frame of the frames at `indices` (rounded to microseconds)."""
    times = clip.times
    return [round(times[i] - times[0], 6) for i in indices]


def decode(data: bytes, clip: Clip, indices: list[int]) -> list[np.ndarray]:
    """The frames at `indices` of `clip` as H×W×3 uint8 RGB arrays, in order.

    Raises:
        MediaError: decoding fails or a selected frame never comes out of the decoder.
    """
    import av

    wanted = {clip.pts[i]: j for j, i in enumerate(indices)}
    frames: list[np.ndarray | None] = [None] * len(indices)
    container = open_video(data)
    try:
        stream = video_stream(container)
        last = max(wanted)
        for frame in container.decode(stream):
            j = wanted.get(frame.pts)
            if j is not None:
                frames[j] = rgb(frame)
            if frame.pts is not None and frame.pts >= last and all(f is not None for f in frames):
                break
    except av.error.FFmpegError as e:
        raise MediaError("video_decode_error", f"the video cannot be decoded ({e})") from None
    finally:
        container.close()
    missing = sum(f is None for f in frames)
    if missing:
        raise MediaError("video_decode_error", f"{missing} selected frame(s) did not decode")
    return [f for f in frames if f is not None]


def require_mp4(clip: Clip) -> None:
    """Raises MediaError unless the clip's container is MP4 (stored as `video.mp4` unchanged)."""
    if "mp4" not in clip.container.split(","):
        raise MediaError("not_mp4", f"the video is {clip.container}, not MP4; "
                                  "--video-layout mp4 stores MP4 files only")
