"""Object storage side by side with a local folder, and `shardcook finalize` with `energon
prepare`, both on the same dataset in a bucket.

    python benches/object_storage.py [--photos 500] [--samples 1000] [--runs 2]
    python benches/object_storage.py --foreign-only [--foreign-shards 200] [--foreign-per-shard 100]
    python benches/object_storage.py --server moto|s3s [--s3s-fs PATH] [--rust-client] ...
    python benches/object_storage.py --store-model [--latencies 0,5,20,50] [--sizes images,latents]
        [--model-shards 200] [--images-per-shard 100] [--latents-per-shard 10] [--model-runs 3]
    python benches/object_storage.py --serve images|latents MS   (part 5's store, to time by hand)

1. `shardcook raw` of the same real photos (benches/raw_vs_peers.py's) into a local folder and
   into `msc://PROFILE/...`, alternately, best of --runs each (`--no-finalize`: the writing and
   the uploads it overlaps); the peak scratch space of the bucket run against its bound.
2. `shardcook raw --no-finalize` of --samples photos into the bucket, then `shardcook finalize`
   on it, on a copy without the index rows the run recorded (as for tars another tool wrote),
   and `energon prepare` on a third copy (each a new process, as a user runs them).
3. validate, validate --deep and info on the bucket dataset against its local copy.
4. Tars another tool wrote (Python's tarfile: --foreign-shards shards of --foreign-per-shard
   samples, each a ~100 KB `.bin` and a small `.json`), put straight into the bucket: `shardcook
   finalize` (header walks with ranged reads) against `energon prepare`, each a new process
   timed against the store directly, then run on another copy through a proxy on 127.0.0.1
   that counts the bytes the store sent (`--rust-client`: finalize's profile turns on MSC's
   Rust client).
   `--foreign-only` runs this part alone.
5. `--store-model` (this part alone): tars another tool wrote, of two sample sizes (images: a
   ~100 KB .jpg, a .json and a .txt; latents: a ~2 MB .latent.npy and a .json), through a model
   of a store over a network (tests/helpers/storeproxy.py, a process of its own: each response's
   first byte and each new connection held back --latencies ms, 50 MB/s a connection; it counts
   requests and bytes): `shardcook finalize` as it chooses, forced to walk and forced to stream
   (SHARDCOOK_TAR_READS), and `energon prepare`, --model-runs times each in turn, with the CPU
   of the command, the server and the proxy. Each point's floors: the chain of round trips at
   full concurrency, the bytes over the links, and the CPU that many GETs and bytes cost the
   client, the server and the proxy (measured first with a minimal client on MSC's Rust client).

The store is an S3 server started on 127.0.0.1 with an MSC profile pointing at it, as the tests
do, on the same cores as the commands; a real store's latency and bandwidth replace its costs.
`--server s3s` (the default): s3s-fs, a compiled S3 server over a folder, which answers a ranged
GET in well under a millisecond of its own CPU, so, as on a real store, the client's requests are
the cost, not the server's (`bash benches/install_s3s_fs.sh` builds it, from crates.io with three
fixes that make it answer as S3 does). `--server moto`: moto's server (the test extra's
`moto[server]`), the tests' store, a Python server that serves about 200 ranged GETs a second
on two shared cores, far fewer than any real store. Work files go under bench-out/storage/.

`energon prepare` runs with boto3's response checksums unchecked
(`AWS_RESPONSE_CHECKSUM_VALIDATION=when_required`): with them checked, on s3s-fs, the
download of its first shard fails their CRC32 check (the body it got is not the object,
which boto3 alone, reading the same object, gets right) and it stops with "Shard ... has no
samples". Unchecked, it goes on, so the part 4 summary says how many samples each command
indexed per copy.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
S3S_FS = ROOT / "bench-out" / "s3s" / "bin" / "s3s-fs"
SHARD_SIZE = 50
UPLOAD_QUEUE = 4
RUST_NOTE = "finalize's profile with MSC's Rust client on, "


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return seconds


class S3sFsServer:
    """s3s-fs (a compiled S3 server over a folder) on a free port of 127.0.0.1, with the tests'
    key and secret (SigV4 checked), in a process of its own; `client`, `port` and `endpoint` as
    the tests' moto server has them."""

    def __init__(self, binary: Path, data: Path) -> None:
        from tests.helpers.s3server import ACCESS_KEY, SECRET_KEY, free_port

        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._process = self.process = subprocess.Popen(
            [str(binary), "--host", "127.0.0.1", "--port", str(self.port), "--access-key",
             ACCESS_KEY, "--secret-key", SECRET_KEY, str(data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"{binary} did not start on port {self.port}") from None
                time.sleep(0.1)

    def client(self):  # boto3, for what MSC has no call for (a bucket, server-side copies)
        import boto3

        from tests.helpers.s3server import ACCESS_KEY, REGION, SECRET_KEY

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def start_server(kind: str, binary: Path, work: Path):
    """The S3 server `--server` names, or one sentence why it cannot start."""
    if kind == "moto":
        from tests.helpers.s3server import S3Server

        return S3Server(), "moto's S3 server (Python, in the bench's process)"
    if not binary.is_file():
        raise SystemExit(f"no s3s-fs at {binary}: build it with `bash "
                         "benches/install_s3s_fs.sh`, or run with --server moto")
    return S3sFsServer(binary, work / "s3s-data"), "s3s-fs 0.14.1 (Rust, its own process)"


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
          f"{best_local / best_bucket:.2f}x local")
    report = json.loads(store.get("raw/.shardcook/report.json"))
    staged = {k: len(store.get(k)) for k in store.keys("raw/")}
    sizes = [n + staged[f"{k}.idx"] + staged[k.replace("raw/", "raw/.shardcook/index/", 1) +
                                              ".sqlite"]
             for k, n in staged.items() if k.endswith(".tar")]
    bound = (UPLOAD_QUEUE + 1) * max(sizes)
    print(f"  scratch peak   {report['scratch_peak_bytes'] / 2**20:6.1f} MiB of a bound of "
          f"{bound / 2**20:.1f} MiB ((--upload-queue {UPLOAD_QUEUE} + 1) x the largest shard "
          f"with its index files, {max(sizes) / 2**20:.1f} MiB)")


def copy_objects(store, source: str, target: str, skip: str) -> None:
    """Copies every object under `source` to `target` inside the bucket (server-side), leaving
    out those under `source/skip`."""
    client = store.server.client()
    for key in store.keys(f"{source}/"):
        if not key.startswith(f"{source}/{skip}"):
            client.copy_object(Bucket=store.bucket, Key=f"{target}/{key[len(source) + 1:]}",
                               CopySource={"Bucket": store.bucket, "Key": key})


def bench_finalize(store, photos: Path, work: Path, per_shard: int) -> None:
    """`shardcook raw --no-finalize` of the photos into the bucket, then on three copies of
    those objects: `shardcook finalize` (which uses the index rows the run recorded), the same
    with the rows removed (what finalize does on tars another tool wrote), `energon prepare`."""
    from shardcook.dataset.index.shardrows import ROWS_DIR

    timed([sys.executable, "-m", "shardcook", "raw", "--input-dir", str(photos),
           "--output-dir", store.url("run"), "--shard-size", str(per_shard), "--no-finalize",
           "--quiet", "--overwrite", "--scratch-dir", str(work / "scratch")])
    copy_objects(store, "run", "ours", skip=".shardcook/progress")
    copy_objects(store, "run", "foreign", skip=".shardcook")
    copy_objects(store, "run", "energon", skip=".shardcook")
    tars = [k for k in store.keys("run/") if k.endswith(".tar")]
    size = sum(len(store.get(k)) for k in tars)
    samples = sum(1 for p in photos.iterdir() if p.suffix in (".jpg", ".png", ".webp"))

    def finalize(prefix: str) -> float:
        return timed([sys.executable, "-m", "shardcook", "finalize", store.url(prefix),
                      "--encoding", "raw", "--scratch-dir", str(work / "scratch")])

    ours = finalize("ours")
    foreign = finalize("foreign")
    theirs = timed([sys.executable, "-m", "megatron.energon.cli.main", "prepare",
                    "--non-interactive", "--sample-type", "CrudeWebdataset",
                    "--split-ratio", "1,0,0", store.url("energon")])
    print(f"finalize, {samples} raw samples of `shardcook raw` in {len(tars)} shards "
          f"({size / 2**20:.0f} MiB) in the bucket (each command a new process)")
    print(f"  shardcook finalize, shards of a shardcook run  {ours:6.2f} s   "
          f"{theirs / ours:4.1f}x energon prepare")
    print(f"  shardcook finalize, the same tars without the index rows in {ROWS_DIR}/ "
          f"(as from another tool)  {foreign:6.2f} s   {theirs / foreign:4.1f}x")
    print(f"  energon prepare                                {theirs:6.2f} s")


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


def _member(ext: str, size: int) -> bytes:
    """~`size` random bytes that a reader of `ext` takes: a tiny JPEG with the rest after its
    end (which decoders ignore), an .npy of random bytes; otherwise the bytes alone."""
    if ext == "jpg":
        from PIL import Image

        out = io.BytesIO()
        Image.new("RGB", (8, 8), (size % 256, 90, 160)).save(out, "JPEG")
        return out.getvalue() + os.urandom(max(0, size - out.tell()))
    if ext.endswith(".npy"):
        import numpy as np

        out = io.BytesIO()
        np.save(out, np.frombuffer(os.urandom(size), dtype=np.uint8))
        return out.getvalue()
    return os.urandom(size)


def foreign_tar(shard: int, samples: int, member: int, big: str = "bin",
                small: tuple[str, ...] = ("json",)) -> bytes:
    """A WebDataset tar as another tool writes one (Python's tarfile, ustar headers): per
    sample a `big` member of ~`member` bytes and `small` ones (a json, a caption)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            key = f"{shard:06d}{i:05d}"
            size = member + (i * 7919) % (member // 5) - member // 10  # ~member bytes, varied
            parts = [(big, _member(big, size))]
            for ext in small:
                parts.append((ext, json.dumps({"key": key, "i": i}).encode() if ext == "json"
                              else f"a caption of sample {i} of shard {shard}".encode()))
            for ext, data in parts:
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def bench_foreign(store, work: Path, shards: int, per_shard: int, rust_client: bool) -> None:
    """finalize on tars no shardcook run wrote against energon prepare: each command timed
    against the store directly, then run again on another copy through the counting proxy for
    the bytes it read (the proxy is Python on the same cores: forwarding thousands of small
    responses costs CPU no real store takes from its clients, so it is never in a timed run).
    With `rust_client`, finalize's profile turns on MSC's Rust client (energon prepare keeps
    boto3: under that profile it fails on s3s-fs, not finding the index.sqlite it wrote)."""
    from tests.helpers.s3server import add_profile
    from tests.helpers.tcpproxy import TcpProxy

    (work / "scratch").mkdir(parents=True, exist_ok=True)
    size = 0
    for shard in range(shards):
        data = foreign_tar(shard, per_shard, 100_000)
        size += len(data)
        store.put(f"foreign/shard-{shard:06d}.tar", data)
    for copy in ("foreign-counted", "foreign-energon", "foreign-energon-counted"):
        copy_objects(store, "foreign", copy, skip=".nv-meta")
    proxy = TcpProxy(store.server.port)
    direct = f"msc://{store.profile}"
    counted = add_profile(store, "counted" + store.profile, endpoint_url=proxy.endpoint)
    ours, ours_counted = direct, counted
    if rust_client:
        ours = add_profile(store, "rust" + store.profile, rust_client={"allow_http": True})
        ours_counted = add_profile(store, "countedrust" + store.profile,
                                   endpoint_url=proxy.endpoint, rust_client={"allow_http": True})

    def finalize(url: str) -> list[str]:
        return [sys.executable, "-m", "shardcook", "finalize", url, "--encoding", "generic",
                "--scratch-dir", str(work / "scratch")]

    def prepare(url: str) -> list[str]:
        # boto3 checks no response's CRC32 for energon (see the module docstring: it would
        # fail on the first shard, every time)
        return ["env", "AWS_RESPONSE_CHECKSUM_VALIDATION=when_required", sys.executable, "-m",
                "megatron.energon.cli.main", "prepare", "--non-interactive", "--sample-type",
                "CrudeWebdataset", "--split-ratio", "1,0,0", url]

    try:
        seconds, read, proxied = {}, {}, {}
        for label, timed_cmd, counted_cmd in (
                ("shardcook finalize", finalize(f"{ours}/foreign"),
                 finalize(f"{ours_counted}/foreign-counted")),
                ("energon prepare", prepare(f"{direct}/foreign-energon"),
                 prepare(f"{counted}/foreign-energon-counted"))):
            seconds[label] = timed_retried(label, timed_cmd)
            before = proxy.downloaded
            proxied[label] = timed_retried(label, counted_cmd)
            read[label] = proxy.downloaded - before
    finally:
        proxy.stop()
    print(f"finalize, tars another tool wrote: {shards} shards, {shards * per_shard:,} samples "
          f"(a ~100 KB .bin and a .json each), {size / 2**20:,.0f} MiB, each command a new "
          f"process, {RUST_NOTE if rust_client else ''}timed against the store directly; bytes "
          "the store sent (HTTP included) counted in a second run through the counting proxy")
    for label, took in seconds.items():
        print(f"  {label:18} {took or float('nan'):7.2f} s  read {read[label] / 2**20:8.1f} MiB "
              f"({100 * read[label] / size:5.1f}% of the dataset; "
              f"{proxied[label] or float('nan'):.2f} s through the proxy)")
    if seconds["energon prepare"] and seconds["shardcook finalize"]:
        ratio = seconds["energon prepare"] / seconds["shardcook finalize"]
        print(f"  shardcook finalize is {ratio:.1f}x energon prepare")
    for prefix in ("foreign", "foreign-counted", "foreign-energon", "foreign-energon-counted"):
        counts = json.loads(store.get(f"{prefix}/.nv-meta/.info.json"))["shard_counts"]
        short = {name: n for name, n in counts.items() if n != per_shard}
        print(f"  {prefix}: {sum(counts.values()):,} samples indexed"
              + (f"; short: {short}" if short else ""))


#: The store model of part 5: each response's first byte and each new connection this many
#: milliseconds late, each connection paced at `MODEL_LINK` bytes a second.
MODEL_LATENCIES_MS = (0, 5, 20, 50)
MODEL_LINK = 50e6
#: name -> (the big member's bytes, its extension, the small members)
MODEL_SAMPLES = {"images": (100_000, "jpg", ("json", "txt")),
                 "latents": (2_000_000, "latent.npy", ("json",))}
#: The ways shardcook finalize runs at each point: as it chooses, and each way forced.
MODEL_WAYS = {"shardcook": "auto", "walk": "walk", "stream": "stream"}


def cpu_of(pid: int) -> float:
    """Seconds of CPU process `pid` has used (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(cmd: list[str], env: dict[str, str], server_pid: int, proxy) -> dict[str, float]:
    """Runs `cmd` through the store proxy: its wall seconds, the CPU seconds of the command
    (its waited-for children included), the server and the proxy, and what passed the proxy."""
    import resource

    def children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    before, server, proxied = children(), cpu_of(server_pid), proxy.stats()
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = proxy.stats()
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return {"wall": wall, "client": children() - before, "server": cpu_of(server_pid) - server,
            "proxy": after["cpu_seconds"] - proxied["cpu_seconds"],
            "gets": after["by_method"].get("GET", 0) - proxied["by_method"].get("GET", 0),
            "requests": after["requests"] - proxied["requests"],
            "bytes": after["downloaded"] - proxied["downloaded"], "said": r.stderr}


def calibrate(url: str, names: list[str], small: int, large: int) -> None:
    """The minimal client (`--calibrate`): `small` ranged reads of 3 KiB and `large` of 8 MiB of
    the objects `names` under `url` on MSC's Rust client, as many at once as finalize has; prints
    the CPU seconds each phase cost this process, as JSON."""
    from shardcook.dataset.fetched import RUST_WALKS_AT_ONCE
    from shardcook.dataset.tarreads import STREAM_PIECE, STREAMS_AT_ONCE
    from shardcook.storage import Remote

    reads = Remote(url).rust_reads(RUST_WALKS_AT_ONCE)
    assert reads is not None, "the profile has no Rust client"
    out = {}
    for phase, count, size, at_once in (("small", small, 3072, RUST_WALKS_AT_ONCE),
                                        ("large", large, STREAM_PIECE, STREAMS_AT_ONCE)):
        import asyncio

        slots = asyncio.Semaphore(at_once)

        async def one(i: int, size: int = size, slots=slots) -> int:
            async with slots:
                return len(await reads.read_range(names[i % len(names)], 0, size))

        start, wall = time.process_time(), time.perf_counter()
        got = sum(f.result() for f in [reads.submit(partial(one, i)) for i in range(count)])
        out[phase] = {"cpu": time.process_time() - start, "wall": time.perf_counter() - wall,
                      "bytes": got}
    reads.close()
    print(json.dumps(out))


def model_costs(url: str, names: list[str], env: dict[str, str], server_pid: int,
                proxy) -> tuple[float, float]:
    """CPU seconds per GET and per byte that the minimal client (`calibrate`), the server and
    the proxy spend together, at the proxy's settings."""
    small, large = 4000, 64
    server, proxied = cpu_of(server_pid), proxy.stats()["cpu_seconds"]
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--calibrate", url,
                        str(small), str(large), *names], capture_output=True, text=True,
                       env=env, check=False)
    if r.returncode != 0:
        raise SystemExit(f"the calibration failed:\n{r.stderr[-3000:]}")
    phases = json.loads(r.stdout.strip().splitlines()[-1])
    # the server's and the proxy's share, split between the phases by the client's own
    rest = (cpu_of(server_pid) - server) + (proxy.stats()["cpu_seconds"] - proxied)
    client = phases["small"]["cpu"] + phases["large"]["cpu"]
    per_get = (phases["small"]["cpu"] + rest * phases["small"]["cpu"] / client) / small
    large_cpu = phases["large"]["cpu"] + rest * phases["large"]["cpu"] / client
    per_byte = max(0.0, large_cpu - large * per_get) / phases["large"]["bytes"]
    return per_get, per_byte


def floors(run: dict[str, float], tars: int, latency: float, at_once: int, per_get: float,
           per_byte: float) -> dict[str, float]:
    """The least time a run of these GETs and bytes can take: its chain of round trips at
    `at_once` tars at a time (a walk's: its GETs per tar one after the other), its bytes over
    `at_once` links, and the CPU that many GETs and bytes cost the client, the server and the
    proxy on this machine's cores."""
    cores = os.cpu_count() or 1
    waves = -(-tars // at_once)
    return {"latency": latency + waves * run["gets"] / tars * latency,
            "links": run["bytes"] / (min(tars, at_once) * MODEL_LINK),
            "cpu": (run["gets"] * per_get + run["bytes"] * per_byte) / cores}


def spread(values: list[float]) -> str:
    values = sorted(values)
    return f"{values[len(values) // 2]:6.2f} s ({values[0]:.2f}-{values[-1]:.2f})"


def bench_store_model(store, work: Path, shards: int, per_shard: dict[str, int],
                      latencies: list[int], sizes: list[str], runs: int) -> None:
    """Part 5: finalize of tars another tool wrote against energon prepare, through a model of a
    store over a network (`tests/helpers/storeproxy.py`), at each latency and sample size; each
    way of shardcook's (as it chooses, walking, streaming) and energon's, `runs` times in turn,
    with the floors of each point."""
    (work / "scratch").mkdir(parents=True, exist_ok=True)
    client = store.server.client()
    rows = []
    for size_name in sizes:
        prefix, names, total = upload_model_tars(store, size_name, shards, per_shard[size_name])
        for ms in latencies:
            point = measure_model_point(store, client, work, prefix, names, ms, runs,
                                        per_shard[size_name])
            ours, theirs, best = report_model_point(point, ms, runs, shards, total)
            rows.append((size_name, ms, ours, theirs, best, point.fixed["wall"]))
        clear_model_outputs(store, client, prefix)
    print("\nsize, ms, shardcook s, energon s, ratio, better floor s, fixed s")
    for size_name, ms, ours, theirs, best, fixed_s in rows:
        print(f"{size_name}, {ms}, {ours:.2f}, {theirs:.2f}, {theirs / ours:.2f}, {best:.2f}, "
              f"{fixed_s:.2f}")


def upload_model_tars(store, size_name: str, shards: int, samples: int
                      ) -> tuple[str, list[str], int]:
    """Part 5's tars of one sample size, and one tar of one sample (`model-one`, the fixed
    cost): their prefix, the tar names and their bytes in all."""
    member, big, small = MODEL_SAMPLES[size_name]
    prefix = f"model-{size_name}"
    total = 0
    for shard in range(shards):
        data = foreign_tar(shard, samples, member, big, small)
        total += len(data)
        store.put(f"{prefix}/shard-{shard:06d}.tar", data)
    store.put("model-one/shard-000000.tar", foreign_tar(0, 1, member, big, small))
    names = [f"shard-{shard:06d}.tar" for shard in range(shards)]
    print(f"{size_name}: {shards} tars x {samples} samples of a ~{member / 1e3:,.0f} KB "
          f".{big} and {', '.join('.' + e for e in small)}, {total / 2**20:,.0f} MiB",
          flush=True)
    return prefix, names, total


def clear_model_outputs(store, client, prefix: str) -> None:
    """Deletes what a finalize or prepare wrote under `prefix`: the next run starts from the
    tars alone."""
    keys = [k for k in store.keys(f"{prefix}/") if not k.endswith(".tar")]
    for at in range(0, len(keys), 1000):
        client.delete_objects(Bucket=store.bucket, Delete={
            "Objects": [{"Key": k} for k in keys[at:at + 1000]]})


@dataclass
class ModelPoint:
    """One latency's runs: each way's measured runs by label, the CPU costs per GET and per
    byte, the finalize of one tar of one sample, and the latency in seconds."""

    results: dict[str, list[dict[str, float]]]
    per_get: float
    per_byte: float
    fixed: dict[str, float]
    latency: float


def measure_model_point(store, client, work: Path, prefix: str, names: list[str], ms: int,
                        runs: int, samples: int) -> ModelPoint:
    """Every way at `ms` ms to first byte, `runs` times in turn, behind a fresh store proxy."""
    from tests.helpers.s3server import add_profile
    from tests.helpers.storeproxy import StoreProxy

    server_pid = store.server.process.pid
    latency = ms / 1e3
    proxy = StoreProxy(store.server.port, latency=latency, connect=latency, bandwidth=MODEL_LINK)
    try:
        tag = f"{prefix.removeprefix('model-')}{ms}"
        boto = add_profile(store, f"modelboto{tag}", endpoint_url=proxy.endpoint)
        rust = add_profile(store, f"modelrust{tag}", endpoint_url=proxy.endpoint,
                           rust_client={"allow_http": True})
        env = {**os.environ, **store.env}
        per_get, per_byte = model_costs(f"{rust}/{prefix}", names, env, server_pid, proxy)
        clear_model_outputs(store, client, prefix)
        results: dict[str, list[dict[str, float]]] = {}
        finalize = [sys.executable, "-m", "shardcook", "finalize", "--encoding",
                    "generic", "--scratch-dir", str(work / "scratch")]
        fixed = measured([*finalize, f"{rust}/model-one"], env, server_pid, proxy)
        clear_model_outputs(store, client, "model-one")
        prepare = ["env", "AWS_RESPONSE_CHECKSUM_VALIDATION=when_required", sys.executable,
                   "-m", "megatron.energon.cli.main", "prepare", "--non-interactive",
                   "--sample-type", "CrudeWebdataset", "--split-ratio", "1,0,0",
                   f"{boto}/{prefix}"]
        for _ in range(runs):
            for label, way in MODEL_WAYS.items():
                results.setdefault(label, []).append(measured(
                    [*finalize, f"{rust}/{prefix}"],
                    {**env, "SHARDCOOK_TAR_READS": way}, server_pid, proxy))
                clear_model_outputs(store, client, prefix)
            energon_prepare_run(store, client, prefix, samples, results.setdefault("energon", []),
                                lambda: measured(prepare, env, server_pid, proxy))
    finally:
        proxy.stop()
    return ModelPoint(results, per_get, per_byte, fixed, latency)


def energon_prepare_run(store, client, prefix: str, samples: int,
                        energon: list[dict[str, float]],
                        run: Callable[[], dict[str, float]]) -> None:
    """One energon prepare, tried up to 3 times (energon may fail a shard, the module says),
    its figures appended to `energon`."""
    for attempt in range(3):
        try:
            energon.append(run())
            break
        except SystemExit as e:
            print(f"  energon prepare failed, attempt {attempt + 1}: "
                  f"{str(e).strip().splitlines()[-1]}")
            clear_model_outputs(store, client, prefix)
    else:
        print("  energon prepare failed 3 times: this run has no figure of it")
        return
    counts = json.loads(store.get(f"{prefix}/.nv-meta/.info.json"))
    short = {n: c for n, c in counts["shard_counts"].items() if c != samples}
    if short:
        print(f"  energon prepare indexed shards short: {short}")
    clear_model_outputs(store, client, prefix)


def report_model_point(point: ModelPoint, ms: int, runs: int, shards: int, total: int
                       ) -> tuple[float, float, float]:
    """Prints one latency's runs, the costs and the floors; returns shardcook's median, energon
    prepare's and the better floor, in seconds."""
    from shardcook.dataset.tarreads import STREAMS_AT_ONCE

    results, per_get, per_byte, fixed = point.results, point.per_get, point.per_byte, point.fixed
    cores = os.cpu_count() or 1
    walk = results["walk"][len(results["walk"]) // 2]
    stream = results["stream"][len(results["stream"]) // 2]
    # the walk's floor at full concurrency: every tar at once
    floor_walk = floors(walk, shards, point.latency, shards, per_get, per_byte)
    floor_stream = floors(stream, shards, point.latency, STREAMS_AT_ONCE, per_get, per_byte)
    best = min(max(floor_walk.values()), max(floor_stream.values()))
    ours = sorted(r["wall"] for r in results["shardcook"])[runs // 2]
    theirs_all = sorted(r["wall"] for r in results.get("energon", []))
    theirs = theirs_all[len(theirs_all) // 2] if theirs_all else float("nan")
    chosen = [line for line in results["shardcook"][0]["said"].splitlines()
              if "without an index" in line]
    print(f"  {ms} ms to first byte, {MODEL_LINK / 1e6:.0f} MB/s a connection "
          f"({runs} runs each, median (min-max)); costs {per_get * 1e3:.3f} ms of CPU "
          f"a GET, {per_byte * 2**20 * 1e3:.2f} ms a MiB (client, server and proxy, "
          f"{cores} cores); a finalize of one tar of one sample {fixed['wall']:.2f} s")
    for label, rs in results.items():
        if not rs:
            print(f"    {label:9} no figure: every try failed")
            continue
        med = sorted(rs, key=lambda r: r["wall"])[len(rs) // 2]
        cpu = med["client"] + med["server"] + med["proxy"]
        print(f"    {label:9} {spread([r['wall'] for r in rs])}  {med['gets']:6,} GETs "
              f"{med['bytes'] / 2**20:8,.1f} MiB ({100 * med['bytes'] / total:5.1f}%)  "
              f"CPU client {med['client']:5.1f} s server {med['server']:5.1f} s proxy "
              f"{med['proxy']:5.1f} s ({cpu / med['wall'] / cores:4.0%} of the cores)")
    for label, floor in (("walk", floor_walk), ("stream", floor_stream)):
        print(f"    floor of the {label:6}: round trips {floor['latency']:5.2f} s, "
              f"links {floor['links']:5.2f} s, CPU {floor['cpu']:5.2f} s")
    with_fixed = ours / (best + fixed["wall"])
    print(f"    shardcook {theirs / ours:.2f}x energon prepare, {ours / best:.2f}x the "
          f"better floor ({best:.2f} s; {with_fixed:.2f}x it with the fixed cost)")
    if chosen:
        ways = ["stream" if ": streaming the tars" in r["said"] else "walk"
                for r in results["shardcook"]]
        print(f"    chose, in runs {', '.join(ways)}; the first: "
              f"{chosen[0].removeprefix('INFO: ')}")
    return ours, theirs, best


def serve_store_model(store, work: Path, shards: int, per_shard: dict[str, int], size: str,
                      ms: int) -> None:
    """`--serve SIZE MS`: part 5's tars of one size, in two copies (`ours`, `theirs`), behind the
    store model at MS ms, until interrupted; prints the two commands to time side by side (with
    /usr/bin/time or any timer) and the environment they need, in work/serve.env."""
    from tests.helpers.s3server import add_profile
    from tests.helpers.storeproxy import StoreProxy

    member, big, small = MODEL_SAMPLES[size]
    for shard in range(shards):
        data = foreign_tar(shard, per_shard[size], member, big, small)
        for copy in ("ours", "theirs"):
            store.put(f"serve-{copy}/shard-{shard:06d}.tar", data)
    proxy = StoreProxy(store.server.port, latency=ms / 1e3, connect=ms / 1e3,
                       bandwidth=MODEL_LINK)
    try:
        boto = add_profile(store, "serveboto", endpoint_url=proxy.endpoint)
        rust = add_profile(store, "serverust", endpoint_url=proxy.endpoint,
                           rust_client={"allow_http": True})
        env = work / "serve.env"
        env.write_text("".join(f"export {k}={v}\n" for k, v in store.env.items()))
        (work / "scratch").mkdir(parents=True, exist_ok=True)
        print(f"{shards} tars of {size} at {ms} ms behind {proxy.endpoint}; in another shell:\n"
              f"  . {env}\n"
              f"  {sys.executable} -m shardcook finalize --force --encoding generic "
              f"--scratch-dir {work / 'scratch'} {rust}/serve-ours\n"
              f"  env AWS_RESPONSE_CHECKSUM_VALIDATION=when_required {sys.executable} -m "
              f"megatron.energon.cli.main prepare --non-interactive --force-overwrite "
              f"--sample-type CrudeWebdataset --split-ratio 1,0,0 {boto}/serve-theirs\n"
              "Ctrl-C ends it.", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()


def timed_retried(label: str, cmd: list[str]) -> float | None:
    """Seconds `cmd` took. energon prepare on s3s-fs can fail one shard's download (its CRC32
    check), then assert the shard has no samples: it is run again, at most three times in all,
    each failure said; None when all failed."""
    for attempt in range(3 if label == "energon prepare" else 1):
        try:
            return timed(cmd)
        except SystemExit as e:
            if label != "energon prepare":
                raise
            print(f"  {label} failed, attempt {attempt + 1}: {str(e).strip().splitlines()[-1]}")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=500)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--per-shard", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--foreign-shards", type=int, default=200)
    parser.add_argument("--foreign-per-shard", type=int, default=100)
    parser.add_argument("--foreign-only", action="store_true")
    parser.add_argument("--server", choices=("s3s", "moto"), default="s3s")
    parser.add_argument("--s3s-fs", type=Path, default=S3S_FS, help="the s3s-fs binary")
    parser.add_argument("--rust-client", action="store_true",
                        help="tars another tool wrote: finalize on MSC's Rust client")
    parser.add_argument("--store-model", action="store_true",
                        help="part 5 alone: tars another tool wrote, through a store model")
    parser.add_argument("--latencies", default="0,5,20,50",
                        help="part 5: milliseconds to the first byte, comma-separated")
    parser.add_argument("--sizes", default="images,latents",
                        help="part 5: sample sizes, of images (~100 KB) and latents (~2 MB)")
    parser.add_argument("--model-shards", type=int, default=200)
    parser.add_argument("--images-per-shard", type=int, default=100)
    parser.add_argument("--latents-per-shard", type=int, default=10)
    parser.add_argument("--model-runs", type=int, default=3)
    parser.add_argument("--serve", nargs=2, metavar=("SIZE", "MS"),
                        help="part 5's tars of SIZE behind the store model at MS ms, until "
                             "interrupted, for timing the commands by hand")
    if sys.argv[1:2] == ["--calibrate"]:  # part 5's minimal client, in a process of its own
        url, small, large, *names = sys.argv[2:]
        calibrate(url, names, int(small), int(large))
        return
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from raw_vs_peers import make_photos

    from tests.helpers.s3server import make_store

    work = ROOT / "bench-out" / "storage"
    photos = work / f"photos-{args.photos}"
    if not photos.is_dir() and not (args.foreign_only or args.store_model or args.serve):
        make_photos(photos, args.photos)
    for stale in ("samples", "samples-copy", "scratch", "cfg"):
        shutil.rmtree(work / stale, ignore_errors=True)
    server, name = start_server(args.server, args.s3s_fs, work)
    try:
        store = make_store(server, work / "cfg", "bench-bucket", "benchprofile")
        os.environ.update(store.env)
        print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; "
              f"{name} on 127.0.0.1\n")
        if args.foreign_only:
            bench_foreign(store, work, args.foreign_shards, args.foreign_per_shard,
                          args.rust_client)
            return
        if args.serve:
            serve_store_model(store, work, args.model_shards,
                              {"images": args.images_per_shard,
                               "latents": args.latents_per_shard},
                              args.serve[0], int(args.serve[1]))
            return
        if args.store_model:
            if args.server != "s3s":
                raise SystemExit("--store-model runs on s3s-fs (its CPU is measured)")
            bench_store_model(store, work, args.model_shards,
                              {"images": args.images_per_shard,
                               "latents": args.latents_per_shard},
                              [int(ms) for ms in args.latencies.split(",")],
                              args.sizes.split(","), args.model_runs)
            return
        bench_raw(store, photos, work, args.runs)
        print()
        samples = work / f"photos-{args.samples}"
        if not samples.is_dir():
            make_photos(samples, args.samples)
        bench_finalize(store, samples, work, args.per_shard)
        print()
        bench_dataset_commands(store, work)
        print()
        bench_foreign(store, work, args.foreign_shards, args.foreign_per_shard,
                          args.rust_client)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
