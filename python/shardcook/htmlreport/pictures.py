"""Pictures for the page and for `preview`: a latent in false colour, a sample's media parts,
and any picture or media as an inline `data:` URI (the page loads nothing from anywhere)."""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING

from shardcook.layouts import IMAGE_PARTS
from shardcook.layouts.chatml import (
    AUDIO_EXTENSIONS,
    MULTI_IMAGE_PART,
    VIDEO_FILE_PART,
    VIDEO_FRAMES_PARTS,
    audio_part,
    load_jpgs,
    load_videos,
)

if TYPE_CHECKING:
    import numpy as np
    import torch
    from PIL import Image as PILImage

#: The longest side of a sample's picture on the page.
THUMB = 256
#: Image parts a sample may hold under any layout: raw's, then chatml's single image.
SINGLE_IMAGE_PARTS = (*IMAGE_PARTS, "image.jpg", "image.png")
#: A video file or audio part larger than this is named on the page, not embedded.
MEDIA_EMBED_BYTES = 1 << 20
#: Frames shown of a sample's first video.
FRAMES_SHOWN = 4
AUDIO_TYPES = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg"}


def false_colour(latent: torch.Tensor) -> np.ndarray:
    """[C, h, w] -> h*8 x w*8 RGB uint8 from channels 0..2 (fewer channels repeat), each channel
    stretched to its own min..max."""
    import numpy as np

    lat = latent.float().numpy()
    ch = [lat[min(i, lat.shape[0] - 1)] for i in range(3)]
    rgb = np.stack([(c - c.min()) / max(float(c.max() - c.min()), 1e-8) for c in ch], axis=-1)
    rgb = (rgb * 255).round().astype(np.uint8)
    return np.kron(rgb, np.ones((8, 8, 1), np.uint8))


def bytes_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def image_uri(img: PILImage.Image, side: int = THUMB) -> str:
    """`img` fitted into `side` x `side` (small ones enlarged, nearest: crisp) as a JPEG, or a
    PNG when small enough that JPEG's blur would hide its pixels."""
    from PIL import Image

    img = img.convert("RGB")
    k = side / max(img.size)
    img = img.resize((max(1, round(img.width * k)), max(1, round(img.height * k))),
                     Image.Resampling.NEAREST if k >= 1 else Image.Resampling.LANCZOS)
    out = io.BytesIO()
    if k >= 1:
        img.save(out, format="PNG", optimize=True)
        return bytes_uri(out.getvalue(), "image/png")
    img.save(out, format="JPEG", quality=85)
    return bytes_uri(out.getvalue(), "image/jpeg")


def open_image(data: bytes) -> PILImage.Image:
    """Stored image bytes as a loaded RGB picture (Pillow's decompression-bomb limit holds)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        rgb: PILImage.Image = img.convert("RGB")
    return rgb


def image_parts(parts: dict[str, bytes]) -> list[bytes]:
    """The stored bytes of a sample's images: its image part, or chatml's pickled list (read
    without loading any class)."""
    single = next((parts[p] for p in SINGLE_IMAGE_PARTS if p in parts), None)
    if single is not None:
        return [single]
    return load_jpgs(parts[MULTI_IMAGE_PART]) if MULTI_IMAGE_PART in parts else []


def video_frames(parts: dict[str, bytes]) -> list[bytes]:
    """The first frames of a sample's first video stored as JPEG frames."""
    name = next((p for p in VIDEO_FRAMES_PARTS if p in parts), None)
    videos = load_videos(parts[name], name) if name else []
    return videos[0][:FRAMES_SHOWN] if videos else []


def players(parts: dict[str, bytes]) -> list[tuple[str, str, str | None]]:
    """(element, part, data URI or None when too large) for a video file and audio parts."""
    found: list[tuple[str, str, str | None]] = []
    media = [("video", VIDEO_FILE_PART, "video/mp4")] + [
        ("audio", audio_part(ext), AUDIO_TYPES[ext]) for ext in AUDIO_EXTENSIONS]
    for element, part, mime in media:
        if part in parts:
            data = parts[part]
            found.append((element, part,
                           bytes_uri(data, mime) if len(data) <= MEDIA_EMBED_BYTES else None))
    return found
