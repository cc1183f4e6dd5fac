"""Media metadata: `shardcook finalize --media-metadata-by-extension` against `energon prepare
--media-metadata-by-extension` on two copies of the same WebDataset of real photos, each a new
process as a user runs them, with their `media_metadata` rows compared; then the per-image cost
of the image facts alone, in this process: the native header read against Pillow's `Image.open`.

    python benches/media_metadata.py [--n 600] [--per-shard 50] [--rounds 2]

Inputs: benches/raw_vs_peers.py's photos (scikit-image's, 1-4 MP, JPEG/PNG/WebP 2:1:1), each
with a caption, packed by Python's tarfile. Work files go under bench-out/media/.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sqlite3
import statistics
import sys
import tarfile
import time
from pathlib import Path

from object_storage import timed
from raw_vs_peers import make_photos
from shardcook import _native

ROOT = Path(__file__).resolve().parents[1]
ENERGON = [sys.executable, "-m", "megatron.energon.cli.main", "prepare", "--non-interactive",
           "--sample-type", "CrudeWebdataset", "--split-parts", "train:.*",
           "--media-metadata-by-extension"]
SHARDCOOK = [sys.executable, "-m", "shardcook", "finalize", "--encoding", "generic",
             "--no-validate", "--media-metadata-by-extension"]


def pack(photos: Path, out: Path, per_shard: int) -> list[bytes]:
    """The photos and their captions as tars of `per_shard` samples; returns the image bytes."""
    images = sorted(p for p in photos.iterdir() if p.suffix in (".jpg", ".png", ".webp"))
    out.mkdir(parents=True)
    datas = []
    for start in range(0, len(images), per_shard):
        with tarfile.open(out / f"shard-{start // per_shard:05d}.tar", "w") as tar:
            for n, image in enumerate(images[start:start + per_shard], start):
                data = image.read_bytes()
                datas.append(data)
                for name, body in ((f"{n:08d}{image.suffix}", data),
                                   (f"{n:08d}.txt", image.with_suffix(".txt").read_bytes())):
                    info = tarfile.TarInfo(name)
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
    return datas


def media_rows(dataset: Path) -> set[tuple[str, str, str]]:
    db = sqlite3.connect(dataset / ".nv-meta" / "index.sqlite")
    try:
        return set(db.execute("SELECT entry_key, metadata_type, metadata_json "
                              "FROM media_metadata").fetchall())
    finally:
        db.close()


def per_image(datas: list[bytes], rounds: int) -> tuple[float, float, int]:
    """(microseconds per image through the native header read, through Pillow's open, how many
    the native read answered)."""
    from PIL import Image

    def native() -> None:
        for data in datas:
            _native.pillow_header(data)

    def pillow() -> None:
        for data in datas:
            with Image.open(io.BytesIO(data)) as im:
                _ = (im.width, im.height, im.format, im.mode)

    def best(work: object) -> float:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            work()  # type: ignore[operator]
            times.append(time.perf_counter() - start)
        return min(times) / len(datas) * 1e6

    answered = sum(_native.pillow_header(d) is not None for d in datas)
    return best(native), best(pillow), answered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=600, help="photos")
    ap.add_argument("--per-shard", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2, help="runs of each command (best kept)")
    args = ap.parse_args()
    work = ROOT / "bench-out" / "media"
    photos = work / f"photos-{args.n}"
    if not (photos / ".info.json").exists():
        shutil.rmtree(photos, ignore_errors=True)
        make_photos(photos, args.n)
    base = work / "dataset"
    shutil.rmtree(base, ignore_errors=True)
    datas = pack(photos, base, args.per_shard)
    mib = sum(p.stat().st_size for p in base.iterdir()) / 2**20
    print(f"{len(datas)} photos in {len(list(base.iterdir()))} shards, {mib:,.0f} MiB")

    seconds: dict[str, list[float]] = {"shardcook": [], "energon": []}
    rows = {}
    for _ in range(args.rounds):
        for name, cmd in (("shardcook", SHARDCOOK), ("energon", ENERGON)):
            copy = work / name
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(base, copy)
            seconds[name].append(timed([*cmd, str(copy)]))
            rows[name] = media_rows(copy)
    same = rows["shardcook"] == rows["energon"]
    print(f"media_metadata rows: {len(rows['energon'])}, identical: {same}")
    ours, theirs = min(seconds["shardcook"]), min(seconds["energon"])
    print(f"shardcook finalize --media-metadata-by-extension: {ours:.2f} s "
          f"({len(datas) / ours:,.0f} images/s; runs {statistics.fmean(seconds['shardcook']):.2f} "
          f"s mean)")
    print(f"energon prepare --media-metadata-by-extension:    {theirs:.2f} s "
          f"({len(datas) / theirs:,.0f} images/s)")
    print(f"ratio: {theirs / ours:.1f}x")
    native, pillow, answered = per_image(datas, 3)
    print(f"image facts per image: native header {native:.1f} us, Pillow open {pillow:.1f} us "
          f"({pillow / native:.0f}x); the native read answered {answered} of {len(datas)}")
    if not same:
        raise SystemExit("the media_metadata rows differ")


if __name__ == "__main__":
    main()
