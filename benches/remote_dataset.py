"""The dataset commands on a URL against the same dataset in a local folder: finalize, validate,
validate --deep and info, wall time of each.

    python benches/remote_dataset.py [--shards 48] [--per-shard 100]

Writes `--shards` raw shards (small generated JPEGs and captions) under bench-out/remote/,
uploads them to moto's S3 server started on 127.0.0.1 (an MSC profile pointing at it, as the
tests do; needs the test extra's `moto[server]`), then runs each command on the local folder and
on `msc://PROFILE/ds`. moto is a Python server: on a real store, its latency and bandwidth
dominate instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=48)
    parser.add_argument("--per-shard", type=int, default=100)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from shardcook import ShardWriter, finalize, validate
    from shardcook.dataset import info

    from tests.helpers.dataset import raw_parts
    from tests.helpers.s3server import S3Server, make_store

    work = ROOT / "bench-out" / "remote"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = S3Server()
    try:
        store = make_store(server, work / "cfg", "bench-bucket", "benchprofile")
        os.environ.update(store.env)
        folder = work / "ds"
        n = args.shards * args.per_shard
        with ShardWriter(folder, shard_size=args.per_shard) as w:
            for i in range(n):
                w.write(f"{i:010d}", raw_parts(i % 50))
        size = sum(p.stat().st_size for p in folder.glob("*.tar"))
        store.upload_folder(folder, "ds")
        print(f"{args.shards} shards, {n:,} samples, {size / 2**20:.1f} MiB")
        for label, target in (("local", str(folder)), ("url", store.url("ds"))):
            times = []
            for step in (partial(finalize, target, encoding="raw", split="0.9,0.05,0.05"),
                         partial(validate, target), partial(validate, target, deep=True),
                         partial(info, target)):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            print(f"{label:6} finalize {times[0]:.2f} s  validate {times[1]:.2f} s  "
                  f"validate --deep {times[2]:.2f} s  info {times[3]:.2f} s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
