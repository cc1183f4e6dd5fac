"""Every error class shardcook defines carries a `kind` of its own from `ErrorKind`, so a caller
can branch on it instead of the message."""

from __future__ import annotations

import importlib
import pkgutil
from typing import get_args

import shardcook
from shardcook.errors import ErrorKind, ShardcookError


def _kinds(alias: object) -> set[str]:
    found: set[str] = set()
    for arg in get_args(alias):
        found |= _kinds(arg) if get_args(arg) else {arg}
    return found


def _error_classes() -> set[type[ShardcookError]]:
    for module in pkgutil.walk_packages(shardcook.__path__, "shardcook."):
        importlib.import_module(module.name)
    found: set[type[ShardcookError]] = set()
    todo = [ShardcookError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("shardcook.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_every_error_class_names_its_own_kind():
    kinds = _kinds(ErrorKind)
    classes = _error_classes()
    assert classes, "no error classes found"
    for cls in classes:
        assert "kind" in vars(cls), cls
        assert cls.kind in kinds, (cls, cls.kind)
        assert cls.kind != "error", cls
