"""An `encode --layout automodel` run killed mid-way and run again writes the cache an
uninterrupted run writes, byte for byte; finalize slims the run's shards to the metadata
entries once the cache is written and recorded (the cache is on disk once), `status` calls the
run complete, and running the same command again encodes and writes nothing and says so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.automodel import SIZES, THREADS, cache_hashes, encode_args, make_inputs
from tests.helpers.raw import killed_after

SEED = 11


def shardcook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", *args], capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def one_thread(monkeypatch):
    """Every run in one thread: bf16 CPU kernels round by the thread count."""
    monkeypatch.setenv("OMP_NUM_THREADS", str(THREADS))


def test_sigkill_then_rerun_is_byte_identical(tiny_qwen_image, tmp_path, one_thread):
    inputs, ref, out = tmp_path / "in", tmp_path / "ref", tmp_path / "out"
    make_inputs(inputs)
    # a unit per input: the kill lands between units
    args = ("--shard-size", "1", "--batch-size", "2")
    assert shardcook(*encode_args("qwen_image", inputs, ref, tiny_qwen_image, SEED,
                                  *args)).returncode == 0
    done = killed_after(encode_args("qwen_image", inputs, out, tiny_qwen_image, SEED, *args),
                        out, 2)
    units = len(SIZES) + 1  # and the file that is no image
    assert 2 <= len(done) < units
    assert not (out / "metadata.json").exists()

    again = shardcook(*encode_args("qwen_image", inputs, out, tiny_qwen_image, SEED, *args))
    assert again.returncode == 0, again.stderr
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert report["units"]["resumed"] == len(done)
    # the cache files and the slimmed shards; metadata entries name each cache file by its
    # absolute path, so the two folders' differ there alone
    ours = {k: v for k, v in cache_hashes(out).items() if not k.startswith("metadata")}
    assert ours == {k: v for k, v in cache_hashes(ref).items() if not k.startswith("metadata")}
    assert sum(name.endswith(".pt") for name in ours) == len(SIZES)
    for name in ("metadata.json", "metadata_shard_0000.json"):
        assert (out / name).read_text().replace(str(out), "@") == (
            (ref / name).read_text().replace(str(ref), "@"))


def test_finalize_slims_the_shards_and_a_rerun_writes_nothing(tiny_qwen_image, tmp_path,
                                                               one_thread):
    from shardcook._native import read_shard

    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    args = encode_args("qwen_image", inputs, out, tiny_qwen_image, SEED, "--shard-size", "3")
    assert shardcook(*args).returncode == 0
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert sum(report["shards"].values()) == len(SIZES) and len(report["shards"]) == 2
    # the shards keep each sample's metadata entry, not its cache file
    entries = [json.loads(sample.parts["json"]) for shard in report["shards"]
               for sample in read_shard(out / shard)
               if list(sample.parts) == ["json"]]
    metadata = json.loads((out / "metadata_shard_0000.json").read_text())
    assert [e["entry"]["image_path"] for e in entries] == [e["image_path"] for e in metadata]
    cache = sum(p.stat().st_size for p in out.glob("*x*/*.pt"))
    assert sum((out / shard).stat().st_size for shard in report["shards"]) < cache / 10
    assert json.loads((out / "metadata.json").read_text())["total_items"] == len(SIZES)
    record = json.loads((out / ".shardcook" / "automodel_cache.json").read_text())
    assert record == {"total_items": len(SIZES), "metadata": "metadata.json"}
    status = shardcook("status", str(out))
    assert (status.returncode, status.stdout.strip()) == (0, f"{out}: complete.")

    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()
              and ".shardcook" not in p.relative_to(out).parts}
    quiet = [a for a in args if a != "--quiet"]
    rerun = shardcook(*quiet)
    assert rerun.returncode == 0, rerun.stderr
    assert (f"shardcook: the cache in {out} is complete ({len(SIZES)} samples, recorded by an "
            "earlier finalize); nothing to write.") in rerun.stderr
    assert {p: p.stat().st_mtime_ns for p in before} == before
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert report["units"]["this_run"] == 0
    assert shardcook("status", str(out)).returncode == 0

    # a finalize killed before it recorded the cache: status names what is missing
    (out / ".shardcook" / "automodel_cache.json").unlink()
    status = shardcook("status", str(out))
    assert status.returncode == 1 and ".shardcook/automodel_cache.json is missing" in status.stdout

