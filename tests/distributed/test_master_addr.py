"""A MASTER_ADDR that no machine can have is named as the problem (exit 2, one sentence, nothing
written), instead of rank 0 advising to choose a free port."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.raw import make_folder

TORCH_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")


@pytest.mark.parametrize(("rank", "addr"), [("0", "256.1.1.1"), ("1", "256.1.1.1"),
                                           ("0", "no such host")])
def test_an_unresolvable_master_addr_is_named(tmp_path, rank, addr):
    src = make_folder(tmp_path / "in", 1, photos=0)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in TORCH_VARIABLES}
    env.update(WORLD_SIZE="2", RANK=rank, MASTER_ADDR=addr, MASTER_PORT="29531",
               SHARDCOOK_JOIN_TIMEOUT="2")
    r = subprocess.run([sys.executable, "-m", "shardcook", "raw", "--input-dir", str(src),
                        "--output-dir", str(out), "--image-size", "32", "--quiet"],
                       capture_output=True, text=True, env=env, timeout=120, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: Environment variable MASTER_ADDR={addr!r} is not a host "
                               "name or IP address"), r.stderr
    assert "free port" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()
