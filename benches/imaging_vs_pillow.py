"""shardcook.imaging.preprocess against the fairest Pillow, side by side on the same photos.

Photos: mosaics of scikit-image's real sample photos at 0.3, 1, 3 and 6 megapixels, saved as
JPEG (q90), PNG and WebP (q90). Both sides produce the same thing: EXIF-oriented RGB, the
centred square (mode "crop") resized with Lanczos to 256 and to 1024.

Pillow does it the fastest way it can: `draft()` for JPEG at the same DCT scale shardcook picks
(the smallest that leaves 2× the target resolution in the box), `exif_transpose`, `convert("RGB")`,
`resize(target, LANCZOS, box=box)` resizing only the box. Threads: Pillow releases the GIL in
its decoders and in resize, so it runs in a ThreadPoolExecutor with the same thread count.

    python benches/imaging_vs_pillow.py [--repeat 5] [--threads 1,2] [--copies 4]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import skimage.data
from PIL import Image, ImageOps
from shardcook import imaging

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "retina", "cat")
SIZES_MP = ((640, 480), (1280, 800), (2048, 1536), (3000, 2000))


def mosaic(w: int, h: int, seed: int) -> Image.Image:
    """A w×h picture tiled from real photos (tiles of ~600×400, each photo at its own detail)."""
    tiles = []
    for name in PHOTOS:
        a = getattr(skimage.data, name)()
        a = a[..., :3] if a.ndim == 3 else np.stack([a] * 3, -1)
        tiles.append(Image.fromarray(np.ascontiguousarray(a)))
    out = Image.new("RGB", (w, h))
    tw, th = min(600, w), min(400, h)
    k = seed
    for y in range(0, h, th):
        for x in range(0, w, tw):
            out.paste(tiles[k % len(tiles)].resize((tw, th), Image.LANCZOS), (x, y))
            k += 1
    return out


def corpus(fmt: str) -> list[bytes]:
    out = []
    for i, (w, h) in enumerate(SIZES_MP):
        for j, (ww, hh) in enumerate(((w, h), (h, w))):  # landscape and portrait
            im = mosaic(ww, hh, seed=i * 2 + j)
            buf = io.BytesIO()
            kw = {"JPEG": {"quality": 90}, "WEBP": {"quality": 90}, "PNG": {}}[fmt]
            im.save(buf, fmt, **kw)
            out.append(buf.getvalue())
    return out


def pillow_one(data: bytes, size: int) -> np.ndarray:
    im = Image.open(io.BytesIO(data))
    if im.format == "JPEG":
        w, h = im.size
        side = min(w, h)
        k = next((k for k in (8, 4, 2) if side / k >= 2 * size), 1)
        im.draft("RGB", (w // k, h // k))
    im = ImageOps.exif_transpose(im).convert("RGB")
    g = imaging.geometry(im.width, im.height, mode="crop", size=size)
    return np.asarray(im.resize(g.size, Image.LANCZOS, box=g.box))


def pillow_batch(pool: ThreadPoolExecutor, data: list[bytes], size: int) -> list[np.ndarray]:
    return list(pool.map(partial(pillow_one, size=size), data))


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", default=f"1,{os.cpu_count()}")
    p.add_argument("--copies", type=int, default=4, help="batch = this many copies of the 8")
    args = p.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",")})
    print(
        f"cores: {os.cpu_count()}; images per batch: {args.copies} x {2 * len(SIZES_MP)} "
        f"({', '.join(f'{w}x{h}' for w, h in SIZES_MP)}, landscape+portrait); rates: best of "
        f"{args.repeat} rounds; scaling: median over rounds of (1-thread time / N-thread time)"
    )
    print(
        f"{'format':6} {'target':>6} {'thr':>3} {'shardcook img/s':>16} {'Pillow img/s':>13} "
        f"{'ratio':>6} {'ours Nthr/1thr':>15} {'Pillow Nthr/1thr':>17}"
    )
    pools = {t: ThreadPoolExecutor(t) for t in threads}
    for fmt in ("JPEG", "PNG", "WEBP"):
        data = corpus(fmt) * args.copies
        for size in (256, 1024):
            runs = {
                (side, t): fn
                for t in threads
                for side, fn in (
                    ("ours", partial(imaging.preprocess, data, size=size, workers=t)),
                    ("pil", partial(pillow_batch, pools[t], data, size)),
                )
            }
            for fn in runs.values():
                fn()  # warm up
            # rounds alternate thread counts, so drift in the machine's speed hits all alike
            times: dict[tuple[str, int], list[float]] = {k: [] for k in runs}
            for _ in range(args.repeat):
                for k, fn in runs.items():
                    times[k].append(_timed(fn))
            for t in threads:
                ours, pil = (len(data) / min(times[side, t]) for side in ("ours", "pil"))
                scale = {
                    side: statistics.median(
                        a / b for a, b in zip(times[side, 1], times[side, t], strict=True))
                    for side in ("ours", "pil")
                }
                print(
                    f"{fmt:6} {size:>6} {t:>3} {ours:>16.1f} {pil:>13.1f} {ours / pil:>5.2f}x "
                    f"{scale['ours']:>14.2f}x {scale['pil']:>16.2f}x",
                    flush=True,
                )


if __name__ == "__main__":
    main()
