"""`shardcook --nproc-per-node 2 data diffusion-raw ...` (Primus's spelling) starts two torchrun
workers itself: the same bytes as one process (raw and ingest), and a bad option stops before
any worker."""

from __future__ import annotations

import pytest

from tests.helpers.mlperf import write_arrow_set
from tests.helpers.raw import make_folder, report, run_cli, shard_hashes


def test_nproc_per_node_runs_two_workers_with_one_process_bytes(tmp_path):
    src = make_folder(tmp_path / "in", 9, photos=2)
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["--input-dir", str(src), "--shard-size", "2", "--image-size", "40", "--quiet",
              "--num-workers", "1"]
    run_cli("raw", *common, "--output-dir", str(one))
    r = run_cli("--nproc-per-node", "2", "data", "diffusion-raw", *common, "--output-dir",
                str(two))
    assert "Traceback" not in r.stderr and "error" not in r.stderr.lower(), r.stderr
    assert report(two)["world_size"] == 2 and report(one)["world_size"] == 1
    assert shard_hashes(two) == shard_hashes(one)
    assert report(two)["units"] == {"total": 5, "resumed": 0, "this_run": 5}


def test_nproc_per_node_with_a_bad_option_starts_no_worker(tmp_path):
    src = make_folder(tmp_path / "in", 2, photos=0)
    out = tmp_path / "out"
    r = run_cli("--nproc-per-node=2", "data", "diffusion-raw", "--input-dir", str(src),
                "--output-dir", str(out), "--image-size", "100000", check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: --image-size must be at most 16383 (WebP's largest side), not 100000."]
    assert not out.exists()


@pytest.mark.parametrize("command", [("data", "diffusion-ingest"), ("ingest",)])
def test_nproc_per_node_runs_ingest_in_two_workers_with_one_process_bytes(tmp_path, command):
    train = write_arrow_set(tmp_path / "in", 5, 3, timesteps=False)
    one, two = tmp_path / "one", tmp_path / "two"
    run_cli("ingest", str(train.folder), "--output-dir", str(one))
    r = run_cli("--nproc-per-node", "2", *command, str(train.folder), "--output-dir", str(two))
    assert "Traceback" not in r.stderr and "error" not in r.stderr.lower(), r.stderr
    assert report(two)["world_size"] == 2 and report(one)["world_size"] == 1
    assert len(shard_hashes(one / "train")) == 10  # 5 shards and their indexes
    assert shard_hashes(two / "train") == shard_hashes(one / "train")
    assert {p.name: p.read_bytes() for p in (two / ".nv-meta").glob("*.yaml")} == {
        p.name: p.read_bytes() for p in (one / ".nv-meta").glob("*.yaml")}


def test_nproc_per_node_with_bad_ingest_input_says_it_once_and_starts_no_worker(tmp_path):
    r = run_cli("--nproc-per-node", "2", "ingest", str(tmp_path / "missing.arrow"),
                "--output-dir", str(tmp_path / "out"), check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: input {str(tmp_path / 'missing.arrow')!r} does not exist; give Arrow files or "
        "folders"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command, sentence", [
    (["raw", "--input-dir", "{tmp}/missing"],
     "error: Input folder '{tmp}/missing' does not exist; check --input-dir."),
    (["chatml", "--input", "{tmp}/missing.jsonl"],
     "error: --input '{tmp}/missing.jsonl' is not a file; give a JSONL file."),
    (["raw", "--input-dir", "{tmp}/in", "--output-dir", "{tmp}/foreign"],
     ("error: Output folder '{tmp}/foreign' holds files that are not a shardcook dataset; "
      "choose a new or empty folder.")),
])
def test_nproc_per_node_with_bad_input_says_it_once_and_starts_no_worker(tmp_path, command,
                                                                         sentence):
    """The inputs and the output folder are checked before any worker starts: one sentence,
    not one per worker with torch's lines about the failed workers."""
    make_folder(tmp_path / "in", 2, photos=0)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    args = [a.format(tmp=tmp_path) for a in command]
    if "--output-dir" not in args:
        args += ["--output-dir", str(tmp_path / "out")]
    r = run_cli("--nproc-per-node", "2", *args, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [sentence.format(tmp=tmp_path)]
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in (tmp_path / "foreign").iterdir()) == ["notes.txt"]
