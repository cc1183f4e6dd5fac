"""The state of a folder tree, for tests that check a user's files byte for byte."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_state(root: Path) -> dict[str, str]:
    """Every entry below `root` by relative path: a file's sha256, `dir`, or a link's target."""
    state = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            state[name] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            state[name] = "dir"
        else:
            state[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state
