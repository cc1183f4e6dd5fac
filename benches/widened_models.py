"""Tiny model folders widened in place for benches/automodel_vs_tool.py and its video families:
each model replaced by a fresh one of its class from its config, changed, so encoding rather
than start-up dominates a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def rebuild_diffusers(folder: Path, cls: Any, **changes: Any) -> None:
    """Replaces the model in `folder` with a fresh one of its class, its config changed."""
    config = dict(cls.load_config(folder))
    config.update(changes)
    cls.from_config(config).save_pretrained(folder)


def rebuild_transformers(folder: Path, cls: Any, edit: Any) -> None:
    """Replaces the model in `folder` with a fresh one of its class, its config edited by
    `edit`."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    edit(config)
    cls(config).save_pretrained(folder)
