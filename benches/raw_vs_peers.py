"""`shardcook raw` side by side with a plain Pillow + webdataset.ShardWriter script and with
img2dataset, on the same real photos, the same cores, to 256 px JPEG shards.

    python benches/raw_vs_peers.py [--n 400] [--workers N] \
        [--img2dataset /path/to/venv/bin/img2dataset]
    python benches/raw_vs_peers.py --rss-only   # peak RSS of `shardcook raw` at 1k and 10k inputs

Prints images/s per tool and the ratios; the peak RSS of `shardcook raw` at 1k and 10k inputs.
Inputs: scikit-image's bundled photos, rescaled to 1-4 MP, flipped/cropped so every file differs,
saved as JPEG, PNG and WebP (2:1:1). Work files go under bench-out/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

ROOT = Path(__file__).resolve().parents[1]
SIZE = 256
QUALITY = 95
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field",
          "retina", "colorwheel", "motorcycle")


def _photo(name: str) -> np.ndarray:
    import skimage.data

    arr = skimage.data.stereo_motorcycle()[0] if name == "motorcycle" else getattr(
        skimage.data, name)()
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, -1)
    return arr[..., :3]


def make_photos(folder: Path, n: int) -> dict:
    """n distinct photos of 1-4 MP as JPEG/PNG/WebP, captions next to them."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    base = [Image.fromarray(_photo(p)) for p in PHOTOS]
    stats = {"megapixels": [], "formats": {}}
    for i in range(n):
        im = base[i % len(base)]
        mp = rng.uniform(1.0, 4.0)
        aspect = rng.uniform(0.6, 1.6)
        w = int((mp * 1e6 * aspect) ** 0.5)
        h = int(mp * 1e6 / w)
        # a random crop of the photo, scaled up: every file differs
        cw, ch = im.width, im.height
        x0, y0 = int(rng.uniform(0, cw * 0.2)), int(rng.uniform(0, ch * 0.2))
        tile = im.crop((x0, y0, cw - int(rng.uniform(0, cw * 0.2)),
                        ch - int(rng.uniform(0, ch * 0.2)))).resize((w, h), Image.BICUBIC)
        if i % 2:
            tile = ImageOps.mirror(tile)
        fmt = ("jpg", "jpg", "png", "webp")[i % 4]
        path = folder / f"{i:06d}.{fmt}"
        tile.save(path, format={"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}[fmt],
                  **({"quality": 92} if fmt != "png" else {"compress_level": 1}))
        (folder / f"{i:06d}.txt").write_text(f"photo {i} of {PHOTOS[i % len(PHOTOS)]}")
        stats["megapixels"].append(w * h / 1e6)
        stats["formats"][fmt] = stats["formats"].get(fmt, 0) + 1
    mps = stats["megapixels"]
    return {"n": n, "mp_min": round(min(mps), 2), "mp_max": round(max(mps), 2),
            "mp_mean": round(sum(mps) / len(mps), 2), "formats": stats["formats"]}


def _timed(cmd: list[str], **kw) -> tuple[float, int]:
    """Runs cmd; returns (wall seconds, peak RSS in MiB of the process tree's largest child)."""
    wrapper = ("import resource, subprocess, sys, json\n"
               "r = subprocess.run(sys.argv[1:])\n"
               "print(json.dumps([r.returncode, "
               "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True,
                         check=False, **kw)
    wall = time.perf_counter() - t0
    try:
        rc, rss_kb = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        rc, rss_kb = 1, 0
    if rc != 0:
        raise RuntimeError(f"{cmd[:4]} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return wall, rss_kb // 1024


def run_shardcook(photos: Path, out: Path, workers: int) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    return _timed([sys.executable, "-m", "shardcook", "raw", "--input-dir", str(photos),
                   "--output-dir", str(out), "--image-size", str(SIZE), "--resize-mode", "crop",
                   "--image-format", "jpg", "--image-quality", str(QUALITY), "--workers",
                   str(workers), "--no-finalize", "--quiet"])


PILLOW_SCRIPT = r'''
import io, json, os, sys
from multiprocessing import Pool
from pathlib import Path
from PIL import Image, ImageOps
import webdataset as wds

SIZE, QUALITY = int(sys.argv[3]), int(sys.argv[4])

def work(path):
    im = Image.open(path)
    im = ImageOps.exif_transpose(im).convert("RGB")
    w, h = im.size
    s = SIZE / min(w, h)
    nw, nh = max(SIZE, round(w * s)), max(SIZE, round(h * s))
    im = im.resize((nw, nh), Image.LANCZOS)
    top, left = (nh - SIZE) // 2, (nw - SIZE) // 2
    im = im.crop((left, top, left + SIZE, top + SIZE))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=QUALITY)
    cap = Path(path).with_suffix(".txt").read_text()
    meta = {"source": path, "orig_size": [h, w], "crop": [top, left], "size": [SIZE, SIZE]}
    return buf.getvalue(), cap, json.dumps(meta)

if __name__ == "__main__":
    src, out, workers = sys.argv[1], sys.argv[2], int(sys.argv[5])
    os.makedirs(out, exist_ok=True)
    paths = sorted(str(p) for p in Path(src).iterdir() if p.suffix in (".jpg", ".png", ".webp"))
    with Pool(workers) as pool, wds.ShardWriter(os.path.join(out, "%06d.tar"), maxcount=1000,
                                                 verbose=0) as sink:
        for i, (jpg, cap, meta) in enumerate(pool.imap(work, paths, chunksize=4)):
            sink.write({"__key__": f"{i:010d}", "jpg": jpg, "txt": cap, "meta.json": meta})
'''


def run_pillow(photos: Path, out: Path, workers: int) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    script = out.parent / "pillow_wds.py"
    script.write_text(PILLOW_SCRIPT)
    return _timed([sys.executable, str(script), str(photos), str(out), str(SIZE), str(QUALITY),
                   str(workers)])


def run_img2dataset(exe: str, photos: Path, out: Path, workers: int) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    urls = out.parent / "urls.txt"
    paths = sorted(p for p in photos.iterdir() if p.suffix in (".jpg", ".png", ".webp"))
    urls.write_text("".join(f"file://{p}\n" for p in paths))  # its local-file input
    return _timed([exe, "--url_list", str(urls), "--input_format", "txt", "--output_folder",
                   str(out), "--output_format", "webdataset", "--image_size", str(SIZE),
                   "--resize_mode", "center_crop", "--encode_format", "jpg", "--encode_quality",
                   str(QUALITY), "--processes_count", str(workers), "--thread_count",
                   str(2 * workers), "--number_sample_per_shard", "1000",
                   "--enable_wandb", "False"],
                  env=dict(os.environ, NO_ALBUMENTATIONS_UPDATE="1"))


def count_tar_samples(out: Path, part: str = ".jpg") -> int:
    import tarfile

    n = 0
    for t in sorted(out.rglob("*.tar")):
        with tarfile.open(t) as tar:
            n += sum(1 for m in tar.getmembers() if m.name.endswith(part))
    return n


def rss_at(photos_pool: Path, n: int, work: Path, workers: int) -> tuple[float, int]:
    """Peak RSS of `shardcook raw` over n inputs (hard links into a pool of photos)."""
    folder = work / f"rss-{n}"
    if not folder.is_dir() or len(list(folder.glob("*.txt"))) != n:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        pool = sorted(p for p in photos_pool.iterdir() if p.suffix in (".jpg", ".png", ".webp"))
        for i in range(n):
            src = pool[i % len(pool)]
            os.link(src, folder / f"{i:06d}{src.suffix}")
            (folder / f"{i:06d}.txt").write_text(f"caption {i}")
    return run_shardcook(folder, work / f"rss-{n}-out", workers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400, help="photos for the speed comparison")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--work", type=Path, default=ROOT / "bench-out" / "raw_vs_peers")
    ap.add_argument("--img2dataset", default=shutil.which("img2dataset"),
                    help="the img2dataset executable (skipped when absent)")
    ap.add_argument("--rss-only", action="store_true")
    ap.add_argument("--rss-sizes", default="1000,10000", help="'' to skip the RSS runs")
    ap.add_argument("--rss-pool", type=int, default=200,
                    help="distinct photos the RSS runs cycle through (hard links)")
    args = ap.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    photos = work / f"photos-{args.n}"
    info_path = photos / ".info.json"
    if not info_path.is_file():
        shutil.rmtree(photos, ignore_errors=True)
        info = make_photos(photos, args.n)
        info_path.write_text(json.dumps(info))
    info = json.loads(info_path.read_text())
    print(f"inputs: {info['n']} photos, {info['mp_min']}-{info['mp_max']} MP (mean "
          f"{info['mp_mean']}), {info['formats']}; target {SIZE}px center crop, JPEG q{QUALITY}; "
          f"{args.workers} workers on {os.cpu_count()} cores")
    results: dict[str, float] = {}
    if not args.rss_only:
        runs = [("shardcook raw",
                 lambda: run_shardcook(photos, work / "out-shardcook", args.workers)),
                ("pillow+webdataset",
                 lambda: run_pillow(photos, work / "out-pillow", args.workers))]
        if args.img2dataset:
            runs.append(("img2dataset", lambda: run_img2dataset(
                args.img2dataset, photos, work / "out-img2dataset", args.workers)))
        else:
            print("img2dataset: not installed (pass --img2dataset PATH); skipped")
        for name, fn in runs:
            wall, rss = fn()
            out = work / {"shardcook raw": "out-shardcook", "pillow+webdataset": "out-pillow",
                          "img2dataset": "out-img2dataset"}[name]
            n = count_tar_samples(out)
            results[name] = n / wall
            print(f"{name:>20}: {n} images in {wall:6.2f} s = {n / wall:7.1f} images/s, "
                  f"peak RSS {rss} MiB")
            if n != info["n"]:
                print(f"{'':>20}  warning: wrote {n} of {info['n']} images")
        base = results["shardcook raw"]
        for name, rate in results.items():
            if name != "shardcook raw":
                print(f"shardcook raw / {name}: {base / rate:.2f}x")
    sizes = [int(x) for x in args.rss_sizes.split(",") if x.strip()]
    if not sizes:
        return
    pool = work / f"photos-pool-{args.rss_pool}"
    if not (pool / ".info.json").is_file():
        shutil.rmtree(pool, ignore_errors=True)
        (pool / ".info.json").parent.mkdir(parents=True, exist_ok=True)
        info = make_photos(pool, args.rss_pool)
        (pool / ".info.json").write_text(json.dumps(info))
    for n in sizes:
        wall, rss = rss_at(pool, n, work, args.workers)
        print(f"shardcook raw, {n:>6} inputs: peak RSS {rss} MiB ({n / wall:.1f} images/s)")


if __name__ == "__main__":
    main()
