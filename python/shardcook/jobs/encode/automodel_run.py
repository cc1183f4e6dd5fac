"""What an `encode --layout automodel` run asks of its config, for its image and video
processors alike: the family `--model-type` picked, its `automodel` section and entry, and the
pixel budget of its buckets."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardcook.config import RunConfig
    from shardcook.config.sections import AutoModelConfig
    from shardcook.encoders.models import AutoModelCache, ModelFamily


def family_of(cfg: RunConfig) -> ModelFamily:
    """The family `--model-type` picked (the config resolved it into the layout's spec)."""
    from shardcook.encoders.models import MODELS

    assert cfg.layout is not None and cfg.layout.encode is not None
    return MODELS[cfg.layout.encode.model]


def automodel_config(cfg: RunConfig) -> AutoModelConfig:
    assert cfg.automodel is not None  # the section of every automodel run (`check_encode`)
    return cfg.automodel


def automodel_of(family: ModelFamily) -> AutoModelCache:
    assert family.automodel is not None  # --model-type names only families that have one
    return family.automodel


def pixel_budget(cfg: RunConfig, default: int) -> int:
    """--max-pixels, else --resolution-preset's budget, else `default` (the tool's)."""
    from shardcook.layouts.automodel import RESOLUTION_PRESETS

    m = automodel_config(cfg)
    if m.max_pixels is not None:
        return m.max_pixels
    if m.resolution_preset is not None:
        return RESOLUTION_PRESETS[m.resolution_preset]
    return default
