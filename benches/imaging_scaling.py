"""Thread scaling of shardcook.imaging.preprocess: wall and CPU time, 1 vs 2 workers, alternated.

CPU time close to 2× wall time means both cores worked; CPU ≈ wall at 2 workers means another
process held the second core (check before trusting a scaling number).

    python benches/imaging_scaling.py [JPEG,PNG,WEBP]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from imaging_vs_pillow import corpus
from shardcook import imaging


def main() -> None:
    formats = sys.argv[1].split(",") if len(sys.argv) > 1 else ["JPEG", "PNG", "WEBP"]
    for fmt in formats:
        data = corpus(fmt) * 3
        for t in (1, 2, 1, 2):
            imaging.preprocess(data, size=256, workers=t)
            w0, c0 = time.perf_counter(), time.process_time()
            imaging.preprocess(data, size=256, workers=t)
            w, c = time.perf_counter() - w0, time.process_time() - c0
            print(
                f"{fmt:5} 256 workers={t} wall {w * 1000:5.0f} ms cpu {c * 1000:5.0f} ms "
                f"{len(data) / w:6.1f} img/s  load {os.getloadavg()[0]:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
