"""`ingest` takes the output options of every run command from the shared run config, with the
same behaviour as raw's: --scratch-dir and --upload-queue for a bucket, --report-html's page
(also from --config's `output`), and `--split NAME`, its old spelling of --split-part NAME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.helpers.mlperf import write_arrow_set
from tests.helpers.s3server import add_profile


def _ingest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", "ingest", *args], check=False,
                          capture_output=True, text=True, timeout=300, env=env)


def _staged_while(scratch: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """Runs ingest while counting the shards staged under `scratch` every 2 ms; returns the
    run and the most seen at once."""
    seen, done = [0], threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.append(sum(1 for _ in scratch.rglob("*.tar")) if scratch.is_dir() else 0)
            time.sleep(0.002)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        return _ingest(*args), max(seen)
    finally:
        done.set()
        watcher.join()


def test_a_bucket_run_stages_in_its_scratch_dir_and_holds_to_its_upload_queue(
        s3_store, s3_server, tmp_path):
    """Through a slow link, --upload-queue 1 keeps at most one shard waiting while the next is
    written, in --scratch-dir (and nothing is left there)."""
    from tests.helpers.tcpproxy import TcpProxy

    train = write_arrow_set(tmp_path / "in", 5, 40, timesteps=False)
    scratch = tmp_path / "scratch"
    proxy = TcpProxy(s3_server.port, bytes_per_second=100_000)
    try:
        slow = add_profile(s3_store, "slow" + s3_store.profile, endpoint_url=proxy.endpoint)
        run, most = _staged_while(scratch, str(train.folder), "--output-dir", f"{slow}/mlperf",
                                  "--no-finalize", "--scratch-dir", str(scratch),
                                  "--upload-queue", "1")
    finally:
        proxy.stop()
    assert run.returncode == 0, run.stderr
    assert 1 <= most <= 2, f"{most} shards staged at once in --scratch-dir"
    report = json.loads(s3_store.get("mlperf/.shardcook/report.json"))
    # a shard is staged with its .idx and its index rows
    sizes = sorted(sum(len(s3_store.get(f"mlperf/{name}")) for name in (
        shard, f"{shard}.idx", f".shardcook/index/{shard}.sqlite"))
        for k in s3_store.keys("mlperf/train/") if (shard := k[len("mlperf/"):]).endswith(".tar"))
    assert len(sizes) == 5
    assert sizes[-1] <= report["scratch_peak_bytes"] <= sizes[-1] + sizes[-2]
    assert sorted(p.name for p in scratch.rglob("*") if p.is_file()) == []


def test_a_scratch_dir_in_object_storage_is_refused(s3_store, tmp_path):
    train = write_arrow_set(tmp_path / "in", 1, 2, timesteps=False)
    run = _ingest(str(train.folder), "--output-dir", s3_store.url("mlperf"), "--scratch-dir",
                  s3_store.url("scratch"))
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("error: --scratch-dir") and run.stderr.count("\n") == 1
    assert s3_store.keys("mlperf/") == []


def test_report_html_writes_the_page_from_the_option_or_the_config(tmp_path):
    train = write_arrow_set(tmp_path / "in", 2, 3, timesteps=False)
    out = tmp_path / "out"
    run = _ingest(str(train.folder), "--output-dir", str(out), "--report-html")
    assert run.returncode == 0, run.stderr
    page = out / ".shardcook" / "report.html"
    assert f"page: {page}" in run.stdout
    assert "<html" in page.read_text() and "train" in page.read_text()
    config = tmp_path / "ingest.yaml"
    again = tmp_path / "again"
    config.write_text(f"datasets:\n  - {{paths: [{train.folder}]}}\n"
                      f"output: {{output_dir: {again}, report_html: true}}\n")
    assert (run := _ingest("--config", str(config))).returncode == 0, run.stderr
    assert (again / ".shardcook" / "report.html").is_file()


def test_report_html_without_finalize_is_refused_before_anything_is_written(tmp_path):
    train = write_arrow_set(tmp_path / "in", 1, 2, timesteps=False)
    out = tmp_path / "out"
    run = _ingest(str(train.folder), "--output-dir", str(out), "--report-html", "--no-finalize")
    assert run.returncode == 2, run.stderr
    assert run.stderr == ("error: --report-html shows a finalized dataset; drop --no-finalize, "
                          "or run `shardcook report` after finalizing.\n")
    assert not out.exists()


def test_the_old_split_spelling_still_names_the_split_part_with_a_warning(tmp_path):
    val = write_arrow_set(tmp_path / "coco", 1, 3, timesteps=True, key_prefix="v")
    out = tmp_path / "out"
    run = _ingest(str(val.folder), "--split", "val", "--output-dir", str(out),
                  env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "--split" in line]
    assert warnings == ["warning: --split NAME is deprecated here; use --split-part NAME."]
    assert sorted(p.name for p in (out / "val").glob("*.tar")) == ["val-shard-000000.tar"]
    both = _ingest(str(val.folder), "--split", "val", "--split-part", "val", "--output-dir",
                   str(tmp_path / "other"))
    assert both.returncode == 2
    assert both.stderr.strip().splitlines()[-1] == (
        "error: --split NAME is the old spelling of --split-part NAME; give --split-part only.")


def test_no_finalize_into_a_bucket_then_finalize_keeps_each_split_in_its_folder(
        s3_store, tmp_path):
    """As in a local folder: each --no-finalize run records its split folders, so a later
    `shardcook finalize` of the URL keeps train/ and val/ apart."""
    from shardcook.dataset import info

    train = write_arrow_set(tmp_path / "cc12m", 2, 3, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 1, 3, timesteps=True, key_prefix="v")
    out = s3_store.url("mlperf")
    assert _ingest(str(train.folder), "--output-dir", out, "--no-finalize").returncode == 0
    run = _ingest(str(val.folder), "--split-part", "val", "--output-dir", out, "--no-finalize")
    assert run.returncode == 0, run.stderr
    done = subprocess.run([sys.executable, "-m", "shardcook", "finalize", out],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert {split: s.samples for split, s in info(out).splits.items()} == {"train": 6, "val": 3}
