"""A YAML document with one of its mapping keys given twice, for the duplicate-key tests."""

from __future__ import annotations

import re

_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_.][\w.-]*):(?: |$)")


def key_lines(text: str) -> list[int]:
    """Indices of the lines of block-style `text` that start a mapping key."""
    return [i for i, line in enumerate(text.splitlines()) if _KEY_LINE.match(line)]


def _inside(line: str, indent: int) -> bool:
    """Whether `line` still belongs to the block of a key at `indent` (deeper, or a list item at
    the key's own indentation, as PyYAML writes them)."""
    own = len(line) - len(line.lstrip(" "))
    return own > indent or (own == indent and line.lstrip(" ").startswith("- "))


def repeat_key(text: str, which: int) -> tuple[str, str, int]:
    """`text` with the key of its `which`-th key line (modulo their number) written again, with a
    null value, after that key's block; returns (new text, the key, the 1-based line of the
    repeat)."""
    lines = text.splitlines()
    index = key_lines(text)[which % len(key_lines(text))]
    match = _KEY_LINE.match(lines[index])
    assert match is not None
    indent = len(match["indent"])
    end = index + 1
    while end < len(lines) and _inside(lines[end], indent):
        end += 1
    lines.insert(end, f"{match['indent']}{match['key']}:")
    return "\n".join(lines) + "\n", match["key"], end + 1
