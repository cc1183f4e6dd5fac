"""Three seams docs/ARCHITECTURE.md states, read from the package's code with `ast`: only
`storage/` asks a string which URL scheme it has (every other layer asks the parsed `Location`),
only `output/` names a run folder's class (every other layer asks `run_folder` for the run's one
output folder), and outside `storage/` and `output/` nothing asks a `Location` whether it is
local, and one function alone asks a store for the file on this machine (`Store.file`):
`dataset.location.in_place`, which picks whether a dataset is read in place or fetched. Every
other caller asks the store what it needs (`what_is`, `retrying`, `write_bytes`, `inside`,
`where`) or the view or output folder that already picked (`DatasetView.rewritten`,
`OutputFolder.local_space`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "shardcook"

#: `Location.is_local` uses left outside `storage/` and `output/`.
IS_LOCAL_LEFT = 0
#: The functions outside `storage/` and `output/` that call `Store.file`, and why.
FILE_ASKERS = {"dataset/location.py:in_place": "picks a dataset's view: in place or fetched"}


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


def _file_calls(tree: ast.AST) -> Iterator[str]:
    """The functions (by name) that call a method named `file`."""
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "file" for node in ast.walk(function)):
            yield function.name


def test_the_scan_sees_which_function_calls_file() -> None:
    tree = ast.parse("def a(s):\n    return s.store.file('')\ndef b(file):\n    return file\n")
    assert list(_file_calls(tree)) == ["a"]


def test_one_function_outside_storage_and_output_asks_a_store_for_a_local_file() -> None:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if not relative.startswith(("storage/", "output/")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found |= {f"{relative}:{name}" for name in _file_calls(tree)}
    assert found == set(FILE_ASKERS), (
        f"{', '.join(sorted(found - set(FILE_ASKERS)))} ask(s) Store.file; ask the store what "
        "is needed (what_is, retrying, write_bytes, inside, where), or the dataset view or "
        "output folder that already picked local or not")
