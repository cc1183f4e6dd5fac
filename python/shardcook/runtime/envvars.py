"""Settings read from environment variables, each checked into one sentence."""

from __future__ import annotations

import math
import os

from shardcook.errors import ConfigError


def env_seconds(name: str, default: float, low: float = 0.0, high: float = math.inf) -> float:
    """The seconds the environment variable `name` sets (`default` when unset): a number above 0,
    from `low` to `high`, else ConfigError."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and low <= value <= high and math.isfinite(value)):  # also refuses nan
        bounds = ("a positive number of seconds" if math.isinf(high) and low <= 0
                  else f"a number of seconds from {low:g} to {high:g}")
        raise ConfigError(f"{name}={text!r} must be {bounds}.")
    return value
