"""`shardcook ... --help` as a user's terminal shows it, and its rich panels read back."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def help_text(*command: str) -> str:
    """The --help of `command`, in a fresh process; wide enough that rich wraps no summary, so
    every line break left is the help's own."""
    env = {**os.environ, "COLUMNS": "400", "TERM": "dumb", "NO_COLOR": "1"}
    run = subprocess.run([sys.executable, "-m", "shardcook", *command, "--help"], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return run.stdout


def panels(text: str) -> dict[str, list[str]]:
    """Panel title to its rows' text (borders stripped), in order, from rich's boxes."""
    found: dict[str, list[str]] = {}
    rows: list[str] | None = None
    for line in text.splitlines():
        if m := re.match(r"╭─ (.+?) ─", line):
            rows = found.setdefault(m.group(1), [])
        elif line.startswith("╰"):
            rows = None
        elif rows is not None:
            rows.append(line.strip("│ "))
    return found
