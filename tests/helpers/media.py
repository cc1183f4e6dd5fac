"""Small media files of every kind Energon records media metadata for: images (JPEG, PNG, WebP
of several sizes and modes, EXIF-rotated, a PNG named .jpg, a garbage .jpg), video (mp4 with
audio, webm, mkv) and audio (wav, flac, mp3, ogg), written with Pillow and PyAV; the real
`energon` command run in this process, and the media tables' rows it or finalize wrote."""

from __future__ import annotations

import contextlib
import io
import sqlite3
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image


def image(size: tuple[int, int], fmt: str, mode: str = "RGB", orientation: int | None = None,
          **save: object) -> bytes:
    """An image of `size` in `fmt`, with an EXIF orientation tag when given."""
    w, h = size
    pixels = (np.arange(w * h * len(mode), dtype=np.uint32) % 251).astype(np.uint8)
    picture = Image.frombytes(mode, size, pixels.tobytes()) if mode in ("RGB", "RGBA", "L") \
        else Image.new(mode, size)
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        save["exif"] = exif.tobytes()
    out = io.BytesIO()
    picture.save(out, fmt, **save)
    return out.getvalue()


def _mux(fmt: str, video: str | None, audio: str | None, frames: int = 5,
         size: tuple[int, int] = (48, 32), rate: int = 8000, seconds: float = 0.3) -> bytes:
    """A file of container `fmt` with a video stream of codec `video` (`frames` frames) and/or
    an audio stream of codec `audio` (a tone of `seconds`)."""
    out = io.BytesIO()
    with av.open(out, "w", format=fmt) as container:
        streams = []
        if video:
            vs = container.add_stream(video, rate=10)
            vs.width, vs.height = size
            vs.pix_fmt = "yuv420p"
            for i in range(frames):
                pixels = np.full((size[1], size[0], 3), i * 40 % 256, dtype=np.uint8)
                frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
                streams.append((vs, frame))
        if audio:
            as_ = container.add_stream(audio, rate=rate)
            as_.layout = "mono"
            n = int(rate * seconds)
            tone = (np.sin(np.arange(n) / 5) * 0.3).astype(np.float32)
            fmt_name = as_.codec_context.codec.audio_formats[0].name
            chunk = as_.codec_context.frame_size or 1024
            for start in range(0, n, chunk):
                part = tone[start:start + chunk]
                frame = av.AudioFrame.from_ndarray(part[None, :], format="flt", layout="mono")
                frame.sample_rate = rate
                frame.pts = start
                frame.time_base = Fraction(1, rate)
                if fmt_name != "flt":
                    frame = av.AudioResampler(format=fmt_name, layout="mono",
                                              rate=rate).resample(frame)[0]
                streams.append((as_, frame))
        for stream, frame in streams:
            for packet in stream.encode(frame):
                container.mux(packet)
        for stream in {id(s): s for s, _ in streams}.values():
            for packet in stream.encode(None):
                container.mux(packet)
    return out.getvalue()


def media_files() -> dict[str, bytes]:
    """File name (the part name in a shard) to content: one file of each case."""
    return {
        "small.jpg": image((64, 48), "JPEG"),
        "wide.jpeg": image((120, 20), "JPEG", quality=50),
        "gray.jpg": image((33, 17), "JPEG", mode="L"),
        "rotated.jpg": image((40, 30), "JPEG", orientation=6),
        "flipped.jpg": image((40, 30), "JPEG", orientation=3),
        "photo.png": image((50, 70), "PNG"),
        "alpha.png": image((21, 13), "PNG", mode="RGBA"),
        "palette.png": image((16, 16), "PNG", mode="P"),
        "rotated.png": image((30, 40), "PNG", orientation=8),
        "pic.webp": image((44, 28), "WEBP"),
        "alpha.webp": image((12, 9), "WEBP", mode="RGBA", lossless=True),
        "rotated.webp": image((30, 20), "WEBP", orientation=6),
        "anim.gif": image((10, 12), "GIF", mode="L"),
        "png-named.jpg": image((25, 15), "PNG"),
        "garbage.jpg": b"this is not an image at all",
        "garbage.mp4": b"\x00\x00\x00 not a video either" * 4,
        "clip.mp4": _mux("mp4", "libx264", "aac"),
        "mute.mp4": _mux("mp4", "mpeg4", None, frames=7),
        "clip.webm": _mux("webm", "libvpx", "libopus", rate=48000),
        "tone.wav": _mux("wav", None, "pcm_s16le"),
        "tone.flac": _mux("flac", None, "flac", rate=16000),
        "tone.mp3": _mux("mp3", None, "libmp3lame", rate=22050),
        "tone.ogg": _mux("ogg", None, "libopus", rate=48000),
        "clip.mkv": _mux("matroska", "libx264", "flac", rate=16000),
        "notes.txt": b"a caption",
        "data.json": b'{"i": 1}',
        "jpg-named.bin": image((8, 8), "JPEG"),
        "UPPER.JPG": image((9, 7), "JPEG"),
    }


def energon(*args: object) -> None:
    """The real `energon ARGS`, in this process."""
    from click.testing import CliRunner
    from megatron.energon.cli.main import main as energon_main

    r = CliRunner().invoke(energon_main, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output


def media_rows(root: Path) -> dict[str, list[tuple]]:
    """Each media table's rows (media_filters' without created_at_utc)."""
    with contextlib.closing(sqlite3.connect(root / ".nv-meta" / "index.sqlite")) as db:
        return {
            "media_metadata": db.execute(
                "SELECT * FROM media_metadata ORDER BY entry_key").fetchall(),
            "media_filters": db.execute(
                "SELECT filter_id, strategy, patterns FROM media_filters ORDER BY filter_id"
            ).fetchall(),
        }
