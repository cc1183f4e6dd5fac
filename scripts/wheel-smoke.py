"""Smoke test of an installed shardcook (CI runs it against the wheel, outside the source tree):
the package comes from site-packages with its type information, and the Python API works end
to end: shards written and read back, an image decoded and resized, Energon metadata, validation.

Usage: python scripts/wheel-smoke.py VENV
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path


def main(venv: Path) -> None:
    import shardcook
    from PIL import Image
    from shardcook import ShardWriter, finalize, read_shard, validate
    from shardcook.buildinfo import build_info
    from shardcook.imaging import preprocess

    package = Path(shardcook.__file__).resolve().parent
    assert package.is_relative_to(venv.resolve()), f"shardcook comes from {package}, not {venv}"
    for name in ("py.typed", "_native.pyi"):
        assert (package / name).is_file(), f"the installed package lacks {name}"
    assert build_info()["jpeg"]["simd_active"], "the wheel's JPEG decoder has no SIMD"

    photo = io.BytesIO()
    Image.new("RGB", (96, 64), (200, 30, 30)).save(photo, format="JPEG")
    [result] = preprocess([photo.getvalue()], size=32)
    assert result.pixels is not None and result.pixels.shape == (32, 32, 3), result
    with tempfile.TemporaryDirectory() as out:
        with ShardWriter(out, shard_size=2) as writer:
            for i in range(4):
                writer.write(f"{i:06d}", {"jpg": photo.getvalue(), "txt": b"a red field"})
        assert len(list(read_shard(Path(out) / "000001.tar"))) == 2
        done = finalize(out, encoding="raw", split=(1.0, 0.0, 0.0))
        assert done.validation is not None and done.validation.ok, done.validation
        assert validate(out, deep=True).ok
    print(f"wheel smoke: shardcook {shardcook.__version__} from {package} works")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
