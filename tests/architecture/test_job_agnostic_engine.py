"""The engine reads where a worker stands and hands it down, and the jobs take what it hands
them: only `runtime/workers.py` reads the launcher's local variables, no job computes its place
or its share of the units again, and no caller outside `output/` asks which output folder it
has. Read from the package's code with `ast`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "shardcook"


def _trees(under: Path = PACKAGE) -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(under.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _called(node: ast.AST) -> str | None:
    """The name a call calls (`f(...)`, `a.f(...)`), else None."""
    if isinstance(node, ast.Call):
        func = node.func
        return func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else None)
    return None


def test_only_workers_reads_the_local_variables_of_a_launch():
    names = {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_LOCALID"}
    found = sorted({module for module, tree in _trees() for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and node.value in names})
    assert found == ["runtime/workers.py"]


def test_jobs_take_the_place_and_units_the_engine_hands_them():
    recomputed = sorted({f"{module}: {name}()" for module, tree in _trees(PACKAGE / "jobs")
                         for node in ast.walk(tree)
                         if (name := _called(node)) in ("where", "units_for", "read_split")})
    assert recomputed == []


def test_no_caller_outside_output_asks_which_output_folder_it_has():
    kinds = {"RunFolder", "Direct", "Staged"}
    asked = sorted({module for module, tree in _trees() for node in ast.walk(tree)
                    if not module.startswith("output/") and _called(node) == "isinstance"
                    and isinstance(node, ast.Call) and len(node.args) == 2
                    and kinds & {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
                                 for n in ast.walk(node.args[1])}})
    assert asked == []
