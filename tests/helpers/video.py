"""Generated video clips for the video encode tests (PyAV, several containers and codecs), and
the tiny Wan encoders are the `tiny_wan` fixture in tests/conftest.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: The clips' size: already the target size of the tests' runs.
H, W = 48, 80

#: (file name, codec, frames): every container and codec the folder tests hold.
CLIPS = (("clip_a.mp4", "libx264", 9), ("clip_b.mp4", "mpeg4", 5), ("clip_c.webm", "libvpx", 9),
         ("clip_d.mkv", "ffv1", 6), ("clip_e.mov", "mjpeg", 9))


def frames(n: int, h: int = H, w: int = W, *, seed: int = 0) -> np.ndarray:
    """`n` frames [n, h, w, 3] uint8: a gradient with a square moving across it."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(1, w - 1), y * 255 // max(1, h - 1),
                     np.full_like(x, rng.integers(0, 255))], axis=-1).astype(np.uint8)
    out = np.repeat(base[None], n, axis=0)
    for t in range(n):
        x0 = (t * 7 + int(rng.integers(0, 8))) % max(1, w - 12)
        out[t, 10:22, x0:x0 + 12] = rng.integers(0, 255, 3)
    return out


def write_clip(path: Path, n: int, codec: str = "libx264", h: int = H, w: int = W, *,
               seed: int = 0) -> Path:
    """A clip of `n` generated frames at 8 fps (`n = 0`: a container holding no frame, which
    FFmpeg reads as holding no video stream)."""
    import av

    pix = {"ffv1": "yuv444p", "mjpeg": "yuvj420p"}.get(codec, "yuv420p")
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=8)
        stream.width, stream.height, stream.pix_fmt = w, h, pix
        container.start_encoding()  # the header, even with no frame to follow
        for f in frames(n, h, w, seed=seed):
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def video_folder(root: Path, clips=CLIPS) -> list[tuple[str, str]]:
    """Clips with same-stem `.json` captions (Bridge's convention); [(path, caption)] in the
    order shardcook and Bridge's script read them (sorted names)."""
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (name, codec, n) in enumerate(clips):
        path = write_clip(root / name, n, codec, seed=i)
        caption = f"a  red square &amp; clip {i}" if i % 2 else f"a blue square in clip {i}"
        path.with_suffix(".json").write_text(json.dumps({"caption": caption}), encoding="utf-8")
        out.append((str(path), caption))
    return sorted(out)
