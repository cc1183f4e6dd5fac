"""Checks of the loader side's arguments: a wrong one is refused where it is given, in one sentence
(`ConfigError`), instead of failing later inside Energon or torch."""

from __future__ import annotations

import math
from typing import Any

from shardcook.errors import ConfigError

__all__ = [
    "check_bool",
    "check_choice",
    "check_factor",
    "check_optional_count",
    "check_seconds",
    "check_task_encoder",
    "check_worker_config",
]


def check_bool(name: str, value: object) -> None:
    """Refuses anything but True or False."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, not {value!r}.")


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """Refuses a value that is not one of `choices`."""
    if value not in choices:
        raise ConfigError(f"{name} must be {' or '.join(map(repr, choices))}, not {value!r}.")


def check_seconds(name: str, value: object) -> None:
    """Refuses a duration that is not a finite number of seconds, 0 or more."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0):
        raise ConfigError(f"{name} must be a finite number of seconds, 0 or more, not {value!r}.")


def check_factor(name: str, value: object) -> None:
    """Refuses a VAE factor that is not None or a finite number (a NaN would make every latent
    NaN)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number or None, not {value!r}.")


def check_optional_count(name: str, value: object, *, minimum: int, off: str) -> None:
    """Refuses anything but None or a whole number of at least `minimum`; `off` says what None
    does."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            f"{name} must be a whole number of at least {minimum}, or None {off}, not {value!r}."
        )


def check_worker_config(value: object) -> None:
    """Refuses anything but None or a `megatron.energon.WorkerConfig`."""
    from megatron.energon import WorkerConfig

    if value is not None and not isinstance(value, WorkerConfig):
        raise ConfigError(
            f"worker_config must be a megatron.energon.WorkerConfig or None, not "
            f"{_describe(value)}."
        )


def check_task_encoder(value: object) -> None:
    """Refuses anything but None or a `megatron.energon.TaskEncoder` instance."""
    from megatron.energon import TaskEncoder

    if value is None or isinstance(value, TaskEncoder):
        return
    hint = " (pass an instance: add the parentheses)" if isinstance(value, type) else ""
    raise ConfigError(
        f"task_encoder must be a megatron.energon.TaskEncoder such as "
        f"shardcook.energon.EncodedDiffusionTaskEncoder(), not {_describe(value)}{hint}."
    )


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"
