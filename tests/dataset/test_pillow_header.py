"""The native core's header read of JPEG, PNG and WebP files (media metadata's fast path) gives
exactly what Pillow's `Image.open` reports, or nothing: on images of every mode and option
Pillow writes, on hand-made PNGs of every bit depth and colour type, and on damaged copies."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
from PIL import Image
from shardcook import _native

Facts = tuple[int, int, str, str]


def pillow(data: bytes) -> Facts | None:
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.width, image.height, str(image.format), image.mode
    except Exception:  # noqa: BLE001 - anything Pillow refuses
        return None


def saved(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def hand_png(depth: int, colour: int, *, extra: bytes = b"", w: int = 5, h: int = 3) -> bytes:
    """A PNG of any bit depth and colour type, as Pillow cannot write them all."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    row = 1 + (w * channels * depth + 7) // 8
    ihdr = struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 0)
    plte = chunk(b"PLTE", bytes(range(12))) if colour == 3 else b""
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + plte
            + chunk(b"IDAT", zlib.compress(bytes(row * h))) + chunk(b"IEND", b""))


def pillow_written() -> Iterator[tuple[str, bytes]]:
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, (37, 53, 3), dtype=np.uint8))
    rgba = rgb.convert("RGBA")
    rgba.putalpha(Image.fromarray(rng.integers(0, 256, (37, 53), dtype=np.uint8)))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: the size Pillow reports is the stored one
    icc = b"\0" * 128
    yield "jpeg rgb", saved(rgb, "JPEG")
    yield "jpeg progressive", saved(rgb, "JPEG", progressive=True, optimize=True)
    yield "jpeg grey", saved(rgb.convert("L"), "JPEG")
    yield "jpeg cmyk", saved(rgb.convert("CMYK"), "JPEG")
    yield "jpeg exif", saved(rgb, "JPEG", exif=exif)
    yield "jpeg icc", saved(rgb, "JPEG", icc_profile=icc)
    yield "jpeg comment dpi", saved(rgb, "JPEG", comment=b"hello", dpi=(300, 300))
    yield "jpeg subsampling", saved(rgb, "JPEG", subsampling=0, quality=100)
    yield "mpo", saved(rgb, "MPO", save_all=True, append_images=[rgb])
    for mode in ("1", "L", "P", "RGB", "RGBA", "LA", "I;16"):
        yield f"png {mode}", saved(rgb.convert(mode) if mode != "LA" else rgba.convert("LA"),
                                   "PNG")
    yield "png transparency", saved(rgb.convert("P"), "PNG", transparency=3)
    yield "png rgb transparency", saved(rgb, "PNG", transparency=(1, 2, 3))
    yield "png icc", saved(rgb, "PNG", icc_profile=icc)
    yield "png dpi", saved(rgb, "PNG", dpi=(72, 72))
    yield "png exif", saved(rgb, "PNG", exif=exif)
    yield "apng", saved(rgb, "PNG", save_all=True, append_images=[rgb.rotate(90)])
    yield "webp lossy", saved(rgb, "WEBP")
    yield "webp lossy alpha", saved(rgba, "WEBP")
    yield "webp lossless", saved(rgb, "WEBP", lossless=True)
    yield "webp lossless alpha", saved(rgba, "WEBP", lossless=True)
    yield "webp exif", saved(rgb, "WEBP", exif=exif)
    yield "webp icc", saved(rgba, "WEBP", icc_profile=icc, lossless=True)
    yield "webp animated", saved(rgb, "WEBP", save_all=True, append_images=[rgb.rotate(90)])
    yield "gif", saved(rgb, "GIF")


def hand_made() -> Iterator[tuple[str, bytes]]:
    for depth, colour in [(1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (8, 2), (16, 2), (1, 3),
                          (2, 3), (4, 3), (8, 3), (8, 4), (16, 4), (8, 6), (16, 6), (4, 2)]:
        yield f"png {depth}-bit type {colour}", hand_png(depth, colour)
    for kind, body in [(b"gAMA", b"\0\0\xb1\x8f"), (b"gAMA", b"\0"), (b"sRGB", b""),
                       (b"pHYs", b"\0" * 8), (b"cHRM", b"\0" * 31), (b"bKGD", b"\0\0"),
                       (b"tIME", b"\0" * 7), (b"tEXt", b"Title\0shardcook"), (b"priv", b"x"),
                       (b"tRNS", b"\0")]:
        yield f"png {kind.decode()} {len(body)}", hand_png(8, 2, extra=chunk(kind, body))
    yield "png grey tRNS short", hand_png(8, 0, extra=chunk(b"tRNS", b"\0"))
    good = hand_png(8, 2)
    yield "png bad IHDR crc", good[:29] + bytes([good[29] ^ 1]) + good[30:]


def damaged(data: bytes) -> Iterator[bytes]:
    """Truncations and single-byte changes across the header."""
    for cut in range(0, min(len(data), 400), 7):
        yield data[:cut]
    for at in range(2, min(len(data), 300)):
        for mask in (0x01, 0x10, 0x5A, 0xFF):
            yield data[:at] + bytes([data[at] ^ mask]) + data[at + 1:]


CASES = list(pillow_written()) + list(hand_made())


@pytest.mark.parametrize(("name", "data"), CASES, ids=[name for name, _ in CASES])
def test_the_header_read_is_pillows_answer_or_none(name: str, data: bytes) -> None:
    found = _native.pillow_header(data)
    if found is not None:
        assert found == pillow(data), name


def test_the_common_files_are_answered_natively() -> None:
    """The fast path is taken for the files most datasets hold, not left to Pillow."""
    answered = {name for name, data in CASES if _native.pillow_header(data) is not None}
    assert answered >= {"jpeg rgb", "jpeg progressive", "jpeg grey", "jpeg cmyk", "jpeg exif",
                        "jpeg icc", "png RGB", "png RGBA", "png P", "png L", "png 1",
                        "png transparency", "png dpi", "webp lossy", "webp lossy alpha",
                        "webp lossless", "webp lossless alpha", "webp exif"}
    assert not answered & {"mpo", "apng", "webp animated", "gif", "png 16-bit type 0"}


@pytest.mark.filterwarnings("ignore:.*:UserWarning")  # Pillow's on the damaged EXIF it reads
def test_damaged_files_are_pillows_answer_or_none() -> None:
    checked = 0
    for name, data in CASES:
        if _native.pillow_header(data) is None:
            continue
        for bad in damaged(data):
            found = _native.pillow_header(bad)
            if found is not None:
                assert found == pillow(bad), name
                checked += 1
    assert checked > 100  # many damaged copies still have a header the core reads
