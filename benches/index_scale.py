"""How fast `finalize`'s indexing goes on a dataset of many small samples, with index.sqlite's
sample tables and without them (`--no-sample-tables`), extrapolated to a billion samples.

Usage:
    python benches/index_scale.py                          # 100,000,000 samples under bench-out/
    python benches/index_scale.py --samples 8000000 --out /tmp/idx --keep

The tars are generated directly, the way only a bench may: every sample is one empty member
`<10-digit key>.txt` (a 512-byte header, nothing else), so a sample costs 512 bytes of disk and
the headers are all the indexer reads: 100 M samples are 51 GB, 8 M are 4 GB. Keys run in order
over the whole dataset, as a writer numbering its samples makes them. The index is then built
twice, in-process through `build_index` (the `.tar.idx` files, `.info.json`, split.yaml and
index.uuid; first with index.sqlite's sample tables, then with `sample_tables=False`), and each
time is reported with samples/s and the time that rate gives for 1,000,000,000 samples, the load
average and the process's peak RSS so far (the run with the tables comes first).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import time
from pathlib import Path

import numpy as np
from shardcook import build_index

BLOCK = 512
BILLION = 1_000_000_000


#: Where the 10 key digits go: the header's name field, before ".txt".
DIGITS = 10


def _template() -> np.ndarray:
    """A ustar header of an empty regular file named `0000000000.txt`, its checksum field
    blank (spaces), as uint8."""
    h = bytearray(BLOCK)
    h[0:DIGITS + 4] = b"0" * DIGITS + b".txt"
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"00000000000\0"
    h[136:148] = b"00000000000\0"
    h[148:156] = b"        "
    h[156:157] = b"0"
    h[257:265] = b"ustar\x0000"
    return np.frombuffer(bytes(h), dtype=np.uint8)


def _headers(first: int, last: int, template: np.ndarray) -> bytes:
    """The headers of samples `first`..`last - 1`, built for all of them at once."""
    keys = np.arange(first, last, dtype=np.int64)
    block = np.tile(template, (last - first, 1))
    for d in range(DIGITS):
        block[:, DIGITS - 1 - d] = ord("0") + (keys // 10**d) % 10
    checksum = block.sum(axis=1, dtype=np.int64)
    for d in range(6):  # six octal digits, then NUL and space
        block[:, 148 + 5 - d] = ord("0") + (checksum >> (3 * d)) % 8
    block[:, 154] = 0
    block[:, 155] = ord(" ")
    return block.tobytes()


def write_shards(out: Path, samples: int, per_shard: int) -> int:
    """Writes the shards; returns how many."""
    out.mkdir(parents=True, exist_ok=True)
    template = _template()
    shards = -(-samples // per_shard)
    for n in range(shards):
        first, last = n * per_shard, min(samples, (n + 1) * per_shard)
        (out / f"shard-{n:06d}.tar").write_bytes(_headers(first, last, template)
                                                  + bytes(2 * BLOCK))
    return shards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000_000)
    parser.add_argument("--per-shard", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=Path("bench-out/index-scale"))
    parser.add_argument("--keep", action="store_true", help="Keep the generated dataset.")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    start = time.perf_counter()
    shards = write_shards(args.out, args.samples, args.per_shard)
    print(f"generated {args.samples:,} samples in {shards:,} shards "
          f"({args.samples * BLOCK / 1e9:.1f} GB) in {time.perf_counter() - start:.1f} s")
    try:
        for label, tables in (("with sample tables", True), ("--no-sample-tables", False)):
            result = build_index(args.out, split=(1, 0, 0), sample_tables=tables, force=True)
            rate = result.num_samples / result.seconds
            sqlite = args.out / ".nv-meta" / "index.sqlite"
            size = sqlite.stat().st_size / 1e9 if sqlite.exists() else 0.0
            print(f"{label}: {result.num_samples:,} samples in {result.seconds:.1f} s "
                  f"({rate:,.0f} samples/s; index.sqlite {size:.2f} GB); "
                  f"1 B samples: {BILLION / rate / 60:.0f} min; "
                  f"load average {os.getloadavg()[0]:.1f}; peak RSS so far "
                  f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    finally:
        if not args.keep:
            shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
