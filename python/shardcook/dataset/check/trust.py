"""The code a dataset's metadata names, checked before anything imports or runs it.

Energon builds a dataset from `.nv-meta/dataset.yaml`: it imports the module of every mapping
holding `__module__` (at any depth: the sample class, a `part_filter` given as
`{__module__, __function__}`, ...) and runs the Python file that a `sample_loader` or
`part_filter` string names. A dataset from elsewhere could so run its own code in whoever checks
it. shardcook imports only modules of a short allowlist, and only from where they are installed:
one that would be found inside the dataset folder (the current folder under `python -m`) is
refused as well. Nothing here imports a module the allowlist does not hold.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from shardcook import safeyaml
from shardcook.layouts.names import DATASET_YAML, JSONL_SUFFIX, META_DIR
from shardcook.storage.location import Location, locate
from shardcook.storage.store import Store
from shardcook.storage.urls import is_url

#: The packages whose modules a dataset may name (with their submodules).
TRUSTED_PACKAGES = ("megatron.energon", "megatron.bridge", "shardcook")

#: dataset.yaml keys whose string value Energon runs as `file.py:function` from `.nv-meta`.
CODE_FILE_KEYS = ("sample_loader", "part_filter")


def _is_command_entry(module: str) -> bool:
    """A `__main__` module: importing one may run a command (print Usage, exit)."""
    return "__main__" in module.split(".")


def is_trusted(module: str) -> bool:
    """Whether `module` is one of `TRUSTED_PACKAGES` or inside one, and not a command entry."""
    return not _is_command_entry(module) and any(
        module == p or module.startswith(f"{p}.") for p in TRUSTED_PACKAGES)


def code_problems(content: Any, label: str, fix: str) -> list[str]:
    """One sentence per module or Python file that `content` (a parsed dataset.yaml, called
    `label`) names and that may not be imported or run; `fix` ends each sentence."""
    problems: list[str] = []
    allowed = ", ".join(TRUSTED_PACKAGES)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            module = node.get("__module__")
            if "__module__" in node and not (isinstance(module, str) and is_trusted(module)):
                why = ("a command-line entry that runs a command when imported; it was not "
                       "imported"
                       if isinstance(module, str) and _is_command_entry(module) else
                       f"which is not part of {allowed}; it was not imported, as that would run "
                       "the dataset's own code")
                problems.append(f"{label} names the module {module!r}, {why}{fix}")
            for key in CODE_FILE_KEYS:
                if isinstance(node.get(key), str):
                    problems.append(
                        f"{label}'s {key} names the Python file {node[key]!r}, which Energon "
                        f"would run; it was not run, as it is the dataset's own code{fix}")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(content)
    return problems


def _joined(base: Location, path: str) -> Location:
    """`path` as a metadataset in the folder `base` names it, as Energon resolves it: a URL as
    it is, else relative to `base` with `..` and `.` folded by name (links are not followed
    first: `link/../x` is `x` beside `link`, wherever `link` leads)."""
    joined = path if is_url(path) else base.store.absolute().where(path)
    return locate(joined, "The blended dataset")


def _referenced(content: Any, base: Location) -> Iterator[Location]:
    """The datasets and metadatasets a metadataset names (`path:` at any depth, relative to
    `base`), with the dataset.yaml stand-ins its `dataset_config:` entries name."""
    if isinstance(content, dict):
        if isinstance(content.get("path"), str):
            target = _joined(base, content["path"])
            yield target
            if isinstance(content.get("dataset_config"), str):
                yield _joined(target, f"{META_DIR}/{content['dataset_config']}")
        for value in content.values():
            yield from _referenced(value, base)
    elif isinstance(content, list):
        for value in content:
            yield from _referenced(value, base)


def _place_problems(place: Location, fix: str, todo: list[Location]) -> list[str]:
    """`code_problems` of what Energon may load at `place`, read through its store: the
    dataset.yaml of a dataset folder there, and the place itself as a YAML file (a metadataset,
    whose entries go on `todo`, or a dataset.yaml stand-in); a JSONL file names no code. Both
    are read: in a bucket a file and a folder can have one name."""
    problems = _yaml_problems(place.store, f"{META_DIR}/{DATASET_YAML}", fix)
    parent, name = place.split()
    if name and not name.endswith(JSONL_SUFFIX):
        problems += _yaml_problems(parent.store, name, fix, (todo, parent))
    return problems


def _yaml_problems(store: Store, name: str, fix: str,
                   entries: tuple[list[Location], Location] | None = None) -> list[str]:
    """`code_problems` of the YAML file `name` in `store`; with `entries` (a list and the
    folder they are relative to), the places it names go on that list. A missing or unparsable
    file is passed over, as is one a local folder cannot read: Energon can load no code from it
    either, and its own check names it; one the store refuses to give (a bucket's credentials)
    is a problem, since its code could not be checked."""
    label = store.child(name)
    try:
        content = safeyaml.load(store.read(name).decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        if store.refusal("The blended dataset", name, e) is None:
            return []
        return [(f"{label} cannot be read ({e.strerror or e}), so the code it may name cannot "
                 f"be checked{fix}")]
    except (UnicodeDecodeError, yaml.YAMLError):
        return []
    if entries is not None:
        todo, base = entries
        todo += _referenced(content, base)
    return code_problems(content, label, fix)


def blend_code_problems(path: Path, fix: str) -> list[str]:
    """`code_problems` of everything Energon would load for a blend entry: a dataset folder's
    dataset.yaml, or a metadataset .yaml and, through it, each dataset and metadataset it names
    (each once), those named by URL read through the storage client. A file that cannot be
    read is passed over: Energon cannot load code from it either, and its own check names it.

    Raises:
        ConfigError: a URL a metadataset names cannot be opened (see `storage.locate`).
    """
    problems: list[str] = []
    seen: set[str] = set()
    todo: list[Location] = [Location(str(path))]
    while todo:
        place = todo.pop()
        key = place.store.absolute().where("")
        if key in seen:
            continue
        seen.add(key)
        problems += _place_problems(place, fix, todo)
    return problems


def _inside(place: str, root: Path) -> bool:
    return Path(place).resolve().is_relative_to(root.resolve())


def import_installed(module: str, root: Path) -> ModuleType:
    """Imports `module` (a trusted name), package by package, refusing any of them that would
    be found inside `root`.

    Raises:
        ImportError: a package of the name is missing, or lies inside `root` (the message says
            which); nothing of it was run.
    """
    parts = module.split(".")
    for n in range(1, len(parts) + 1):
        name = ".".join(parts[:n])
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)  # its parent is imported: this runs nothing
        if spec is None:
            raise ImportError(f"there is no module {name}")
        places = [spec.origin, *(spec.submodule_search_locations or [])]
        if any(p and Path(p).is_absolute() and _inside(p, root) for p in places):
            raise ImportError(f"{name} would be imported from inside the dataset folder")
        importlib.import_module(name)
    return sys.modules[module]

