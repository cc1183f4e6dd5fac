"""Properties of every resize mode's geometry over random sizes and aspect ratios."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shardcook import imaging
from shardcook.errors import ImageError

sides = st.integers(min_value=1, max_value=20_000)
sizes = st.integers(min_value=16, max_value=2048)
EPS = 1e-6


def box_inside(g: imaging.Geometry, w: int, h: int) -> bool:
    left, top, right, bottom = g.box
    return -EPS <= left < right <= w + EPS and -EPS <= top < bottom <= h + EPS


def crop_inside(g: imaging.Geometry, w: int, h: int) -> bool:
    """The crop is the box's (top, left) in target pixels: between 0 and the margin left of
    the box, scaled the same way (it can exceed the target size for very elongated images)."""
    left, top, right, bottom = g.box
    sx, sy = g.size[0] / (right - left), g.size[1] / (bottom - top)
    ct, cl = g.crop
    return 0 <= ct <= (h - (bottom - top)) * sy + 0.5 and 0 <= cl <= (w - (right - left)) * sx + 0.5


@given(w=sides, h=sides, size=sizes)
def test_crop_is_the_centred_square(w, h, size):
    g = imaging.geometry(w, h, mode="crop", size=size)
    left, top, right, bottom = g.box
    assert g.size == (size, size)
    assert box_inside(g, w, h) and crop_inside(g, w, h)
    assert right - left == pytest.approx(min(w, h)) == bottom - top
    assert left + right == pytest.approx(w) and top + bottom == pytest.approx(h)


@given(w=sides, h=sides, size=sizes)
def test_stretch_takes_the_whole_image(w, h, size):
    g = imaging.geometry(w, h, mode="stretch", size=size)
    assert g.size == (size, size) and g.box == (0, 0, w, h) and g.crop == (0, 0)


@given(w=sides, h=sides, max_size=st.integers(min_value=16, max_value=4096))
def test_variable_keeps_aspect_never_upscales_multiples_of_16(w, h, max_size):
    s = min(1.0, max_size / max(w, h))
    if math.floor(w * s / 16 + 1e-9) == 0 or math.floor(h * s / 16 + 1e-9) == 0:
        with pytest.raises(ImageError, match="too small"):
            imaging.geometry(w, h, mode="variable", max_size=max_size)
        return
    g = imaging.geometry(w, h, mode="variable", max_size=max_size)
    tw, th = g.size
    assert tw % 16 == 0 and th % 16 == 0 and tw > 0 and th > 0
    assert tw <= w and th <= h and max(tw, th) <= max_size
    # floor(w·s/16)·16, up to float rounding of the exact integer arithmetic
    assert abs(tw - math.floor(w * s / 16) * 16) <= 16 and tw <= w * s + EPS
    left, top, right, bottom = g.box
    assert box_inside(g, w, h) and crop_inside(g, w, h)
    # no distortion: the box has the target's aspect and is scaled by exactly 1/s
    assert (right - left) * th == pytest.approx((bottom - top) * tw, rel=1e-9)
    assert (right - left) == pytest.approx(tw / s, rel=1e-9)


@given(w=sides, h=sides, size=st.sampled_from([256, 512, 768, 1024, 2048]))
def test_bucket_nearest_aspect_multiples_of_64(w, h, size):
    buckets = imaging.default_buckets(size)
    g = imaging.geometry(w, h, mode="bucket", size=size)
    assert g.size in buckets
    bw, bh = g.size
    assert bw % 64 == 0 and bh % 64 == 0
    best = min(abs(math.log(a / b) - math.log(w / h)) for a, b in buckets)
    assert abs(math.log(bw / bh) - math.log(w / h)) == pytest.approx(best)
    left, top, right, bottom = g.box
    assert box_inside(g, w, h) and crop_inside(g, w, h)
    assert (right - left) * bh == pytest.approx((bottom - top) * bw, rel=1e-9)
    # the box fills one dimension completely (cover, centred)
    assert right - left == pytest.approx(w) or bottom - top == pytest.approx(h)


@given(size=st.integers(min_value=64, max_value=4096))
def test_default_buckets(size):
    buckets = imaging.default_buckets(size)
    assert buckets and len(set(buckets)) == len(buckets)
    for w, h in buckets:
        assert w % 64 == 0 and h % 64 == 0 and max(w / h, h / w) <= 2
        assert (h, w) in buckets
        if size >= 256:
            assert 0.75 <= w * h / size**2 <= 1.25


@given(w=sides, h=sides, buckets=st.lists(st.tuples(sizes, sizes), min_size=1, max_size=6))
def test_custom_buckets_are_used_as_given(w, h, buckets):
    g = imaging.geometry(w, h, mode="bucket", buckets=buckets)
    assert g.size in buckets and box_inside(g, w, h)


@settings(max_examples=25, deadline=None)
@given(
    w=st.integers(min_value=1, max_value=700),
    h=st.integers(min_value=1, max_value=700),
    mode=st.sampled_from(["crop", "stretch", "variable", "bucket"]),
    fmt=st.sampled_from(["png", "jpg", "webp"]),
)
def test_preprocess_output_has_the_geometry_size(w, h, mode, fmt):
    """The decoder agrees with `geometry` on real encoded images of random shapes."""
    rng = np.random.default_rng(w * 1000 + h)
    pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    data = imaging.encode_image(pixels, fmt, quality=90)
    (r,) = imaging.preprocess([data], mode=mode, size=128, max_size=128)
    try:
        g = imaging.geometry(w, h, mode=mode, size=128, max_size=128)
    except ImageError:
        assert r.error and "too small" in r.error
        return
    assert r.error is None, r.error
    assert r.pixels.shape == (g.size[1], g.size[0], 3)
    assert r.orig_size == (h, w) and r.crop == g.crop
