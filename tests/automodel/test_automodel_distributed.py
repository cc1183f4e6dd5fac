"""`encode --layout automodel` as every layout runs: two torchrun workers write the cache one
process writes, byte for byte (FLUX images and Wan videos); into a bucket the same files land
there, a run killed mid-way and run again completes it, and `validate` and `info` read the cache
in the bucket. (Real Slurm's `srun` and job arrays: tests/slurm/test_slurm_automodel.py.)"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.automodel import SIZES, THREADS, cache_hashes, encode_args, make_inputs
from tests.helpers.video import video_folder

SEED = 5
#: Two inputs a unit, so two workers share four units.
OPTIONS = ("--shard-size", "2")
#: Wan at a small pixel budget, four frames a clip.
WAN = ("--max-pixels", "4096", "--num-frames", "4", "--shard-size", "2")


def shardcook(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", *args], capture_output=True,
                          text=True, timeout=600, env=env)


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """Every run in one thread: bf16 CPU kernels round by the thread count."""
    monkeypatch.setenv("OMP_NUM_THREADS", str(THREADS))


def one_process_cache(base: Path, args: list[str]) -> Path:
    """`args` (writing `base/out`) run by one process, its folder then moved to `base/one`: a
    later run into `base/out` names its cache files by the same paths, so its metadata files
    are byte-comparable too."""
    r = shardcook(*args)
    assert r.returncode == 0, r.stderr
    return (base / "out").rename(base / "one")


@pytest.fixture(scope="module")
def flux_run(tiny_flux, tmp_path_factory):
    """The inputs' base folder, the command writing `base/out`, and its one-process cache
    (moved to `base/one`)."""
    base = tmp_path_factory.mktemp("automodel_flux")
    make_inputs(base / "in")
    args = encode_args("flux", base / "in", base / "out", tiny_flux, SEED, *OPTIONS)
    return base, args, one_process_cache(base, args)


@pytest.fixture(scope="module")
def flux_info(flux_run):
    """`info --json` of the one-process cache where it was written."""
    base, _, one = flux_run
    shutil.copytree(one, base / "out")
    try:
        return json.loads(shardcook("info", "--json", str(base / "out")).stdout)
    finally:
        shutil.rmtree(base / "out")


@pytest.fixture
def fresh_out(flux_run):
    """`base/out` of the module's run, removed after the test."""
    base, args, one = flux_run
    yield base / "out", args, one
    shutil.rmtree(base / "out", ignore_errors=True)


def test_two_torchrun_workers_write_one_process_cache(fresh_out):
    out, args, one = fresh_out
    r = shardcook("--nproc-per-node", "2", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / ".shardcook" / "report.json").read_text())["world_size"] == 2
    ours = cache_hashes(out)
    assert sum(name.endswith(".pt") for name in ours) == len(SIZES)
    assert {"metadata.json", "metadata_shard_0000.json"} <= set(ours)
    assert ours == cache_hashes(one)


def test_two_torchrun_workers_write_one_process_wan_cache(tiny_wan, tmp_path):
    pytest.importorskip("cv2")
    video_folder(tmp_path / "in")
    args = encode_args("wan", tmp_path / "in", tmp_path / "out", tiny_wan, SEED, *WAN)
    one = one_process_cache(tmp_path, args)
    r = shardcook("--nproc-per-node", "2", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    ours = cache_hashes(tmp_path / "out")
    assert sum(name.endswith(".meta") for name in ours) == 5
    assert ours == cache_hashes(one)


# ---- into a bucket -------------------------------------------------------------------------


def bucket_args(args: list[str], url: str, scratch: Path) -> list[str]:
    at = args.index("--output-dir") + 1
    return [*args[:at], url, *args[at + 1:], "--scratch-dir", str(scratch)]


def as_placed(hashes_of: Path, named: str) -> dict[str, bytes]:
    """The cache's files (not the run's records), the folder's name in its metadata files
    (each entry's `cache_file`) replaced by `@`."""
    files = {}
    for name in cache_hashes(hashes_of):
        data = (hashes_of / name).read_bytes()
        files[name] = data.replace(named.encode(), b"@") if name.startswith("metadata") else data
    return files


def test_into_a_bucket_the_cache_a_local_run_writes(flux_run, s3_store, tmp_path):
    base, args, one = flux_run
    url = s3_store.url("caches/flux")
    r = shardcook(*bucket_args(args, url, tmp_path / "scratch"))
    assert r.returncode == 0, r.stderr[-2000:]
    copy = tmp_path / "copy"
    s3_store.download_folder("caches/flux", copy)
    assert as_placed(copy, url) == as_placed(one, str(base / "out"))
    entries = json.loads((copy / "metadata_shard_0000.json").read_text())
    assert all(e["cache_file"].startswith(f"{url}/") for e in entries)
    # the shards were slimmed, and nothing describes them whole any more
    assert not [k for k in s3_store.keys("caches/flux/") if k.endswith(".idx")
                or "/.shardcook/index/" in k]
    status = shardcook("status", url)
    assert (status.returncode, status.stdout.strip()) == (0, f"{url}: complete."), status.stderr


def test_killed_in_a_bucket_then_rerun_completes_the_cache(flux_run, s3_store, tmp_path):
    base, args, one = flux_run
    url = s3_store.url("caches/killed")
    run = bucket_args(args, url, tmp_path / "scratch")
    proc = subprocess.Popen([sys.executable, "-m", "shardcook", *run],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if s3_store.keys("caches/killed/.shardcook/progress/"):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    done = len(s3_store.keys("caches/killed/.shardcook/progress/"))
    assert 1 <= done < 4
    assert not s3_store.keys("caches/killed/metadata.json")

    again = shardcook(*run)
    assert again.returncode == 0, again.stderr[-2000:]
    copy = tmp_path / "copy"
    s3_store.download_folder("caches/killed", copy)
    assert json.loads((copy / ".shardcook" / "report.json").read_text())["units"][
        "resumed"] == done
    assert as_placed(copy, url) == as_placed(one, str(base / "out"))


def test_validate_and_info_read_the_cache_in_the_bucket(flux_run, flux_info, s3_store,
                                                        tmp_path):
    _, args, _ = flux_run
    url = s3_store.url("caches/checked")
    assert shardcook(*bucket_args(args, url, tmp_path / "scratch")).returncode == 0
    ok = shardcook("validate", "--deep", url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    info = shardcook("info", "--json", url)
    assert info.returncode == 0, info.stderr
    summary = json.loads(info.stdout)
    assert summary == {**flux_info, "directory": url}
    assert "(unreadable)" not in summary["keys"]
    assert summary["samples"] == len(SIZES)

    # a cache file gone from the bucket, and one damaged: both named by their URL
    entries = json.loads(s3_store.get("caches/checked/metadata_shard_0000.json"))
    gone, damaged = (e["cache_file"][len(url) + 1:] for e in entries[:2])
    s3_store.server.client().delete_object(Bucket=s3_store.bucket,
                                           Key=f"caches/checked/{gone}")
    s3_store.put(f"caches/checked/{damaged}",
                 s3_store.get(f"caches/checked/{damaged}")[:1000])  # cut short
    bad = shardcook("validate", "--deep", url)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"missing: {url}/{gone}" in bad.stdout
    assert f"{url}/{damaged} cannot be loaded" in bad.stdout
    assert "Traceback" not in bad.stderr and str(tmp_path) not in bad.stdout


def test_overwrite_in_a_bucket_removes_the_earlier_cache(flux_run, s3_store, tmp_path):
    """A run of fewer inputs with --overwrite leaves no file of the earlier cache there."""
    _, args, _ = flux_run
    url = s3_store.url("caches/again")
    assert shardcook(*bucket_args(args, url, tmp_path / "scratch")).returncode == 0
    before = {k for k in s3_store.keys("caches/again/") if k.endswith(".pt")}
    r = shardcook(*bucket_args(args, url, tmp_path / "scratch"), "--overwrite",
                  "--max-samples", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    after = {k for k in s3_store.keys("caches/again/") if k.endswith(".pt")}
    assert len(after) == 2 and after < before
    assert json.loads(s3_store.get("caches/again/metadata.json"))["total_items"] == 2
    ok = shardcook("validate", url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
