"""One run at a time in an output folder: a second run started while the first writes there
(with --overwrite, or the same command again) is refused at once, in one sentence naming the
run that holds the folder, and the first run's dataset comes out byte for byte as if it had run
alone. A run killed with SIGKILL leaves nothing that stops the same command from resuming. The
same holds in a bucket (moto's server on 127.0.0.1), where the guard is a lease: one planted by
a run elsewhere is honoured until it expires, and a run whose lease was taken over does not
finalize. The first run is held still with SIGSTOP while the second tries, so the two meet every
time."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.raw import make_folder, run_cli, shard_hashes

HOST = re.escape(socket.gethostname())
PREFIX = "data/set"


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("one_run") / "in", 60, photos=0)


@pytest.fixture(scope="module")
def reference(src, tmp_path_factory):
    """The dataset one run writes alone."""
    ref = tmp_path_factory.mktemp("one_run_ref") / "ref"
    run_cli(*_args(src, str(ref)))
    return ref


def _args(src: Path, out: str, *extra: str) -> list[str]:
    return ["raw", "--input-dir", str(src), "--output-dir", out, "--shard-size", "2",
            "--image-size", "48", "--workers", "1", "--quiet", *extra]


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "shardcook", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stopped_after_first_unit(proc: subprocess.Popen, units_done: Callable[[], int]) -> None:
    """Waits until `proc` recorded a unit, then stops it (SIGSTOP) while it holds the folder."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and units_done() == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGSTOP)
    _until_stopped(proc)
    assert units_done() > 0


def _until_stopped(proc: subprocess.Popen) -> None:
    """Waits until the kernel shows `proc` stopped: SIGSTOP is delivered asynchronously, and a
    process still running for a moment after `kill` returns may write one more file."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the first run ended before the second could meet it"
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("T", "t"):
            return
        time.sleep(0.001)
    raise AssertionError("the first run did not stop within 10 s of SIGSTOP")


def _finished(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    return err


def _files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _markers(folder: Path) -> Callable[[], int]:
    progress = folder / ".shardcook" / "progress"
    return lambda: len(list(progress.glob("*.json"))) if progress.is_dir() else 0


def _in_use(where: str, pid: int) -> str:
    return (rf"error: Output folder '{re.escape(where)}' is in use by run [0-9a-f]{{12}} "
            rf"\(pid {pid} on {HOST}, started \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\); wait for it "
            r"to end, or write elsewhere")


def test_a_second_run_into_a_busy_folder_is_refused_and_the_first_is_unharmed(
        src, reference, tmp_path):
    out = tmp_path / "out"
    first = _start(_args(src, str(out)))
    try:
        _stopped_after_first_unit(first, _markers(out))
        lock = json.loads((out / ".shardcook" / "lock.json").read_text())
        assert lock["pid"] == first.pid
        before = _files(out)
        for second in (_args(src, str(out), "--overwrite", "--image-size", "32"),
                       _args(src, str(out)),
                       ["--nproc-per-node", "2", *_args(src, str(out), "--overwrite")]):
            r = run_cli(*second, check=False)
            assert r.returncode == 2, r.stderr
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and re.fullmatch(_in_use(str(out), first.pid) + r"\.",
                                                    lines[0]), r.stderr
            assert _files(out) == before
    finally:
        err = _finished(first)
    assert first.returncode == 0, err
    assert shard_hashes(out) == shard_hashes(reference)
    assert not (out / ".shardcook" / "lock.json").exists()
    assert run_cli("validate", "--deep", str(out)).returncode == 0


def test_a_run_killed_with_sigkill_is_resumed_by_the_same_command(src, reference, tmp_path):
    out = tmp_path / "out"
    first = _start(_args(src, str(out)))
    _stopped_after_first_unit(first, _markers(out))
    first.kill()
    first.wait()
    assert (out / ".shardcook" / "lock.json").is_file()  # the record stays; the lock died
    run_cli(*_args(src, str(out)))
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert report["units"]["resumed"] >= 1
    assert shard_hashes(out) == shard_hashes(reference)
    assert not (out / ".shardcook" / "lock.json").exists()


# ---- in a bucket -------------------------------------------------------------------------------

def _objects(store) -> dict[str, str]:
    return {key: hashlib.sha256(store.get(key)).hexdigest() for key in store.keys("")}


def _bucket_markers(store) -> Callable[[], int]:
    return lambda: len(store.keys(f"{PREFIX}/.shardcook/progress/"))


def _shards(store) -> dict[str, str]:
    return {key.rsplit("/", 1)[1]: digest for key, digest in _objects(store).items()
            if key.endswith((".tar", ".tar.idx"))}


def _lease(store, run_id: str, term: float) -> None:
    """A lease of a run on another machine, renewed just now."""
    store.put(f"{PREFIX}/.shardcook/lock.json", json.dumps({
        "run_id": run_id, "host": "elsewhere", "pid": 4242, "started": "2025-01-01T00:00:00Z",
        "machine": "another-machine", "renewed": time.time(), "term": term}).encode())


def _bucket_in_use(where: str, who: str) -> str:
    return (rf"error: Output folder '{re.escape(where)}' is in use by {who}; wait for it to "
            r"end, or write elsewhere; if it was killed, its lease expires at \d\d:\d\d:\d\d "
            r"UTC\.")


def test_a_second_run_into_a_busy_bucket_folder_is_refused(src, reference, s3_store):
    url = s3_store.url(PREFIX)
    first = _start(_args(src, url))
    try:
        _stopped_after_first_unit(first, _bucket_markers(s3_store))
        before = _objects(s3_store)
        r = run_cli(*_args(src, url, "--overwrite", "--image-size", "32"), check=False)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        who = rf"run [0-9a-f]{{12}} \(pid {first.pid} on {HOST}, started \S+Z\)"
        assert len(lines) == 1 and re.fullmatch(_bucket_in_use(url, who), lines[0]), r.stderr
        assert _objects(s3_store) == before
    finally:
        err = _finished(first)
    assert first.returncode == 0, err
    assert _shards(s3_store) == shard_hashes(reference)
    assert f"{PREFIX}/.shardcook/lock.json" not in s3_store.keys(PREFIX)
    assert run_cli("validate", "--deep", url).returncode == 0


def test_a_bucket_run_killed_with_sigkill_is_resumed_at_once_on_its_machine(
        src, reference, s3_store):
    """The lease names a process of this machine that no longer exists: no wait."""
    url = s3_store.url(PREFIX)
    first = _start(_args(src, url))
    _stopped_after_first_unit(first, _bucket_markers(s3_store))
    first.kill()
    first.wait()
    assert f"{PREFIX}/.shardcook/lock.json" in s3_store.keys(PREFIX)
    run_cli(*_args(src, url))
    assert _shards(s3_store) == shard_hashes(reference)
    assert f"{PREFIX}/.shardcook/lock.json" not in s3_store.keys(PREFIX)


def test_a_lease_from_another_machine_holds_until_it_expires(src, reference, s3_store):
    url = s3_store.url(PREFIX)
    _lease(s3_store, "0123456789ab", term=4)
    before = _objects(s3_store)
    r = run_cli(*_args(src, url), check=False)
    assert r.returncode == 2
    who = r"run 0123456789ab \(pid 4242 on elsewhere, started 2025-01-01T00:00:00Z\)"
    assert re.fullmatch(_bucket_in_use(url, who), r.stderr.strip()), r.stderr
    assert _objects(s3_store) == before
    time.sleep(4.5)
    run_cli(*_args(src, url))
    assert _shards(s3_store) == shard_hashes(reference)


def test_a_run_whose_lease_was_taken_over_does_not_finalize(src, s3_store):
    url = s3_store.url(PREFIX)
    first = _start(_args(src, url))
    try:
        _stopped_after_first_unit(first, _bucket_markers(s3_store))
        _lease(s3_store, "fedcba987654", term=600)  # its lease expired; another run took over
    finally:
        err = _finished(first)
    assert first.returncode == 2, err
    assert err.strip().splitlines()[-1] == (
        f"error: {url} was taken over by run fedcba987654 (pid 4242 on elsewhere, started "
        "2025-01-01T00:00:00Z) while this run wrote there (its lease was not renewed in time), "
        "so it may mix both runs' shards; nothing was finalized: once no other run writes "
        "there, rerun with --overwrite.")
    keys = s3_store.keys(PREFIX)
    assert not [k for k in keys if "/.nv-meta/" in k or k.endswith("report.json")]
    assert json.loads(s3_store.get(f"{PREFIX}/.shardcook/lock.json"))["run_id"] == "fedcba987654"


def test_a_lease_term_that_is_not_a_number_is_refused(src, s3_store):
    r = run_cli(*_args(src, s3_store.url(PREFIX)), check=False,
                env_extra={"SHARDCOOK_LEASE_SECONDS": "soon"})
    assert r.returncode == 2
    assert r.stderr.strip() == ("error: SHARDCOOK_LEASE_SECONDS='soon' must be a number of "
                                "seconds from 1 to 86400.")
