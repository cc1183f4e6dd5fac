"""Thread scaling of shardcook.imaging.preprocess: wall and CPU time, 1 vs 2 workers, alternated.

CPU time close to 2× wall time means both cores worked; CPU ≈ wall at 2 workers means another
process held the second core (check before trusting a scaling number).

    python benches/imaging_scaling.py [--formats JPEG,PNG,WEBP] [--sizes 256,1024] [--copies 8]
        [--rounds 3]

Each round times one batch (`copies` × the 8 photos of imaging_vs_pillow.py) at 1 and at 2
workers; the ratio printed last is the median over rounds of (1-worker wall / 2-worker wall).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from imaging_vs_pillow import corpus
from shardcook import imaging


def timed(data: list[bytes], size: int, workers: int) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    imaging.preprocess(data, size=size, workers=workers)
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--formats", default="JPEG,PNG,WEBP")
    p.add_argument("--sizes", default="256,1024")
    p.add_argument("--copies", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    for fmt in args.formats.split(","):
        data = corpus(fmt) * args.copies
        for size in (int(s) for s in args.sizes.split(",")):
            imaging.preprocess(data[:8], size=size, workers=2)  # warm up both pools
            imaging.preprocess(data[:8], size=size, workers=1)
            ratios = []
            for _ in range(args.rounds):
                (w1, _), (w2, c2) = timed(data, size, 1), timed(data, size, 2)
                ratios.append(w1 / w2)
                print(f"{fmt:5} {size:>5} 1 worker {len(data) / w1:6.1f} img/s | 2 workers "
                      f"{len(data) / w2:6.1f} img/s, cpu/wall {c2 / w2:.2f} | {w1 / w2:.2f}x  "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
            print(f"{fmt:5} {size:>5} median scaling over {args.rounds} rounds of {len(data)} "
                  f"images: {statistics.median(ratios):.2f}x", flush=True)


if __name__ == "__main__":
    main()
