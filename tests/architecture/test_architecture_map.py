"""docs/ARCHITECTURE.md's map is the code's: every path it names exists, every module of the
package is named in its row of the Modules table, the families table is the model registry, the
layouts row names every registered layout's module, the cli row every command of each group, and
the claims that one place does a thing (dataset kinds, YAML reads, `torch.load`, the list of
families) hold. Read from the document and from the package's code with `ast`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "shardcook"
TEXT = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")

#: Folders of the repository a path in the document may start from; any other path is the
#: package's (`dataset/metadata.py` is `python/shardcook/dataset/metadata.py`).
REPOSITORY_FOLDERS = ("python/", "rust/", "tests/", "scripts/", "docs/", "benches/")
#: Endings of the files a path names (anything after a module's `.py`-less path is a name in it).
FILE_ENDINGS = (".py", ".pyi", ".rs", ".md", ".toml")


def section(heading: str, text: str = TEXT) -> str:
    """The text under a `## ` or `### ` heading, up to the next heading of any level."""
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    following = re.search(r"\n#{2,3} ", text[start:])
    return text[start:start + following.start()] if following else text[start:]


def ticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the markdown tables in `text`, header and rule left out."""
    rows = [[cell.strip() for cell in line.strip()[1:-1].split(" | ")]
            for line in text.splitlines() if line.startswith("| ") and line.endswith(" |")]
    return [row for row in rows if not set(row[0]) <= {"-"} and row[0] not in ("module", "family")]


MODULE_ROWS = table_rows(section("## Modules"))


def row_of(first_cell_path: str) -> str:
    """The job cell of the Modules row whose first cell names `first_cell_path`."""
    found = [row[1] for row in MODULE_ROWS if first_cell_path in ticked(row[0])]
    assert len(found) == 1, f"the Modules table has {len(found)} rows for `{first_cell_path}`"
    return found[0]


def resolve(path: str) -> tuple[Path, str | None]:
    """The file or folder a path in the document names, and the name it names in that file
    (`dataset/check/samples.family_of`: samples.py, `family_of`), else None."""
    base = ROOT if path.startswith(REPOSITORY_FOLDERS) or path == "build.rs" else PACKAGE
    folder, _, last = path.rpartition("/")
    if "." in last and not last.endswith(FILE_ENDINGS):
        module, _, name = last.partition(".")
        return base / folder / f"{module}.py", name
    return base / path, None


def named_paths(text: str) -> list[str]:
    """The backticked paths of code in `text`: a `/` in them, no spaces, and not a name inside a
    dataset (`.nv-meta/`, `WxH/`, `<shard>/<name>`) or a URL."""
    return [t for t in ticked(text) if "/" in t and " " not in t and not t.startswith(".")
            and not re.search(r"[<>*:]", t) and t not in ("WxH/", "empty_encodings/")]


def _paths_with_folders() -> list[tuple[str, tuple[str, ...]]]:
    """Each path the document names, with the folders it may be relative to: in a row of the
    Modules table, that row's folders (`encode/` in the `jobs/` row is `jobs/encode/`)."""
    found = {(path, ()) for path in named_paths(TEXT)}
    for row in MODULE_ROWS:
        folders = tuple(sorted({p if p.endswith("/") else p.rpartition("/")[0] + "/"
                                for p in ticked(row[0]) if "/" in p}))
        found |= {(path, folders) for path in named_paths(row[1])}
    by_path: dict[str, tuple[str, ...]] = {}
    for path, folders in sorted(found):
        by_path[path] = tuple(sorted(set(by_path.get(path, ())) | set(folders)))
    return sorted(by_path.items())


@pytest.mark.parametrize(("path", "folders"), _paths_with_folders(),
                         ids=[p for p, _ in _paths_with_folders()])
def test_every_path_the_document_names_exists(path: str, folders: tuple[str, ...]) -> None:
    candidates = [resolve(path)] + [resolve(folder + path) for folder in folders]
    where, name = next(((w, n) for w, n in candidates if w.exists()), candidates[0])
    assert where.exists(), f"docs/ARCHITECTURE.md names `{path}`, and {where} does not exist"
    if name is not None:
        assert re.search(rf"\b{re.escape(name)}\b", where.read_text(encoding="utf-8")), (
            f"docs/ARCHITECTURE.md names `{path}`, and {where.name} has no `{name}`")


def test_every_folder_in_the_data_flow_exists() -> None:
    flow = TEXT.split("## Data flow", 1)[1].split("```", 2)[1]
    folders = re.findall(r"(?<![\w.\-/])([a-z_]+/[a-z_/]*)", flow)
    assert "dataset/check/validate" in folders  # the scan reads the block
    missing = [f for f in folders if not (PACKAGE / f).is_dir()
               and not (PACKAGE / f"{f.rstrip('/')}.py").is_file()]
    assert missing == [], f"the data flow names {missing}, which are no module or folder"


def _modules() -> list[str]:
    """Every module of the package, relative to it, less the subpackages' `__init__.py`."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py*")
                  if p.suffix in (".py", ".pyi")
                  and not (p.name == "__init__.py" and p.parent != PACKAGE))


def _home_row(module: str) -> tuple[str, list[str]]:
    """The row whose first cell names the longest path holding `module`: (the path, the row)."""
    best: tuple[str, list[str]] | None = None
    for row in MODULE_ROWS:
        for path in ticked(row[0]):
            holds = module == path or (path.endswith("/") and module.startswith(path))
            if holds and (best is None or len(path) > len(best[0])):
                best = (path, row)
    assert best is not None, f"python/shardcook/{module} has no row in the Modules table"
    return best


FAMILY_ROWS = table_rows(section("### Model families"))


def _family_modules() -> set[str]:
    return {module for row in FAMILY_ROWS for module in ticked(row[2])}


@pytest.mark.parametrize("module", _modules())
def test_every_module_is_named_in_its_row(module: str) -> None:
    """A module is named by its path in any row, or by its name in the row of its folder."""
    if any(module in ticked(cell) for row in MODULE_ROWS for cell in row):
        return
    home, row = _home_row(module)
    inside = module[len(home):].rsplit(".", 1)[0]  # `encode/job` of `jobs/encode/job.py`
    stem = inside.rpartition("/")[2]
    named = ticked(row[0]) + ticked(row[1])
    if module.startswith("encoders/"):
        named += sorted(_family_modules())
    ways = (stem, f"{stem}.py", f"{inside}.py", f"{inside}/")
    assert any(t in ways or t.startswith((f"{stem}.", f"{inside}.")) for t in named), (
        f"the Modules row of `{home}` does not name python/shardcook/{module}")


def test_the_families_table_is_the_registry() -> None:
    from shardcook.encoders.models import MODELS

    documented = {ticked(row[0])[0]: (row[1], ticked(row[2])) for row in FAMILY_ROWS}
    registered = {}
    for family in MODELS.values():
        modules = [family.encoders.partition(":")[0].rpartition(".")[2]]
        if family.automodel is not None:
            modules.append(family.automodel.encoders.partition(":")[0].rpartition(".")[2])
        registered[family.name] = (family.input_kind, list(dict.fromkeys(modules)))
    assert documented == registered


def test_the_layouts_row_names_each_layouts_module() -> None:
    from shardcook.layouts import LAYOUTS

    listing = row_of("layouts/").split("one module per layout", 1)[1].split("the registry", 1)[0]
    documented = dict(re.findall(r"`(\w+)` \(`([\w-]+)`", listing))
    registered = {}  # a layout's module is the one whose code assigns it (`NAME = Layout(...)`)
    for path in sorted((PACKAGE / "layouts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and getattr(node.value.func, "id", None) == "Layout":
                name = next(k.value for k in node.value.keywords if k.arg == "name")
                registered[path.stem] = ast.literal_eval(name)
    assert sorted(registered.values()) == sorted(LAYOUTS)
    assert documented == registered


def test_the_cli_row_names_each_groups_commands() -> None:
    from shardcook.cli import PANELS

    registered: dict[str, set[str]] = {}
    for _, commands in PANELS:
        for command, _ in commands:
            group = command.__module__.rpartition(".")[2]
            registered.setdefault(group, set()).add(command.__name__.replace("_", "-"))
    row = row_of("cli/")
    documented = {stem: set(names.split(", "))
                  for stem, names in re.findall(r"`(\w+)\.py` \(([a-z\-, ]+)\)", row)}
    assert documented == registered


def _calls_of(name: str) -> set[str]:
    """The modules (relative paths) that import `name` from a shardcook module."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shardcook") \
                    and any(alias.name == name for alias in node.names):
                found.add(path.relative_to(PACKAGE).as_posix())
    return found


def test_the_commands_asking_dataset_kind_are_those_the_document_names() -> None:
    asked = re.search(r"ask it \(([^)]*)\)", row_of("dataset/kind.py"))
    assert asked, "the dataset/kind.py row says who asks it"
    assert set(ticked(asked[1])) == _calls_of("dataset_kind")


def _yaml_reads(tree: ast.AST) -> list[int]:
    reads = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all",
             "full_load_all", "unsafe_load_all"}
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr in reads
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "yaml"]


def _unsafe_torch_loads(tree: ast.AST) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            and not any(k.arg == "weights_only" and isinstance(k.value, ast.Constant)
                        and k.value.value is True for k in node.keywords)]


def test_the_scans_see_a_yaml_read_and_a_torch_load_without_weights_only() -> None:
    tree = ast.parse("yaml.safe_load(a)\nyaml.safe_dump(b)\ntorch.load(c)\n"
                     "torch.load(d, weights_only=True)\ntorch.load(e, weights_only=False)\n")
    assert _yaml_reads(tree) == [1]
    assert _unsafe_torch_loads(tree) == [3, 5]


def test_safeyaml_is_the_one_yaml_reader() -> None:
    found = [f"{p.relative_to(PACKAGE)}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
             if p.name != "safeyaml.py"
             for line in _yaml_reads(ast.parse(p.read_text(encoding="utf-8")))]
    assert found == [], "read YAML through shardcook.safeyaml.load"


def test_every_torch_load_is_weights_only() -> None:
    found = [f"{p.relative_to(PACKAGE)}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
             for line in _unsafe_torch_loads(ast.parse(p.read_text(encoding="utf-8")))]
    assert found == [], "torch.load untrusted bytes only with weights_only=True"


def _family_listings() -> set[str]:
    """The modules with a literal tuple, list, set or dict (keys) holding two family names."""
    from shardcook.encoders.models import MODELS

    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            items = node.keys if isinstance(node, ast.Dict) else (
                node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [])
            names = {i.value for i in items if isinstance(i, ast.Constant) and i.value in MODELS}
            if len(names) >= 2:
                found.add(path.relative_to(PACKAGE).as_posix())
    return found


def test_the_registry_is_the_one_list_of_families() -> None:
    sentence = re.search(r"No\s+other\s+module\s+lists\s+the\s+families\s+\(([^)]*)\)", TEXT)
    assert sentence, "docs/ARCHITECTURE.md says which modules besides the registry list families"
    assert _family_listings() == set(ticked(sentence[1]))


def test_the_tests_paragraph_names_the_fixtures_and_helpers() -> None:
    paragraph = section("## Tests").split("Helper functions are the package", 1)[1]
    fixtures = re.search(r"fixtures\s+\(([^)]*)\)", paragraph)
    assert fixtures
    conftest = ast.parse((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    defined = {node.name for node in conftest.body if isinstance(node, ast.FunctionDef)
               and any("fixture" in ast.unparse(d) for d in node.decorator_list)}
    assert set(ticked(fixtures[1])) == defined
    helpers = re.search(r"subject\s+\(e\.g\.([^)]*)\)", paragraph)
    assert helpers
    helper_folder = ROOT / "tests" / "helpers"
    missing = [h for h in ticked(helpers[1]) if not (helper_folder / f"{h}.py").exists()]
    assert missing == [], "helpers the paragraph names that tests/helpers/ lacks"
