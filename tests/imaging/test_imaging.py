"""shardcook.imaging against Pillow doing the same steps, on scikit-image's real photos.

Every case re-saves a photo in one format/orientation, then compares `preprocess` with Pillow's
`exif_transpose` → RGB (alpha over white) → `resize(target, LANCZOS, box=box)` using the same
geometry. The bar is PSNR ≥ 38 dB for every mode at 256, 512 and 1024.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from functools import cache

import numpy as np
import pytest
import skimage.data
from PIL import Image, ImageOps
from shardcook import imaging
from shardcook.errors import ImageError, ShardcookError

from tests.helpers.bounded import run_bounded

SIZES = (256, 512, 1024)
MODES = ("crop", "stretch", "variable", "bucket")


# ---------------------------------------------------------------- photos and encoders


@cache
def photo(name: str) -> np.ndarray:
    a = getattr(skimage.data, name)()
    return np.ascontiguousarray(a[..., :3]) if a.ndim == 3 else np.stack([a] * 3, -1)


@cache
def big_photo() -> np.ndarray:
    """A 2400×1600 mosaic of four real photos (big enough for 1/2 to 1/8 DCT-scaled decoding)."""
    tiles = [photo(n) for n in ("astronaut", "coffee", "chelsea", "rocket")]
    tiles = [np.asarray(Image.fromarray(t).resize((1200, 800), Image.LANCZOS)) for t in tiles]
    return np.vstack([np.hstack(tiles[:2]), np.hstack(tiles[2:])])


def save(image: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **kw)
    return buf.getvalue()


def exif_bytes(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def png_bytes(a: np.ndarray, *, interlace: bool = False) -> bytes:
    """A PNG written by hand: gray/RGB/RGBA, 8 or 16 bit, optionally Adam7-interlaced (Pillow
    writes neither 16-bit RGB nor interlaced PNGs)."""
    a = a if a.ndim == 3 else a[..., None]
    h, w, c = a.shape
    depth = 16 if a.dtype == np.uint16 else 8
    color = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    be = a.astype(">u2") if depth == 16 else a

    def rows(img: np.ndarray) -> bytes:
        return b"".join(b"\0" + img[y].tobytes() for y in range(img.shape[0]))

    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                  (1, 0, 2, 2), (0, 1, 1, 2)]  # fmt: skip
        raw = b"".join(
            rows(be[y0::dy, x0::dx]) for x0, y0, dx, dy in passes if be[y0::dy, x0::dx].size
        )
    else:
        raw = rows(be)

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 1 if interlace else 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def with_alpha(a: np.ndarray) -> np.ndarray:
    """Adds a real alpha channel: a radial fade, fully transparent in the corners."""
    h, w = a.shape[:2]
    y, x = np.mgrid[0:h, 0:w]
    r = np.hypot((x - w / 2) / (w / 2), (y - h / 2) / (h / 2))
    alpha = np.clip((1.3 - r) * 255, 0, 255).astype(np.uint8)
    return np.dstack([a, alpha])


def make_case(case: str) -> tuple[bytes, np.ndarray | None]:
    """(encoded bytes, optional 8-bit RGB(A) image the reference should start from)."""
    rgb = photo("astronaut") if "big" not in case else big_photo()
    for prefix, make in (("jpeg", jpeg_case), ("png", png_case), ("webp", webp_case)):
        if case.startswith(prefix):
            return make(case, rgb)
    return other_format_case(case, rgb)


def jpeg_case(case: str, rgb: np.ndarray) -> tuple[bytes, np.ndarray | None]:
    im = Image.fromarray(rgb)
    if case in ("jpeg", "jpeg_big"):
        return save(im, "JPEG", quality=92), None
    if case == "jpeg_big_portrait":  # the rows below the box are never decoded
        return save(im.transpose(Image.TRANSPOSE), "JPEG", quality=92), None
    if case == "jpeg_progressive":
        return save(im, "JPEG", quality=92, progressive=True), None
    if case == "jpeg_gray":
        return save(im.convert("L"), "JPEG", quality=92), None
    if case == "jpeg_cmyk":  # Pillow writes CMYK JPEGs as Adobe YCCK
        return save(im.convert("CMYK"), "JPEG", quality=92), None
    if case.startswith("jpeg_exif"):
        o = int(case[-1])
        src = Image.fromarray(photo("coffee"))  # not square: orientation changes the geometry
        return save(src, "JPEG", quality=92, exif=exif_bytes(o)), None
    raise AssertionError(case)


def png_case(case: str, rgb: np.ndarray) -> tuple[bytes, np.ndarray | None]:
    im = Image.fromarray(rgb)
    if case == "png":
        return save(im, "PNG"), None
    if case == "png_exif6":
        return save(Image.fromarray(photo("coffee")), "PNG", exif=exif_bytes(6)), None
    if case == "png16_rgb":
        return png_bytes(rgb.astype(np.uint16) * 257), rgb
    if case == "png16_gray":
        gray = np.asarray(im.convert("L"))
        return png_bytes(gray.astype(np.uint16) * 257), np.stack([gray] * 3, -1)
    if case == "png_palette_trns":
        p = Image.fromarray(photo("chelsea")).quantize(64)
        return save(p, "PNG", transparency=0), None
    if case == "png_rgba":
        return save(Image.fromarray(with_alpha(rgb)), "PNG"), None
    if case == "png_interlaced":
        return png_bytes(rgb, interlace=True), rgb
    raise AssertionError(case)


def webp_case(case: str, rgb: np.ndarray) -> tuple[bytes, np.ndarray | None]:
    if case in ("webp", "webp_big"):  # big: decoded at 1/2-1/4 scale by libwebp's rescaler
        return save(Image.fromarray(rgb), "WEBP", quality=92), None
    if case == "webp_lossless":
        return save(Image.fromarray(rgb), "WEBP", lossless=True), None
    if case == "webp_alpha":
        return save(Image.fromarray(with_alpha(rgb)), "WEBP", quality=92), None
    if case == "webp_exif8":
        return save(Image.fromarray(photo("coffee")), "WEBP", quality=92, exif=exif_bytes(8)), None
    raise AssertionError(case)


def other_format_case(case: str, rgb: np.ndarray) -> tuple[bytes, np.ndarray | None]:
    """GIF, BMP and TIFF: decoded whole, the astronaut as each format saves it."""
    formats = {"gif": "GIF", "bmp": "BMP", "tiff": "TIFF"}
    if case not in formats:
        raise AssertionError(case)
    return save(Image.fromarray(rgb), formats[case]), None


CASES = [
    "jpeg", "jpeg_big", "jpeg_big_portrait", "jpeg_progressive", "jpeg_gray", "jpeg_cmyk",
    *[f"jpeg_exif{o}" for o in range(1, 9)],
    "png", "png_exif6", "png16_rgb", "png16_gray", "png_palette_trns", "png_rgba",
    "png_interlaced", "webp", "webp_big", "webp_lossless", "webp_alpha", "webp_exif8",
    "gif", "bmp", "tiff",
]  # fmt: skip


def pillow_rgb(data: bytes) -> Image.Image:
    """What Pillow decodes: orientation applied, RGB, alpha composited over white."""
    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    if im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return im.convert("RGB")


def reference(image: Image.Image, mode: str, size: int) -> tuple[np.ndarray, imaging.Geometry]:
    g = imaging.geometry(image.width, image.height, mode=mode, size=size, max_size=size)
    return np.asarray(image.resize(g.size, Image.LANCZOS, box=g.box)), g


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


# ---------------------------------------------------------------- fidelity


@pytest.mark.parametrize("case", CASES)
def test_matches_pillow_in_every_mode_and_size(case):
    data, source = make_case(case)
    image = Image.fromarray(source).convert("RGB") if source is not None else pillow_rgb(data)
    for size in SIZES:
        for mode in MODES:
            (r,) = imaging.preprocess([data], size=size, mode=mode, max_size=size, workers=1)
            assert r.error is None, r.error
            want, g = reference(image, mode, size)
            assert r.pixels.shape == (g.size[1], g.size[0], 3)
            assert r.pixels.dtype == np.uint8
            assert r.orig_size == (image.height, image.width)
            assert r.crop == g.crop
            q = psnr(r.pixels, want)
            assert q >= 38.0, f"{case} {mode} {size}: {q:.1f} dB"


def test_orientation_is_applied_not_ignored():
    """Orientation 6 must differ from 1 (a test that checks only PSNR to an also-rotated
    reference would pass if both ignored the tag)."""
    d1, _ = make_case("jpeg_exif1")
    d6, _ = make_case("jpeg_exif6")
    r1, r6 = imaging.preprocess([d1, d6], mode="stretch", size=128)
    assert r1.orig_size == (400, 600) and r6.orig_size == (600, 400)
    rotated = np.rot90(r1.pixels, k=-1)  # orientation 6 = rotate 90° clockwise
    assert psnr(r6.pixels, rotated) > 30
    assert psnr(r6.pixels, r1.pixels) < 20


def test_alpha_is_composited_over_white():
    rgba = np.zeros((64, 64, 4), np.uint8)  # fully transparent black
    for data in (
        save(Image.fromarray(rgba), "PNG"),
        save(Image.fromarray(rgba), "WEBP", lossless=True),
    ):
        (r,) = imaging.preprocess([data], size=32)
        assert r.error is None and (r.pixels == 255).all()


# ---------------------------------------------------------------- inputs and errors


def test_inputs_may_be_bytes_buffers_or_paths(tmp_path):
    data = save(Image.fromarray(photo("chelsea")), "JPEG")
    path = tmp_path / "cat.jpg"
    path.write_bytes(data)
    results = imaging.preprocess(
        [data, bytearray(data), memoryview(data), str(path), path], size=64
    )
    assert all(r.error is None for r in results)
    for r in results[1:]:
        np.testing.assert_array_equal(r.pixels, results[0].pixels)


def test_bad_inputs_give_error_results_not_exceptions(tmp_path):
    jpg = save(Image.fromarray(photo("astronaut")), "JPEG")
    png = save(Image.fromarray(photo("chelsea")), "PNG")
    webp = save(Image.fromarray(photo("chelsea")), "WEBP")
    # A PNG header that claims 100000×100000 pixels and carries no data.
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr) & 0xFFFFFFFF)
    liar = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + crc
    inputs = [
        jpg,
        b"",
        b"this is not an image",
        jpg[: len(jpg) // 2],
        png[: len(png) // 2],
        webp[: len(webp) // 2],
        liar,
        str(tmp_path / "missing.jpg"),
        12345,
        jpg,
    ]
    results = imaging.preprocess(inputs, size=64, workers=2)
    assert len(results) == len(inputs)
    assert results[0].error is None and results[-1].error is None
    errors = [r.error for r in results[1:-1]]
    assert all(isinstance(e, str) and e for e in errors), errors
    assert all(r.pixels is None and r.orig_size is None for r in results[1:-1])
    assert "empty" in errors[0]
    assert "not an image" in errors[1]
    assert "truncated" in errors[2] or "corrupt" in errors[2], errors[2]
    assert errors[5] == "image too large: 100000×100000 (more than max_pixels=178956970)"
    assert "cannot read" in errors[6]
    assert "not bytes or a path" in errors[7]


def test_max_pixels_is_checked_from_the_header():
    data = save(Image.fromarray(photo("astronaut")), "JPEG")  # 512×512
    ok, too_big = (
        imaging.preprocess([data], size=64, max_pixels=512 * 512)[0],
        imaging.preprocess([data], size=64, max_pixels=512 * 512 - 1)[0],
    )
    assert ok.error is None
    assert too_big.error.startswith("image too large: 512×512")


def test_bad_options_raise_before_any_work():
    with pytest.raises(ImageError, match="unknown resize mode"):
        imaging.preprocess([b""], mode="zoom")
    with pytest.raises(ImageError, match="unknown filter"):
        imaging.preprocess([b""], filter="sinc")
    with pytest.raises(ShardcookError, match="buckets is empty"):
        imaging.preprocess([b""], mode="bucket", buckets=[])


def test_parallel_results_equal_serial_results():
    datas = [
        save(Image.fromarray(photo(n)), fmt)
        for n in ("astronaut", "coffee", "chelsea", "rocket")
        for fmt in ("JPEG", "PNG", "WEBP")
    ]
    one = imaging.preprocess(datas, size=96, mode="bucket", workers=1)
    many = imaging.preprocess(datas, size=96, mode="bucket", workers=4)
    for a, b in zip(one, many, strict=True):
        np.testing.assert_array_equal(a.pixels, b.pixels)
        assert (a.orig_size, a.crop) == (b.orig_size, b.crop)


def test_filters_are_selectable():
    data = save(Image.fromarray(photo("coffee")), "PNG")
    outs = {f: imaging.preprocess([data], size=64, filter=f)[0].pixels for f in imaging.FILTERS}
    assert all(o.shape == (64, 64, 3) for o in outs.values())
    assert not np.array_equal(outs["nearest"], outs["lanczos3"])


# ---------------------------------------------------------------- encode


@pytest.mark.parametrize("fmt", ["jpg", "png", "webp"])
def test_encode_image_round_trips_and_is_deterministic(fmt):
    pixels = imaging.preprocess([save(Image.fromarray(photo("astronaut")), "PNG")], size=256)[0]
    data = imaging.encode_image(pixels.pixels, fmt, quality=90)
    assert data == imaging.encode_image(pixels.pixels.copy(), fmt, quality=90)
    back = Image.open(io.BytesIO(data))
    assert back.format == {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}[fmt]
    q = psnr(np.asarray(back.convert("RGB")), pixels.pixels)
    if fmt == "png":
        assert q == float("inf")
    else:
        assert 30 < q < float("inf")  # lossy, and good at quality 90


def test_webp_is_lossy_and_quality_matters():
    pixels = np.asarray(Image.fromarray(photo("astronaut")))
    small = imaging.encode_image(pixels, "webp", quality=10)
    large = imaging.encode_image(pixels, "webp", quality=95)
    assert len(small) < len(large) < len(imaging.encode_image(pixels, "png"))


def test_encode_rejects_bad_arrays_and_formats():
    with pytest.raises(ImageError):
        imaging.encode_image(np.zeros((8, 8), np.uint8))
    with pytest.raises(ImageError):
        imaging.encode_image(np.zeros((8, 8, 4), np.uint8))
    with pytest.raises(ImageError, match="unknown image format"):
        imaging.encode_image(np.zeros((8, 8, 3), np.uint8), "gif")
    # a non-contiguous view is accepted (copied)
    view = np.zeros((8, 16, 3), np.uint8)[:, ::2]
    assert imaging.encode_image(view, "png")


@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
def test_a_path_that_is_not_a_regular_file_is_an_unreadable_result(tmp_path, kind):
    path = {"device": "/dev/zero", "folder": str(tmp_path)}.get(kind, str(tmp_path / "p.jpg"))
    if kind == "fifo":
        os.mkfifo(path)
    good = tmp_path / "cat.jpg"
    good.write_bytes(save(Image.fromarray(photo("chelsea")), "JPEG"))
    # in a bounded child: the core reads /dev/zero until memory runs out, and waits on a FIFO
    r = run_bounded(
        "from shardcook.imaging import preprocess\n"
        f"for r in preprocess([{path!r}, {str(good)!r}], size=32):\n"
        "    print(r.error_kind, r.error)\n", timeout=30)
    assert r.returncode == 0, r.stderr[-2000:]
    bad, ok = r.stdout.splitlines()
    what = {"device": "a device", "fifo": "a FIFO", "folder": "a folder"}[kind]
    assert bad == f"unreadable cannot read {path}: not a regular file ({what})"
    assert ok == "None None"
