"""The loader side's arguments, declared once with the rules their values must meet (the field
rules of the command-line options, `fields.Rule`): `check(name=value, ...)` refuses a wrong one
where it is given, in one sentence (`ConfigError`), instead of failing later inside Energon or
torch. A field's type says whether None is allowed ("not given"); its defaults are those of the
functions taking it, which differ."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Union

from shardcook.fields import RULES, Rule, check_rules, refusal, setting


def _count(minimum: int) -> Any:
    return lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= minimum


def _optional_count(minimum: int, off: str) -> Rule:
    """A whole number of at least `minimum`, or None; `off` says what None does."""
    return Rule(_count(minimum), f"a whole number of at least {minimum}, or None {off}")


def _finite(v: object) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _described(value: Any) -> str:
    """A value's repr, or its type's name when the repr is long (a tensor, an object)."""
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def _task_encoder_shown(value: Any) -> str:
    hint = " (pass an instance: add the parentheses)" if isinstance(value, type) else ""
    return f"{_described(value)}{hint}"


def _is_task_encoder(value: object) -> bool:
    from megatron.energon import TaskEncoder

    return isinstance(value, TaskEncoder)


def _is_worker_config(value: object) -> bool:
    from megatron.energon import WorkerConfig

    return isinstance(value, WorkerConfig)


BOOL = Rule(lambda v: isinstance(v, bool), "True or False")
IMAGE_FORMATS = ("tensor", "pil")


@dataclass
class LoaderArguments:
    """The arguments of `get_diffusion_loader`, the task encoders and the cookers that a caller
    may get wrong, each with its rule (never instantiated: no defaults)."""

    path: str | Path = setting(MISSING, Rule(lambda v: isinstance(v, (str, Path)),
                                             "a dataset folder or a metadataset .yaml"))
    batch_size: int = setting(MISSING, Rule(_count(1), "a whole number of at least 1"))
    num_workers: int = setting(MISSING, Rule(_count(0), "a whole number of 0 or more"))
    split: str = setting(MISSING, Rule(lambda v: isinstance(v, str),
                                       "a split name such as 'train'"))
    shuffle_buffer_size: int | None = setting(MISSING, _optional_count(0, "(no shuffling)"))
    max_samples_per_sequence: int | None = setting(MISSING, _optional_count(1, "(no limit)"))
    checkpoint_every_min_n_samples: int | None = setting(
        MISSING, _optional_count(1, "(no minimum)"))
    repeat: bool = setting(MISSING, BOOL)
    resample_latents: bool = setting(MISSING, BOOL)
    #: None: drop the last batch for train only.
    batch_drop_last: bool | None = setting(MISSING, BOOL)
    image_format: str = setting(MISSING, Rule(lambda v: v in IMAGE_FORMATS,
                                              " or ".join(map(repr, IMAGE_FORMATS))))
    checkpoint_every_sec: float = setting(
        MISSING, Rule(lambda v: _finite(v) and v >= 0, "a finite number of seconds, 0 or more"))
    #: A NaN factor would make every latent NaN.
    scaling_factor: float | None = setting(
        MISSING, Rule(_finite, "a finite number or None", _described))
    shift_factor: float | None = setting(
        MISSING, Rule(_finite, "a finite number or None", _described))
    task_encoder: Any | None = setting(MISSING, Rule(
        _is_task_encoder, "a megatron.energon.TaskEncoder such as "
                          "shardcook.energon.EncodedDiffusionTaskEncoder()", _task_encoder_shown))
    worker_config: Any | None = setting(MISSING, Rule(
        _is_worker_config, "a megatron.energon.WorkerConfig or None", _described))


_DECLARED = {f.name: f for f in dataclasses.fields(LoaderArguments)}
_HINTS = typing.get_type_hints(LoaderArguments)


def _takes_none(hint: Any) -> bool:
    return (typing.get_origin(hint) in (Union, types.UnionType)
            and type(None) in typing.get_args(hint))


def check(**values: object) -> None:
    """Raises ConfigError, in one sentence, for the first of `values` (arguments named as
    `LoaderArguments`' fields) that its field's rules refuse; None is refused where the field's
    type does not take it."""
    for name, value in values.items():
        declared = _DECLARED[name]
        if value is None and not _takes_none(_HINTS[name]):
            (rule,) = declared.metadata[RULES]
            raise refusal(name, rule.says, value, rule.shown)
        check_rules(name, value, declared)
