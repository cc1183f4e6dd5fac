"""MB/s of indexing a JSONL dataset: `shardcook finalize NAME.jsonl` (without its validation)
against Energon's `energon prepare NAME.jsonl` (its index function, in this process, so neither
side pays an interpreter's start), on two copies of the same file, and the two indexes compared
byte for byte.

Usage:
    python benches/jsonl_index.py                  # a 50 MB file of caption records
    python benches/jsonl_index.py --mb 200 --rounds 3

Work files go under bench-out/jsonl/.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import shardcook
from megatron.energon.epathlib import EPath
from megatron.energon.flavors.jsonl.jsonl_prepare import JsonlPreparator

WORDS = ("a", "dog", "on", "the", "beach", "red", "car", "under", "blue", "sky", "with", "two")


def write_jsonl(path: Path, megabytes: int) -> int:
    """A file of `megabytes` MB of caption records (image name and 5 to 30 words); returns its
    number of records."""
    rng = random.Random(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        while f.tell() < megabytes << 20:
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30)))
            f.write(json.dumps({"image": f"img_{n:09d}.jpg", "caption": words}) + "\n")
            n += 1
    return n


def timed(index: Callable[[Path], object], path: Path) -> float:
    start = time.perf_counter()
    index(path)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50, help="the file's size in MB")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; the median is printed")
    parser.add_argument("--out", type=Path, default=Path("bench-out/jsonl"))
    args = parser.parse_args()

    ours, theirs = args.out / "ours.jsonl", args.out / "energon.jsonl"
    records = write_jsonl(ours, args.mb)
    theirs.write_bytes(ours.read_bytes())
    size = ours.stat().st_size / 1e6

    ours_s, theirs_s = [], []
    for _ in range(args.rounds):
        ours_s.append(timed(lambda path: shardcook.finalize(path, validate=False), ours))
        theirs_s.append(timed(lambda path: JsonlPreparator.prepare_dataset(EPath(path)), theirs))
    same = (ours.with_suffix(".jsonl.idx").read_bytes()
            == theirs.with_suffix(".jsonl.idx").read_bytes())
    a, b = statistics.median(ours_s), statistics.median(theirs_s)
    print(f"{size:.1f} MB, {records:,} records, {args.rounds} round(s), median:")
    print(f"  shardcook finalize   {a:7.3f} s  {size / a:8.1f} MB/s")
    print(f"  energon prepare      {b:7.3f} s  {size / b:8.1f} MB/s")
    print(f"  ratio {b / a:.0f}x; indexes identical: {same}")
    if not same:
        raise SystemExit("the indexes differ")


if __name__ == "__main__":
    main()
