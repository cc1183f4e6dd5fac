"""The one way shardcook reads YAML: PyYAML's safe loader, refusing a key given twice in one
mapping (plain PyYAML keeps the last one silently, so a second `image:` section would replace the
first without a word).

`load` parses text; `describe` turns a `yaml.YAMLError` into the short phrase our one-line errors
embed ("duplicate key 'image' at line 5").
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node

__all__ = ["UniqueKeyLoader", "describe", "load"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that raises `ConstructorError` on a duplicate mapping key, naming it and
    its line. Keys brought in by a merge (`<<: *base`) may be overridden, as YAML intends."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            self._refuse_duplicates(node)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def _refuse_duplicates(self, node: MappingNode) -> None:
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if first is not key_node:
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"duplicate key {key!r} (first at line {first.start_mark.line + 1})",
                    key_node.start_mark,
                )


def load(text: str) -> Any:
    """Parses one YAML document safely (no Python objects), refusing duplicate keys.

    Raises:
        yaml.YAMLError: the text is not YAML, or a mapping repeats a key.
    """
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass: no Python objects


def describe(e: yaml.YAMLError) -> str:
    """What is wrong and where, in a few words: `duplicate key 'image' (first at line 2) at
    line 5`, `mapping values are not allowed here at line 3`."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or "not valid YAML"
    return f"{problem} at line {mark.line + 1}" if mark is not None else str(problem)
