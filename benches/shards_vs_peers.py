"""shardcook's shard core side by side with the tools it replaces, in one run, on this machine.

    python benches/shards_vs_peers.py [--scale 1000000] [--out bench-out]

Prints samples/s for us and the peer and the ratio:
- ShardWriter vs webdataset.TarWriter (4 parts of about 2 KB per sample), target >= 5x
- count_samples vs Python tarfile grouping members as Energon does, target >= 20x
- build_index vs Energon's in-process prepare_dataset on 20 shards x 1000 samples, target >= 20x
- build_index on --scale small samples, with and without sqlite (target >= 200,000 samples/s with)
"""

from __future__ import annotations

import argparse
import os
import shutil
import tarfile
import time
from pathlib import Path

PART_NAMES = ("latents.pth", "prompt_embeds.pth", "caption.txt", "meta.json")


def best_of(runs: int, fn) -> float:
    """The fastest of `runs` timed calls, in seconds (the least disturbed by other work)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def row(name: str, n: int, ours: float, peer: float, target: float) -> None:
    ratio = peer / ours
    verdict = "meets" if ratio >= target else "MISSES"
    print(
        f"{name:<44} ours {n / ours:>12,.0f}/s   peer {n / peer:>10,.0f}/s   "
        f"ratio {ratio:6.1f}x  ({verdict} {target:g}x)"
    )


def sample_parts(i: int) -> dict[str, bytes]:
    return {p: bytes([i % 251]) * 2000 for p in PART_NAMES}


def bench_write(out: Path, n: int) -> None:
    import webdataset as wds
    from shardcook import ShardWriter

    data = [(f"{i:010d}", sample_parts(i)) for i in range(n)]

    def ours():
        d = out / "w-ours"
        shutil.rmtree(d, ignore_errors=True)
        with ShardWriter(d, shard_size=1000) as w:
            for key, parts in data:
                w.write(key, parts)

    def peer():
        d = out / "w-wds"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        with wds.ShardWriter(str(d / "%06d.tar"), maxcount=1000, verbose=0) as w:
            for key, parts in data:
                w.write({"__key__": key, **parts})

    row("write (vs webdataset.ShardWriter)", n, best_of(3, ours), best_of(3, peer), 5)


def tarfile_count(path: Path) -> int:
    """What Energon's prepare does per shard, minus the index: tarfile members grouped by key."""
    count, last = 0, None
    with tarfile.open(path, "r:") as tar:
        for m in tar:
            if not m.isreg():
                continue
            key = m.name.split(".", 1)[0]
            if key != last:
                count, last = count + 1, key
    return count


def bench_count(shards: list[Path], n: int) -> None:
    from shardcook import count_samples

    ours = best_of(3, lambda: [count_samples(s) for s in shards])
    peer = best_of(3, lambda: [tarfile_count(s) for s in shards])
    assert sum(count_samples(s) for s in shards) == sum(tarfile_count(s) for s in shards) == n
    row("count_samples (vs tarfile)", n, ours, peer, 20)


def fresh_copy(src: Path, dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for p in src.glob("*.tar"):
        os.link(p, dst / p.name)  # hard links: no copying, and a clean .nv-meta each time
    return dst


def bench_index(src: Path, out: Path, n: int) -> None:
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory
    from shardcook import build_index

    shards = sorted(p.name for p in src.glob("*.tar"))

    def ours():
        build_index(fresh_copy(src, out / "i-ours"), split=(1, 0, 0))

    def peer():
        BaseWebdatasetFactory.prepare_dataset(
            fresh_copy(src, out / "i-energon"),
            shards,
            split_parts_ratio=[("train", 1.0), ("val", 0.0), ("test", 0.0)],
            shuffle_seed=None,
            workers=os.cpu_count(),
        )

    row("build_index (vs energon prepare_dataset)", n, best_of(3, ours), best_of(2, peer), 20)


def bench_scale(out: Path, n: int) -> None:
    from shardcook import ShardWriter, build_index

    d = out / "scale"
    if not (d / f"{(n - 1) // 1000:06d}.tar").exists():
        shutil.rmtree(d, ignore_errors=True)
        with ShardWriter(d, shard_size=1000) as w:
            for i in range(n):
                w.write(f"{i:010d}", {"txt": b"a small caption", "json": b'{"w": 64}'})
    for sqlite in (False, True):
        seconds = best_of(3, lambda sqlite=sqlite: build_index(d, sqlite=sqlite, force=True))
        target = "  (target >= 200,000/s)" if sqlite else ""
        print(
            f"index {n:,} samples, sqlite={sqlite!s:<5}                 "
            f"{n / seconds:>12,.0f} samples/s in {seconds:.1f} s{target}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=20_000, help="samples for write/count/index")
    parser.add_argument(
        "--scale", type=int, default=1_000_000, help="samples for the scale run (0: skip)"
    )
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} cores; {args.samples:,} samples of 4 x 2 KB parts, 1000 per shard")
    bench_write(args.out, args.samples)
    src = args.out / "w-ours"
    shards = sorted(src.glob("*.tar"))
    bench_count(shards, args.samples)
    bench_index(src, args.out, args.samples)
    if args.scale:
        bench_scale(args.out, args.scale)


if __name__ == "__main__":
    main()
