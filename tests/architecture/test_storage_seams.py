"""Three seams docs/ARCHITECTURE.md states, read from the package's code with `ast`: only
`storage/` asks a string which URL scheme it has (every other layer asks the parsed `Location`),
only `output/` names a run folder's class (every other layer asks `run_folder` for the run's one
output folder), and outside `storage/` and `output/` nothing asks a `Location` whether it is
local: a caller that hands a tool a path asks the store for it (`Store.file`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "shardcook"

#: `Location.is_local` uses left outside `storage/` and `output/`.
IS_LOCAL_LEFT = 0


def _names(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """Every name the code uses (a name, an attribute, an imported name), with its line;
    docstrings and comments are not code."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id, node.lineno
        elif isinstance(node, ast.Attribute):
            yield node.attr, node.lineno
        elif isinstance(node, ast.ImportFrom):
            yield from ((alias.name, node.lineno) for alias in node.names)


def _used_outside(name: str, *homes: str, exact: bool = False) -> list[str]:
    """`file:line` of each use of a name holding `name` (being `name` when `exact`) in the
    package's modules outside the folders `homes`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(tuple(f"{home}/" for home in homes)):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{relative}:{line}" for used, line in _names(tree)
                  if (used == name if exact else name in used)]
    return found


def test_the_scan_sees_a_name_in_code_and_not_in_a_docstring() -> None:
    tree = ast.parse('"""url_scheme is_local"""\nfrom a import url_scheme\nb.RunFolder()\n'
                     "# c.is_local\nif d.is_local: pass\n")
    assert sorted(_names(tree)) == [("RunFolder", 3), ("b", 3), ("d", 5), ("is_local", 5),
                                    ("url_scheme", 2)]


def test_only_storage_asks_a_string_for_its_url_scheme() -> None:
    assert _used_outside("url_scheme", "storage") == []


def test_only_output_names_a_run_folder_class() -> None:
    assert _used_outside("RunFolder", "output") == []


def test_no_new_caller_asks_whether_a_location_is_local() -> None:
    found = _used_outside("is_local", "storage", "output", exact=True)
    assert len(found) <= IS_LOCAL_LEFT, (
        f"{', '.join(found)} ask(s) Location.is_local; ask the store instead "
        "(location.store.file(\"\") is the file on this machine, or None)")
