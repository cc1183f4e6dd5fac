"""Run configuration: dataclasses per section, YAML loading, and CLI > YAML > default precedence.

A YAML config has the sections `source`, `output`, `image`, `model` and `data_format`; inside a
section the keys are the CLI option names with `_` for `-` (`--image-size` is `image.image_size`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from shardcook.dataset.splits import parse_ratio
from shardcook.errors import ConfigError

SOURCE_TYPES = ("directory", "huggingface", "webdataset")
RESIZE_MODES = ("crop", "stretch", "variable", "bucket")
IMAGE_FORMATS = ("jpg", "png", "webp")


@dataclass
class SourceConfig:
    """Where the inputs come from."""

    source_type: str = "directory"
    input_dir: str | None = None
    hf_dataset: str | None = None
    hf_split: str = "train"
    hf_data_files: list[str] | None = None
    input_path: str | None = None
    max_samples: int | None = None


@dataclass
class OutputConfig:
    """Where and how shards are written."""

    output_dir: str | None = None
    shard_size: int = 1000
    split: list[float] = field(default_factory=lambda: [1.0, 0.0, 0.0])
    finalize: bool = True
    overwrite: bool = False
    quiet: bool = False


@dataclass
class ImageConfig:
    """How images are decoded, resized and re-encoded."""

    image_size: int = 1024
    resize_mode: str = "crop"
    max_size: int = 1024
    image_format: str = "jpg"
    image_quality: int = 95
    min_size: int = 0
    max_pixels: int = 178_956_970
    workers: int | None = None


@dataclass
class ModelConfig:
    """The encoders (`encode` only; `raw` ignores this section)."""

    model_path: str = "black-forest-labs/FLUX.1-dev"
    vae_path: str | None = None
    clip_path: str | None = None
    t5_path: str | None = None
    revision: str | None = None
    precision: str = "bf16"
    stored_dtype: str | None = None
    batch_size: int = 8
    t5_max_length: int = 512
    latent_mode: str = "sample"
    seed: int = 0
    device: str | None = None


@dataclass
class DataFormatConfig:
    """Which fields of an input hold the image and the caption."""

    image_column: str | None = None
    caption_column: str | None = None


@dataclass
class RunConfig:
    """The whole resolved configuration of one run."""

    source: SourceConfig = field(default_factory=SourceConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data_format: DataFormatConfig = field(default_factory=DataFormatConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The configuration as plain nested dicts (JSON and YAML safe)."""
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        """The configuration as YAML, in section and field order."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


SECTIONS: dict[str, type] = {f.name: f.type for f in dataclasses.fields(RunConfig)}
_SECTION_CLASSES = {
    "source": SourceConfig,
    "output": OutputConfig,
    "image": ImageConfig,
    "model": ModelConfig,
    "data_format": DataFormatConfig,
}
# option name -> section name; option names are unique across sections
OPTION_SECTION: dict[str, str] = {
    f.name: section for section, cls in _SECTION_CLASSES.items() for f in dataclasses.fields(cls)
}


def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_type(where: str, value: Any, hint: Any) -> Any:
    """Returns `value` converted to `hint` where that is lossless, or raises ConfigError."""
    origin = typing.get_origin(hint)
    if origin in (Union, getattr(types, "UnionType", Union)):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _check_type(where, value, inner)
    if origin is list:
        (inner,) = typing.get_args(hint)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value] if inner is not float else value
        if isinstance(value, str) and inner is float:
            value = [p for p in value.split(",") if p.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"`{where}` must be a list, not {type(value).__name__} {value!r}.")
        return [_check_type(f"{where}[{i}]", v, inner) for i, v in enumerate(value)]
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"`{where}` must be true or false, not {value!r}.")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"`{where}` must be an integer, not {value!r}.")
    if hint is float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"`{where}` must be a number, not {value!r}.")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"`{where}` must be a string, not {value!r}.")
    raise AssertionError(f"unhandled config type {hint!r}")


def load_yaml(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Reads a config file into {section: {option: value}}, checking names and types."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"Config file {str(p)!r} does not exist; pass an existing --config file.")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"Config file {str(p)!r} is not valid YAML ({first}).") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {str(p)!r} must be a mapping of sections, not a list or value.")
    out: dict[str, dict[str, Any]] = {}
    for section, values in data.items():
        if section not in _SECTION_CLASSES:
            raise ConfigError(
                f"Unknown config section `{section}` in {str(p)!r}; "
                f"the sections are {', '.join(_SECTION_CLASSES)}."
            )
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise ConfigError(f"Config section `{section}` must be a mapping of options.")
        hints = _type_hints(_SECTION_CLASSES[section])
        checked = {}
        for key, value in values.items():
            if key not in hints:
                raise ConfigError(
                    f"Unknown config key `{section}.{key}` in {str(p)!r}; "
                    f"`{section}` takes {', '.join(hints)}."
                )
            checked[key] = _check_type(f"{section}.{key}", value, hints[key])
        out[section] = checked
    return out


def resolve(
    cli_values: dict[str, Any],
    explicit: set[str] | frozenset[str] = frozenset(),
    config_file: str | os.PathLike[str] | None = None,
) -> RunConfig:
    """Builds the run config: an explicit CLI option > the YAML file > the CLI/dataclass default.

    Args:
        cli_values: option name -> value as parsed (explicit or default).
        explicit: the option names given on the command line; those win over the YAML.
        config_file: optional YAML file.
    """
    cfg = RunConfig()
    yaml_values = load_yaml(config_file) if config_file else {}
    for section, values in yaml_values.items():
        sec = getattr(cfg, section)
        for key, value in values.items():
            setattr(sec, key, value)
    for name, value in cli_values.items():
        if name not in OPTION_SECTION:
            raise AssertionError(f"CLI option {name!r} has no config field")
        section = OPTION_SECTION[name]
        in_yaml = name in yaml_values.get(section, {})
        if name in explicit or not in_yaml:
            hint = _type_hints(_SECTION_CLASSES[section])[name]
            setattr(getattr(cfg, section), name, _check_type(f"--{name.replace('_', '-')}", value, hint))
    check(cfg)
    return cfg


def check(cfg: RunConfig) -> None:
    """Raises ConfigError naming the first option whose value cannot work."""
    s, o, i = cfg.source, cfg.output, cfg.image
    if s.source_type not in SOURCE_TYPES:
        raise ConfigError(
            f"--source-type must be one of {', '.join(SOURCE_TYPES)}, not {s.source_type!r}."
        )
    needed = {"directory": "input_dir", "huggingface": "hf_dataset", "webdataset": "input_path"}
    need = needed[s.source_type]
    if not getattr(s, need):
        raise ConfigError(
            f"--source-type {s.source_type} needs --{need.replace('_', '-')} "
            f"(or source.{need} in the config)."
        )
    if s.max_samples is not None and s.max_samples < 1:
        raise ConfigError(f"--max-samples must be at least 1, not {s.max_samples}.")
    if not o.output_dir:
        raise ConfigError("--output-dir is required (or output.output_dir in the config).")
    if o.shard_size < 1:
        raise ConfigError(f"--shard-size must be at least 1, not {o.shard_size}.")
    try:
        parse_ratio(o.split)
    except ConfigError as e:
        raise ConfigError(f"--split: {e}") from None
    if i.resize_mode not in RESIZE_MODES:
        raise ConfigError(
            f"--resize-mode must be one of {', '.join(RESIZE_MODES)}, not {i.resize_mode!r}."
        )
    if i.image_format not in IMAGE_FORMATS:
        raise ConfigError(
            f"--image-format must be one of {', '.join(IMAGE_FORMATS)}, not {i.image_format!r}."
        )
    if not 1 <= i.image_quality <= 100:
        raise ConfigError(f"--image-quality must be between 1 and 100, not {i.image_quality}.")
    for name in ("image_size", "max_size", "max_pixels"):
        if getattr(i, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(i, name)}.")
    if i.min_size < 0:
        raise ConfigError(f"--min-size must be 0 or more, not {i.min_size}.")
    if i.workers is not None and i.workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {i.workers}.")


# Options that change what is written; a resumed run must match the earlier run on all of them.
RUNTIME_ONLY = frozenset({"output_dir", "finalize", "overwrite", "quiet", "workers"})


def output_affecting(cfg: RunConfig, *, with_model: bool = False) -> dict[str, Any]:
    """The flat {option: value} map a resumed run is compared on (runtime-only options left out)."""
    flat = {}
    for section, values in cfg.to_dict().items():
        if section == "model" and not with_model:
            continue
        for key, value in values.items():
            if key not in RUNTIME_ONLY:
                flat[key] = value
    return json.loads(json.dumps(flat))
