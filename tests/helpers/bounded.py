"""Python code run in a child process with its address space and time bounded, for calls whose
regression would read /dev/zero until memory runs out or wait on a FIFO forever: the test then
fails instead of taking the machine down."""

from __future__ import annotations

import resource
import subprocess
import sys

#: Enough for shardcook, numpy and typer; far below what reading /dev/zero would take.
MEMORY_BYTES = 3 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run_bounded(code: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -c CODE` under `MEMORY_BYTES` of address space; a hang past `timeout` seconds
    raises `subprocess.TimeoutExpired` (the child is killed)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_limit_memory, check=False)
