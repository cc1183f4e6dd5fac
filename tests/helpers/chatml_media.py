"""Real media for the chatml tests: clips written with PyAV, audio written with soundfile, and a
decoder of the `videos`/`jpgs` parts equivalent to Megatron-Bridge's video handler."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
from PIL import Image

from tests.helpers.chatml import BytesOnly


def write_clip(path: Path, *, seconds: float, fps: int, size: tuple[int, int] = (48, 64),
               fmt: str = "mp4") -> Path:
    """A clip whose frame k is a flat grey of 4*k (so a decoded frame tells its index)."""
    import av

    codec = {"mp4": "libx264", "webm": "libvpx"}[fmt]
    h, w = size
    with av.open(str(path), "w", format=fmt) as c:
        s = c.add_stream(codec, rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for k in range(round(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(np.full((h, w, 3), min(4 * k, 255), np.uint8),
                                               format="rgb24")
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def write_audio(path: Path, *, seconds: float, rate: int = 16000) -> Path:
    """A 440 Hz tone (wav or flac by the suffix); zero seconds writes a file with no samples."""
    import soundfile

    t = np.arange(int(seconds * rate)) / rate
    soundfile.write(str(path), (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate)
    return path


def expected_timestamps(seconds: float, fps: float, max_frames: int) -> list[float]:
    """The grid times the fps/max-frames rule keeps for a clip of `seconds` (frames on the grid)."""
    wanted = math.ceil(seconds * fps - 1e-9)
    grid = [k / fps for k in range(wanted)]
    if wanted <= max_frames:
        return grid
    return [grid[round(j * (wanted - 1) / (max_frames - 1))] for j in range(max_frames)]


def bridge_decode_videos(data: bytes) -> list[list[np.ndarray]]:
    """A `videos` part as Bridge's video handler decodes it: a pickled list of videos of JPEG
    frames, each frame to an RGB array (restricted unpickler: a list of bytes needs no class)."""
    videos = BytesOnly(io.BytesIO(data)).load()
    return [[np.asarray(Image.open(io.BytesIO(f)).convert("RGB")) for f in v] for v in videos]
