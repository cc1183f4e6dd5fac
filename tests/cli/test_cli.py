"""The command line, run as users run it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.shards import write_shards


def shardcook(*args, check=False):
    return subprocess.run(
        [sys.executable, "-m", "shardcook", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=check,
    )


def test_version_and_help():
    from shardcook import __version__

    assert shardcook("--version").stdout.splitlines()[0] == f"shardcook {__version__}"
    out = shardcook("--help").stdout
    for command in ("finalize", "validate", "info"):
        assert command in out


def test_finalize_validate_info(tmp_path):
    write_shards(tmp_path, n_shards=4, per_shard=2)
    run = shardcook("finalize", tmp_path, "--split", "0.5,0.25,0.25", "--no-sqlite")
    assert run.returncode == 0, run.stderr
    assert "indexed 8 samples in 4 shards" in run.stdout and "validated: ok" in run.stdout
    assert not (tmp_path / ".nv-meta" / "index.sqlite").exists()

    again = shardcook("finalize", tmp_path)
    assert again.returncode == 2 and "already indexed" in again.stderr

    report = json.loads(shardcook("validate", tmp_path, "--json", check=True).stdout)
    assert report["ok"] and report["summary"]["samples"] == 8

    out = shardcook("info", tmp_path, check=True).stdout
    assert "samples:     8 in 4 shards" in out and "train:" in out

    (tmp_path / "000001.tar.idx").unlink()
    broken = shardcook("validate", tmp_path)
    assert broken.returncode == 1
    assert "problem: 000001.tar: the index file 000001.tar.idx is missing" in broken.stdout


def test_bad_option_is_one_sentence(tmp_path):
    write_shards(tmp_path, n_shards=1, per_shard=2)
    run = shardcook("finalize", tmp_path, "--split", "1,2")
    assert run.returncode == 2
    assert run.stderr.strip().startswith("error: invalid split '1,2'")
    assert "Traceback" not in run.stderr
