"""The scale measurement of docs/REPORT.md: N samples (a 16x16 JPEG, a caption and meta.json
each, 1,000 per shard) written with shardcook.ShardWriter and finalized into OUT, then
`shardcook report OUT` timed.

    python scripts/report-scale.py OUT N
"""

import io
import json
import subprocess
import sys
import time
from pathlib import Path

from PIL import Image
from shardcook import ShardWriter, finalize

out, n = Path(sys.argv[1]), int(sys.argv[2])
jpgs = []
for c in range(64):
    b = io.BytesIO()
    Image.new("RGB", (16, 16), (c * 4, 255 - c * 4, (c * 37) % 256)).save(b, "JPEG")
    jpgs.append(b.getvalue())
t = time.perf_counter()
with ShardWriter(out, shard_size=1000) as w:
    for i in range(n):
        meta = {"source": f"img{i}.jpg", "orig_size": [16, 16], "crop": [0, 0], "size": [16, 16]}
        w.write(f"{i:09d}", {"jpg": jpgs[i % 64], "txt": f"a tiny square number {i}".encode(),
                             "meta.json": json.dumps(meta).encode()})
print(f"wrote {n:,} samples in {time.perf_counter() - t:.1f} s")
t = time.perf_counter()
finalize(out, encoding="raw", split=(0.9, 0.1, 0))
print(f"finalized in {time.perf_counter() - t:.1f} s")
page = out.with_suffix(".html")
t = time.perf_counter()
subprocess.run(["shardcook", "report", str(out), "--out", str(page)], check=True)
print(f"report in {time.perf_counter() - t:.1f} s, {page.stat().st_size:,} bytes")
