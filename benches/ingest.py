"""Arrow -> shards for MLPerf Flux.1 data: `shardcook ingest`'s conversion side by side with a
plain pyarrow + tarfile loop written the way Primus's `diffusion-ingest` pipeline converts a file
(`pyarrow.ipc.open_stream(...).read_all()`, per-row `column[i].as_py()`, `tarfile.addfile` of each
part and a json sidecar), on the same Arrow IPC stream files in MLCommons's schema.

    python benches/ingest.py [--files 3] [--rows 64] [--repeats 3]

Rows hold MLPerf's sizes: T5 `[256, 4096]`, CLIP `[768]`, mean and logvar `[16, 32, 32]`, each a
uint16 `.npy` (bf16 bits), about 2.1 MB per row. Both sides read the same files from a warm page
cache and write under bench-out/ingest (git-ignored); shardcook's writer also fsyncs each shard,
the loop does not. Prints MB/s of Arrow input for each (median of the repeats), the ratio, and
the same bytes merely copied and fsync'd (the disk's bound for this work).
Downloads are left out: both sides fetch with the same urllib loop, so the network limits them
equally.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "ingest"
SHAPES = {"t5_encodings": (256, 4096), "clip_encodings": (768,), "mean": (16, 32, 32),
          "logvar": (16, 32, 32)}
PARTS = ("t5.bytes", "clip.bytes", "mean.bytes", "logvar.bytes")


def npy(shape: tuple[int, ...], rng: np.random.Generator) -> bytes:
    buf = io.BytesIO()
    np.save(buf, rng.integers(0, 1 << 16, size=shape, dtype=np.uint16))
    return buf.getvalue()


def make_inputs(folder: Path, files: int, rows: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    schema = pa.schema([pa.field("__key__", pa.string())]
                       + [pa.field(c, pa.binary()) for c in SHAPES])
    paths = []
    for f in range(files):
        path = folder / f"part-{f:05d}.arrow"
        paths.append(path)
        if path.is_file():
            continue
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for start in range(0, rows, 16):
                n = min(16, rows - start)
                cols = [pa.array([f"{f:05d}{start + i:06d}" for i in range(n)])]
                cols += [pa.array([npy(s, rng) for _ in range(n)], pa.binary())
                         for s in SHAPES.values()]
                writer.write_batch(pa.record_batch(cols, schema=schema))
    return paths


def primus_loop(arrow_path: Path, tar_path: Path) -> int:
    """The conversion as Primus's `_arrow_to_tar` does it (re-typed from its public source:
    AMD-AGI/Primus, primus/backends/megatron/data/diffusion/preprocessing/pipelines/ingest.py)."""
    table = pa.ipc.open_stream(str(arrow_path)).read_all()
    timestep_col = table.column("timestep") if "timestep" in table.schema.names else None
    with tarfile.open(str(tar_path), "w") as tar:
        for row in range(table.num_rows):
            base = table.column("__key__")[row].as_py()
            for column, part in zip(SHAPES, PARTS, strict=True):
                data = bytes(table.column(column)[row].as_py())
                info = tarfile.TarInfo(name=f"{base}.{part}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            meta: dict[str, object] = {"key": base}
            if timestep_col is not None:
                meta["timestep"] = timestep_col[row].as_py()
            raw = json.dumps(meta).encode("utf-8")
            info = tarfile.TarInfo(name=f"{base}.json")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return int(table.num_rows)


def shardcook_convert(arrow_path: Path, out: Path, index: int) -> int:
    from shardcook.jobs.ingest.run import Unit, convert

    return convert(Unit("train", index, arrow_path.name, local=arrow_path), arrow_path, out)


def plain_copy(arrow_path: Path, out: Path, index: int) -> int:
    """The disk's bound for this work: the same bytes copied to one file and fsync'd."""
    dest = out / f"copy_{index:06d}"
    shutil.copyfile(arrow_path, dest)
    with open(dest, "rb+") as f:
        os.fsync(f.fileno())
    return 0


def timed(fn: object, paths: list[Path], out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    start = time.perf_counter()
    for i, path in enumerate(paths):
        if fn is primus_loop:
            primus_loop(path, out / f"shard_{i:06d}.tar")
        elif fn is plain_copy:
            plain_copy(path, out, i)
        else:
            shardcook_convert(path, out, i)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    paths = make_inputs(WORK / "arrow", args.files, args.rows)
    megabytes = sum(p.stat().st_size for p in paths) / 1e6
    for p in paths:  # warm the page cache for both
        p.read_bytes()
    results = {}
    for name, fn in (("primus-style loop", primus_loop), ("shardcook ingest", shardcook_convert),
                     ("copy + fsync", plain_copy)):
        seconds = [timed(fn, paths, WORK / "out") for _ in range(args.repeats)]
        results[name] = megabytes / statistics.median(seconds)
        print(f"{name:<18} {results[name]:8.1f} MB/s  ({megabytes:.0f} MB in "
              f"{statistics.median(seconds):.2f} s, median of {args.repeats})")
    shutil.rmtree(WORK / "out", ignore_errors=True)
    ratio = results["shardcook ingest"] / results["primus-style loop"]
    print(f"shardcook / loop: {ratio:.2f}x; shardcook / disk copy: "
          f"{results['shardcook ingest'] / results['copy + fsync']:.2f}")


if __name__ == "__main__":
    main()
