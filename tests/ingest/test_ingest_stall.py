"""`shardcook ingest` against servers that stall: one that accepts and never answers, one that
trickles a byte at a time. A stalled transfer is given up within the stall timeout and the file
recorded as failed; Ctrl-C ends the command within seconds with exit 130."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import time

import pytest
from shardcook.config.ingest import IngestConfig, IngestDataset, Retry
from shardcook.jobs.ingest.run import run_ingest

from tests.helpers.mlperf import md5, serve, silent_server, write_arrow_set

STALL = Retry(attempts=2, base_delay_s=0.01, stall_s=1.0)


def _manifest(tmp_path, base: str, names: dict[str, str]) -> str:
    """A local manifest of `names` (name -> MD5) under `base`; returns its path."""
    path = tmp_path / "m.md5"
    path.write_text("".join(f"{digest}  {name}\n" for name, digest in names.items()))
    return str(path)


def test_a_server_that_never_answers_fails_the_file_within_the_stall_timeout(tmp_path):
    with silent_server() as (base, accepted):
        cfg = IngestConfig(output_dir=tmp_path / "out", retry=STALL, datasets=[IngestDataset(
            split="train", manifest=tmp_path / "m.md5", base_url=base)])
        _manifest(tmp_path, base, {"a.arrow": "0" * 32})
        start = time.monotonic()
        report = run_ingest(cfg)
        took = time.monotonic() - start
    assert len(accepted) == STALL.attempts
    assert took < 10, took
    assert [(f["file"], f["stage"]) for f in report["failed"]] == [("a.arrow", "download")]
    assert "timed out" in report["failed"][0]["reason"]


def test_a_trickling_transfer_is_noticed_and_retried(tmp_path):
    served = tmp_path / "served"
    train = write_arrow_set(served, 2, 2, timesteps=False)
    slow = train.files[1].name
    with serve(served, trickle={slow}) as (base, requests):
        cfg = IngestConfig(output_dir=tmp_path / "out", retry=STALL, datasets=[IngestDataset(
            split="train", manifest=tmp_path / "m.md5", base_url=base)])
        _manifest(tmp_path, base, {f.name: md5(f) for f in train.files})
        start = time.monotonic()
        report = run_ingest(cfg)
        took = time.monotonic() - start
    assert took < 15, took
    assert requests.count(slow) == STALL.attempts
    assert [f["file"] for f in report["failed"]] == [slow]
    assert "stalled" in report["failed"][0]["reason"]
    assert sorted(report["shards"]) == ["train/train-shard-000000.tar"]


@pytest.mark.parametrize("stall", ["0", "-1", "nan"])
def test_a_bad_stall_timeout_is_one_sentence(tmp_path, stall):
    train = write_arrow_set(tmp_path / "in", 1, 2, timesteps=False)
    result = subprocess.run([sys.executable, "-m", "shardcook", "ingest", str(train.folder),
                             "--output-dir", str(tmp_path / "out"), "--stall-timeout", stall],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert "--stall-timeout must be a number of seconds above 0" in result.stderr
    assert not (tmp_path / "out").exists()


#: Linux's tgkill, to signal one thread of another process.
TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())


def _sigint(pid: int, to: str) -> None:
    """SIGINT to process `pid`, or (`to="a worker thread"`) to one of its threads other than
    the main one, as the kernel may deliver a Ctrl-C."""
    if to == "the process":
        os.kill(pid, signal.SIGINT)
        return
    workers = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert workers, "no thread but the main one"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(TGKILL, pid, workers[-1], signal.SIGINT) == 0, ctypes.get_errno()


def _as_from_a_terminal() -> None:
    """The child's Ctrl-C as a terminal gives it: SIGINT neither blocked nor ignored. A pytest
    worker may have either left to its children by an earlier test's library (a signal mask
    and an ignored signal both pass through fork and exec), and a child that inherits them
    never sees the SIGINT."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("to", [
    "the process",
    pytest.param("a worker thread", marks=pytest.mark.skipif(
        TGKILL is None or not os.path.isdir("/proc/self/task"), reason="Linux's tgkill")),
])
def test_ctrl_c_stops_a_download_waiting_on_a_silent_server(tmp_path, to):
    with silent_server() as (base, accepted):
        manifest = _manifest(tmp_path, base, {f"{n}.arrow": "0" * 32 for n in range(3)})
        # faulthandler: a process that outlives the wait below is made to say where it is
        proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "shardcook", "ingest", "--manifest",
             manifest, "--base-url", base, "--output-dir", str(tmp_path / "out")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=_as_from_a_terminal)
        deadline = time.monotonic() + 60
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert accepted, "no download started"
        time.sleep(0.5)
        with open(f"/proc/{proc.pid}/status") as status:  # for the message below
            signals = [line.strip() for line in status if line.startswith(("SigBlk", "SigIgn"))]
        _sigint(proc.pid, to)
        start = time.monotonic()
        try:
            _, stderr = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, stderr = proc.communicate(timeout=30)
            pytest.fail(f"still running 15 s after Ctrl-C ({signals}); its threads:\n"
                        f"{stderr[-6000:]}")
        finally:
            proc.kill()
        took = time.monotonic() - start
    assert proc.returncode == 130, stderr
    assert took < 10, took
    assert "Traceback" not in stderr
    report = tmp_path / "out" / ".shardcook" / "report.json"
    assert not report.exists() or not json.loads(report.read_text())["shards"]
