"""The import layering docs/ARCHITECTURE.md states is the code's: every import in
python/shardcook (at module level, inside functions, under TYPE_CHECKING) is read with `ast`; no
module imports one that imports it back, and every import between packages is one the document's
table allows."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "shardcook"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def modules(package: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package's __init__)} of every module, the native stub too."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi"):
            continue
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imported(node: ast.AST, package: str, known: dict[str, tuple[Path, bool]]) -> Iterator[str]:
    """The shardcook modules one import statement names: `from a import b` is module `a.b` when
    that is a module, else `a` (the name is defined there)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """{module: the shardcook modules it imports anywhere in its file}."""
    known = modules(package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in known.items():
        graph[name] = set()
        if path.suffix == ".pyi":
            continue
        here = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _imported(node, here, known):
                if target in known and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def unit(module: str) -> str:
    """The layer a module belongs to: its subpackage or root module (`shardcook` itself for the
    package's `__init__`, the public API)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """{layer: the other layers its modules import}."""
    layers: dict[str, set[str]] = {unit(m): set() for m in graph}
    for module, targets in graph.items():
        layers[unit(module)] |= {unit(t) for t in targets} - {unit(module)}
    return layers


def documented_layers(text: str) -> dict[str, set[str]]:
    """The table under ARCHITECTURE.md's "Layers" heading, in its order: | `layer` | `a`, `b` |
    (a row without a name in backticks allows nothing)."""
    assert "\n## Layers\n" in text, "docs/ARCHITECTURE.md has no Layers section"
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, set[str]] = {}
    for line in section.splitlines():
        row = re.fullmatch(r"\| `([\w.]+)` \| (.*) \|", line.strip())
        if row:
            layers[row[1]] = set(re.findall(r"`([\w.]+)`", row[2]))
    return layers


GRAPH = import_graph()
DOCUMENTED = documented_layers(ARCHITECTURE.read_text(encoding="utf-8"))


def test_the_scan_sees_imports_inside_functions_and_type_checking_blocks() -> None:
    # a check on the scanner itself: both kinds exist in the package today
    assert "shardcook.demo.chatml" in GRAPH["shardcook.demo"]  # inside a function
    assert "shardcook.hftoken" in GRAPH["shardcook.config.checks"]  # inside a function
    # TYPE_CHECKING only
    assert "shardcook.sources.base" in GRAPH["shardcook.jobs.encode.bridge_parts"]


def test_the_scan_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "shardcook"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from shardcook.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    assert cycles(import_graph(pkg)) == [["shardcook.a", "shardcook.sub.b"]]


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert cycles(GRAPH) == []


def test_each_documented_layer_names_only_layers_above_its_row() -> None:
    # the table read top-down is an order, so the allowed graph has no cycle either
    seen: set[str] = set()
    for layer, allowed in DOCUMENTED.items():
        assert allowed <= seen, f"`{layer}` may import {sorted(allowed - seen)}, from below its row"
        seen.add(layer)


@pytest.mark.parametrize("layer", sorted(package_graph(GRAPH)))
def test_each_layer_imports_only_what_architecture_md_allows(layer: str) -> None:
    assert layer in DOCUMENTED, f"docs/ARCHITECTURE.md's Layers table has no row for `{layer}`"
    imported = package_graph(GRAPH)[layer]
    allowed = DOCUMENTED[layer]
    assert imported <= allowed, (
        f"`{layer}` imports {sorted(imported - allowed)}, which the Layers table does not allow")


def test_every_documented_layer_exists() -> None:
    assert set(DOCUMENTED) <= set(package_graph(GRAPH))
