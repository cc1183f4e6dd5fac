"""The benches run as a user runs them: against the installed shardcook (`pip install ".[bench]"`),
never a source tree forced onto PYTHONPATH, whose python/ holds no built `_native` module after a
plain `pip install .`."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parents[2] / "benches"


def test_no_bench_puts_the_source_tree_on_pythonpath():
    forcing = [p.name for p in sorted(BENCHES.glob("*.py")) if "PYTHONPATH" in p.read_text()]
    assert not forcing, f"benches that override PYTHONPATH: {forcing}"


def test_encode_vs_bridge_runs_shardcook_as_installed(tmp_path):
    """A checkout whose python/shardcook is not built (as after `pip install .`): the bench's
    timed `python -m shardcook` must still reach the installed package."""
    checkout = tmp_path / "checkout"
    shutil.copytree(BENCHES, checkout / "benches")
    unbuilt = checkout / "python" / "shardcook"
    unbuilt.mkdir(parents=True)
    (unbuilt / "__init__.py").write_text(
        "raise ImportError(\"No module named 'shardcook._native'\")\n")
    spec = importlib.util.spec_from_file_location("encode_vs_bridge",
                                                  checkout / "benches" / "encode_vs_bridge.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    try:
        bench.timed([sys.executable, "-m", "shardcook", "--version"])
    except subprocess.CalledProcessError:
        pytest.fail("the bench ran the source tree's shardcook instead of the installed one")
