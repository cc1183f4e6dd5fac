"""Shard names are the native writer's: Python asks `layouts.names.shard_name` for one and never
spells the `{prefix}{number:06d}.tar` rule itself (an f-string putting a zero-padded number
before `.tar`), read from the package's code with `ast`."""

from __future__ import annotations

import ast
from itertools import pairwise
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "shardcook"


def _spells_a_shard_name(node: ast.JoinedStr) -> bool:
    """`f"...{n:06d}.tar..."`: a zero-padded number followed by text holding `.tar`."""
    for value, after in pairwise(node.values):
        spec = value.format_spec if isinstance(value, ast.FormattedValue) else None
        padded = isinstance(spec, ast.JoinedStr) and any(
            isinstance(v, ast.Constant) and str(v.value).startswith("0") for v in spec.values)
        if padded and isinstance(after, ast.Constant) and ".tar" in str(after.value):
            return True
    return False


def test_no_module_spells_the_shard_name_rule():
    found = sorted(f"{path.relative_to(PACKAGE)}:{node.lineno}"
                   for path in PACKAGE.rglob("*.py")
                   for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.JoinedStr) and _spells_a_shard_name(node))
    assert found == []


def test_the_check_sees_the_rule_spelled():
    # the check itself, on the line ingest used to build its shards' names with
    spelled = ast.parse('f"{split}-shard-{index:06d}.tar"').body[0]
    assert isinstance(spelled, ast.Expr) and isinstance(spelled.value, ast.JoinedStr)
    assert _spells_a_shard_name(spelled.value)
