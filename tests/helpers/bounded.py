"""Python code run in a child process with its address space and time bounded, for calls whose
regression would read /dev/zero until memory runs out or wait on a FIFO forever: the test then
fails instead of taking the machine down."""

from __future__ import annotations

import subprocess
import sys

#: Address space the code may add to what the child holds after `setup` (torch alone maps more
#: than 3 GiB); far below what reading /dev/zero would take.
HEADROOM_BYTES = 2 << 30

_LIMIT = """
import resource
with open("/proc/self/statm") as _f:
    _size = int(_f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (_size + {headroom}, _size + {headroom}))
"""


def run_bounded(code: str, *, setup: str = "", timeout: float = 60
                ) -> subprocess.CompletedProcess[str]:
    """`python -c SETUP CODE`, with CODE limited to `HEADROOM_BYTES` more address space than the
    child holds after SETUP (imports go there); a hang past `timeout` seconds raises
    `subprocess.TimeoutExpired` (the child is killed)."""
    script = f"{setup}\n{_LIMIT.format(headroom=HEADROOM_BYTES)}\n{code}"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout, check=False)
