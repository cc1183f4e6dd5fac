"""Object storage side by side with a local folder, and `shardcook finalize` with `energon
prepare`, both on the same dataset in a bucket.

    python benches/object_storage.py [--photos 500] [--samples 1000] [--runs 2]

1. `shardcook raw` of the same real photos (benches/raw_vs_peers.py's) into a local folder and
   into `msc://PROFILE/...`, alternately, best of --runs each (`--no-finalize`: the writing and
   the uploads it overlaps); the peak scratch space of the bucket run against its bound.
2. `shardcook finalize` and `energon prepare` on two copies of the same --samples raw samples in
   the bucket (each a new process, as a user runs them).
3. validate, validate --deep and info on the bucket dataset against its local copy.

The store is moto's S3 server started on 127.0.0.1 with an MSC profile pointing at it, as the
tests do (needs the test extra's `moto[server]`). moto is a Python server on the same cores; a
real store's latency and bandwidth replace its costs. Work files go under bench-out/storage/.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARD_SIZE = 50
UPLOAD_QUEUE = 4


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return seconds


def bench_raw(store, photos: Path, work: Path, runs: int) -> None:
    def raw(out: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "shardcook", "raw", "--input-dir", str(photos),
                "--output-dir", out, "--shard-size", str(SHARD_SIZE), "--no-finalize",
                "--quiet", "--overwrite", *extra]

    n = sum(1 for p in photos.iterdir() if p.suffix in (".jpg", ".png", ".webp"))
    local, bucket = [], []
    for _ in range(runs):
        local.append(timed(raw(str(work / "raw-local"))))
        bucket.append(timed(raw(store.url("raw"), "--scratch-dir", str(work / "scratch"),
                                "--upload-queue", str(UPLOAD_QUEUE))))
    best_local, best_bucket = min(local), min(bucket)
    print(f"raw, {n} photos -> {SHARD_SIZE}-sample shards (best of {runs}, each run a new "
          "process, --no-finalize)")
    print(f"  local folder   {best_local:6.2f} s  {n / best_local:7.1f} images/s")
    print(f"  msc:// bucket  {best_bucket:6.2f} s  {n / best_bucket:7.1f} images/s   "
          f"{best_local / best_bucket:.2f}x local (goal >= 0.8x)")
    report = json.loads(store.get("raw/.shardcook/report.json"))
    sizes = [len(store.get(k)) for k in store.keys("raw/") if k.endswith(".tar")]
    bound = (UPLOAD_QUEUE + 1) * max(sizes)
    print(f"  scratch peak   {report['scratch_peak_bytes'] / 2**20:6.1f} MiB of a bound of "
          f"{bound / 2**20:.1f} MiB ((--upload-queue {UPLOAD_QUEUE} + 1) x the largest shard, "
          f"{max(sizes) / 2**20:.1f} MiB)")


def bench_finalize(store, work: Path, samples: int, per_shard: int) -> None:
    from shardcook import ShardWriter

    from tests.helpers.dataset import raw_parts

    folder = work / "samples"
    with ShardWriter(folder, shard_size=per_shard) as w:
        for i in range(samples):
            w.write(f"{i:010d}", raw_parts(i % 50))
    for prefix in ("ours", "energon", "ours-index", "energon-index"):
        store.upload_folder(folder, prefix)
    ours = timed([sys.executable, "-m", "shardcook", "finalize", store.url("ours"),
                  "--encoding", "raw", "--scratch-dir", str(work / "scratch")])
    theirs = timed([sys.executable, "-m", "megatron.energon.cli.main", "prepare",
                    "--non-interactive", "--sample-type", "CrudeWebdataset",
                    "--split-ratio", "1,0,0", store.url("energon")])
    shards = -(-samples // per_shard)
    print(f"finalize, {samples} samples in {shards} shards in the bucket (each a new process)")
    print(f"  shardcook finalize  {ours:6.2f} s (indexes, writes dataset.yaml, validates)")
    print(f"  energon prepare     {theirs:6.2f} s   shardcook {theirs / ours:.1f}x faster "
          "(goal >= 10x)")
    # The indexing alone, in this process (imports done): what is left once both commands'
    # start-up (torch and Energon, about 3 s each, which finalize's validation needs too) is
    # paid.
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory
    from shardcook import build_index

    names = sorted(p.name for p in folder.glob("*.tar"))
    start = time.perf_counter()
    build_index(store.url("ours-index"), split=(1, 0, 0))
    ours_index = time.perf_counter() - start
    start = time.perf_counter()
    BaseWebdatasetFactory.prepare_dataset(
        EPath(store.url("energon-index")), names,
        split_parts_ratio=[("train", 1.0), ("val", 0.0), ("test", 0.0)], shuffle_seed=None,
        workers=os.cpu_count() or 1)
    theirs_index = time.perf_counter() - start
    print(f"  indexing alone, in-process: shardcook build_index {ours_index:.2f} s, Energon's "
          f"prepare_dataset {theirs_index:.2f} s ({theirs_index / ours_index:.1f}x)")


def bench_dataset_commands(store, work: Path) -> None:
    from shardcook import validate
    from shardcook.dataset import info

    local = work / "samples-copy"
    store.download_folder("ours", local)
    print("dataset commands, the finalized bucket dataset against its local copy (in-process)")
    validate(str(local))  # the imports, untimed
    for label, target in (("local folder", str(local)), ("msc:// bucket", store.url("ours"))):
        times = []
        for step in (partial(validate, target), partial(validate, target, deep=True),
                     partial(info, target)):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        print(f"  {label:14} validate {times[0]:5.2f} s  validate --deep {times[1]:5.2f} s  "
              f"info {times[2]:5.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=500)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--per-shard", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from raw_vs_peers import make_photos

    from tests.helpers.s3server import S3Server, make_store

    work = ROOT / "bench-out" / "storage"
    photos = work / f"photos-{args.photos}"
    if not photos.is_dir():
        make_photos(photos, args.photos)
    for stale in ("samples", "samples-copy", "scratch", "cfg"):
        shutil.rmtree(work / stale, ignore_errors=True)
    server = S3Server()
    try:
        store = make_store(server, work / "cfg", "bench-bucket", "benchprofile")
        os.environ.update(store.env)
        print(f"{os.cpu_count()} cores; moto's S3 server on 127.0.0.1\n")
        bench_raw(store, photos, work, args.runs)
        print()
        bench_finalize(store, work, args.samples, args.per_shard)
        print()
        bench_dataset_commands(store, work)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
