"""Object storage side by side with a local folder, and `shardcook finalize` with `energon
prepare`, both on the same dataset in a bucket.

    python benches/object_storage.py [--photos 500] [--samples 1000] [--runs 2]
    python benches/object_storage.py --foreign-only [--foreign-shards 200] [--foreign-per-shard 100]
    python benches/object_storage.py --server moto|s3s [--s3s-fs PATH] [--rust-client] ...

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
        self._process = subprocess.Popen(
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
    from shardcook.dataset.shardrows import ROWS_DIR

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


def foreign_tar(shard: int, samples: int, member: int) -> bytes:
    """A WebDataset tar as another tool writes one (Python's tarfile, ustar headers)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            key = f"{shard:06d}{i:05d}"
            size = member + (i * 7919) % (member // 5) - member // 10  # ~member bytes, varied
            for name, data in ((f"{key}.bin", os.urandom(size)),
                               (f"{key}.json", json.dumps({"key": key, "i": i}).encode())):
                info = tarfile.TarInfo(name)
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
    from tests.helpers.slowproxy import SlowProxy

    (work / "scratch").mkdir(parents=True, exist_ok=True)
    size = 0
    for shard in range(shards):
        data = foreign_tar(shard, per_shard, 100_000)
        size += len(data)
        store.put(f"foreign/shard-{shard:06d}.tar", data)
    for copy in ("foreign-counted", "foreign-energon", "foreign-energon-counted"):
        copy_objects(store, "foreign", copy, skip=".nv-meta")
    proxy = SlowProxy(store.server.port, bytes_per_second=1 << 40)
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
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from raw_vs_peers import make_photos

    from tests.helpers.s3server import make_store

    work = ROOT / "bench-out" / "storage"
    photos = work / f"photos-{args.photos}"
    if not photos.is_dir() and not args.foreign_only:
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
