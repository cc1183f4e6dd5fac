"""Wrong arguments to the native API are one typed sentence (ConfigError or ImageError, with its
`kind`), nothing is written, and a huge size is an error instead of a native abort; per-image
failures carry `error_kind`, from which raw and chatml take their skip reasons."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from shardcook import ShardWriter, imaging
from shardcook.errors import ConfigError, ImageError
from shardcook.jobs.images import classify_error
from skimage import data as samples

from tests.helpers.raw import run_cli


def _png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


PHOTO = _png(samples.astronaut()[::4, ::4])  # 128×128


@pytest.mark.parametrize(("arguments", "message"), [
    ({"shard_size": -1}, "shard_size must be at least 1, not -1"),
    ({"shard_size": 0}, "shard_size must be at least 1, not 0"),
    ({"shard_size": 2**70}, "shard_size must be at least 1, not 1180591620717411303424"),
    ({"shard_size": "3"}, "shard_size must be an integer, not a str"),
    ({"shard_size": 2.5}, "shard_size must be an integer, not a float"),
    ({"first_shard": -1}, "first_shard must be at least 0, not -1"),
])
def test_bad_writer_arguments_are_config_errors_and_write_nothing(tmp_path, arguments, message):
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as caught:
        ShardWriter(out, **arguments)
    assert str(caught.value) == message and caught.value.kind == "config"
    assert not out.exists()


@pytest.mark.parametrize(("arguments", "message"), [
    ({"size": -5}, "size must be from 1 to 65536, not -5"),
    ({"size": 0}, "size must be from 1 to 65536, not 0"),
    ({"size": 100_000}, "size must be from 1 to 65536, not 100000"),
    ({"size": 20_000}, ("size 20000 asks for 400000000 output pixels, more than the limit of "
                        "178956970 (max_pixels, at least 178956970); choose a smaller size")),
    ({"size": 70_000, "max_pixels": 10**12}, "size must be from 1 to 65536, not 70000"),
    ({"max_size": -1, "mode": "variable"}, "max_size must be from 1 to 65536, not -1"),
    ({"mode": "bucket", "buckets": [(64, -64)]},
     "a bucket height must be from 1 to 65536, not -64"),
    ({"mode": "bucket", "buckets": [(0, 64)]}, "a bucket width must be from 1 to 65536, not 0"),
    ({"mode": "bucket", "buckets": [(64, 64, 64)]},
     "bucket (64, 64, 64) is not a (width, height) pair"),
    ({"mode": "bucket", "buckets": "64x64"},
     "buckets must be a list of (width, height) pairs, not a str"),
    ({"workers": 0}, "workers must be from 1 to 1024, not 0"),
    ({"workers": -3}, "workers must be from 1 to 1024, not -3"),
    ({"workers": 5000}, "workers must be from 1 to 1024, not 5000"),
    ({"max_pixels": 0}, "max_pixels must be at least 1, not 0"),
    ({"size": True}, "size must be an integer, not a bool"),
])
def test_bad_image_options_are_image_errors(arguments, message):
    with pytest.raises(ImageError) as caught:
        imaging.preprocess([PHOTO], **arguments)
    assert str(caught.value) == message and caught.value.kind == "bad_option"


@pytest.mark.parametrize("single", ["/a.jpg", PHOTO, bytearray(PHOTO)])
def test_one_input_where_a_list_is_expected_is_an_error(single):
    with pytest.raises(ImageError, match=r"^inputs must be a list of images \(bytes or paths\), "
                                         rf"not a {type(single).__name__}$"):
        imaging.preprocess(single)


def test_other_native_functions_check_their_integers():
    with pytest.raises(ImageError, match=r"^quality must be from 1 to 100, not 300$"):
        imaging.encode_image(samples.astronaut(), "jpg", quality=300)
    with pytest.raises(ImageError, match=r"^size must be from 1 to 65536, not -1$"):
        imaging.default_buckets(-1)
    with pytest.raises(ImageError, match=r"^width must be from 0 to 4294967295, not -4$"):
        imaging.geometry(-4, 10)


def test_an_array_taller_than_a_u32_side_is_refused_before_it_is_copied():
    """2^32 + 1 rows would wrap to 1; the zero-stride view takes no memory, and the refusal comes
    before the copy a non-contiguous array gets."""
    tall = np.lib.stride_tricks.as_strided(np.zeros(3, np.uint8), shape=(2**32 + 1, 1, 3),
                                           strides=(0, 0, 1))
    with pytest.raises(ImageError, match=r"^pixels of shape \[4294967297, 1, 3\] are too large"
                                         r" to encode$") as caught:
        imaging.encode_image(tall, "png")
    assert caught.value.kind == "bad_option"


def test_a_huge_bucket_is_refused_once_before_any_work():
    with pytest.raises(ImageError, match="bucket 60000x60000 asks for 3600000000 output pixels"):
        imaging.preprocess([PHOTO], mode="bucket", buckets=[(60_000, 60_000)])


def test_every_failed_image_says_why_as_a_value(tmp_path):
    tiny = _png(np.zeros((8, 8, 3), np.uint8))
    inputs = [PHOTO, b"", b"GIF89a broken", PHOTO[: len(PHOTO) // 2], tiny,
              str(tmp_path / "x.png"), 7]
    results = imaging.preprocess(inputs, mode="variable", max_size=64, max_pixels=100_000)
    kinds = [r.error_kind for r in results]
    assert kinds == [None, "unsupported_format", "decode_error", "decode_error", "too_small",
                     "unreadable", "bad_input"]
    assert all((r.error is None) == (r.error_kind is None) for r in results)
    big = imaging.preprocess([PHOTO], size=64, max_pixels=1000)[0]
    assert big.error_kind == "too_large"
    assert big.error == "image too large: 128×128 (more than max_pixels=1000)"
    # raw's and chatml's skip reasons: the size verdicts by name, everything else a decode error
    assert [classify_error(k) for k in ("too_large", "too_small", "unreadable", None)] == [
        "too_large", "too_small", "decode_error", "decode_error"]


@pytest.mark.parametrize(("option", "message"), [
    # the config's own bound comes first; the image core's pixel check backs it up
    (["--image-size", "100000"], "--image-size must be at most 16383"),
    (["--resize-mode", "stretch", "--image-size", "16000"],
     "size 16000 asks for 256000000 output pixels"),
])
def test_raw_refuses_what_the_image_core_would_refuse_before_writing(tmp_path, option, message):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.png").write_bytes(PHOTO)
    out = tmp_path / "out"
    r = run_cli("raw", "--input-dir", str(tmp_path / "in"), "--output-dir", str(out), *option,
                check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()
