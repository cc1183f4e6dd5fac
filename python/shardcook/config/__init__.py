"""Run configuration: dataclasses per section, YAML loading, and CLI > YAML > default precedence.

A YAML config has the sections `source`, `output`, `image`, `model`, `data_format`, `auth` and
(for `chatml`) `chatml`; inside a section the keys are the CLI option names with `_` for `-`
(`--image-size` is `image.image_size`; chatml's `--max-pixels` is `chatml.max_pixels`). AMD
Primus's data-prep keys are accepted as well (`source.type`, `image.center_crop`,
`model.vae_latent_mode`, ...; see `PRIMUS_KEYS`) and resolve to ours; a key given in both
spellings with different values is an error naming both. `ingest`'s section (`ingest`, with
the `output` options it takes) is resolved from its own Primus-shaped config file by
`config.ingest`.

This module resolves a config (YAML, command line, defaults); `sections` holds the dataclasses,
`primus` the translation of Primus's keys and flags, `checks` the checks of a resolved config.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Collection
from pathlib import Path
from typing import Any

from shardcook.config.checks import check, check_encode, encodes_video, output_affecting
from shardcook.config.primus import (
    PRIMUS_FLAGS,
    PRIMUS_KEYS,
    PRIMUS_VALUE_KEYS,
    Setting,
    _flag,
    merge_settings,
)
from shardcook.config.sections import (
    _SECTION_CLASSES,
    IMAGE_FORMAT_ALIASES,
    AutoModelConfig,
    ChatmlConfig,
    ImageConfig,
    IngestSourceConfig,
    RunConfig,
    VideoConfig,
    option_key,
)
from shardcook.errors import ConfigError
from shardcook.fields import typed
from shardcook.storage.local import check_local_path


def _section(cfg: RunConfig, name: str) -> Any:
    """The section object `name` of `cfg`, creating the optional chatml, video and automodel
    sections on first use (`check_encode` drops the video section of a run that encodes images,
    and the automodel section of a run of another layout)."""
    if name == "chatml" and cfg.chatml is None:
        cfg.chatml = ChatmlConfig()
    if name == "video" and cfg.video is None:
        cfg.video = VideoConfig()
    if name == "automodel" and cfg.automodel is None:
        cfg.automodel = AutoModelConfig()
    return getattr(cfg, name)


def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _typed(where: str, value: Any, hint: Any) -> Any:
    """`value` as the field's type (`fields.typed`), named as the user spelled it."""
    return typed(where, value, hint, none="null", quote=True)


#: A config file larger than this is refused (a real one is a few kilobytes).
MAX_CONFIG_BYTES = 1 << 20


def read_config_file(path: str | os.PathLike[str]) -> Any:
    """The parsed YAML of a `--config` file: a local regular file of at most `MAX_CONFIG_BYTES`,
    UTF-8, valid YAML without duplicate keys; anything else is a ConfigError saying which."""
    import yaml

    from shardcook import safeyaml
    from shardcook.files import read_regular_file

    check_local_path(path, "--config")
    p = Path(path)
    try:
        text = read_regular_file(p, limit=MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"Config file {str(p)!r} does not exist; "
                          "pass an existing --config file.") from None
    except UnicodeDecodeError:
        raise ConfigError(f"Config file {str(p)!r} is not UTF-8 text; "
                          "pass a YAML --config file.") from None
    except OSError as e:
        raise ConfigError(
            f"Config file {str(p)!r} cannot be read ({e.strerror or e}); pass a YAML --config file."
        ) from None
    try:
        data = safeyaml.load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"Config file {str(p)!r} is not valid YAML "
                          f"({safeyaml.describe(e)}).") from None
    return data


def config_mapping(value: Any, where: str | None, keys: Collection[str],
                   path: str | os.PathLike[str]) -> dict[str, Any]:
    """`value`, read from the config file `path` at `where` (None: its top level, a mapping of
    sections), when it is a mapping of `keys` only (or nothing: {}); else ConfigError naming the
    first unknown key and the keys there are."""
    p = str(Path(path))
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"Config file {p!r} must be a mapping of sections, not a list or value."
                          if where is None else
                          f"Config section `{where}` must be a mapping of options.")
    for key in value:
        if key not in keys:
            raise ConfigError(
                f"Unknown config section `{key}` in {p!r}; the sections are {', '.join(keys)}."
                if where is None else
                f"Unknown config key `{where}.{key}` in {p!r}; `{where}` takes "
                f"{', '.join(keys)}.")
    return value


def load_yaml(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Reads a config file into {section: {option: value}} in our keys, checking names, types
    and that Primus spellings agree with ours."""
    # `ingest`'s section comes from its own, Primus-shaped config file (`config.ingest`)
    sections = [name for name in _SECTION_CLASSES if name != "ingest"]
    data = config_mapping(read_config_file(path), None, sections, path)
    ours: dict[tuple[str, str], Setting] = {}
    primus: dict[tuple[str, str], Setting] = {}
    for section, values in data.items():
        hints = _type_hints(_SECTION_CLASSES[section])
        extra = [k for (sec, k) in (*PRIMUS_KEYS, *PRIMUS_VALUE_KEYS) if sec == section]
        for key, value in config_mapping(values, section, [*hints, *extra], path).items():
            where = f"{section}.{key}"
            if key in hints:
                ours[(section, key)] = (_typed(where, value, hints[key]), where)
            elif (section, key) in PRIMUS_KEYS:
                target = PRIMUS_KEYS[(section, key)]
                hint = _type_hints(_SECTION_CLASSES[target[0]])[target[1]]
                primus[(section, key)] = (_typed(where, value, hint), where)
            else:
                primus[(section, key)] = (value, where)
    out: dict[str, dict[str, Any]] = {}
    for (section, key), (value, _) in merge_settings(ours, primus).items():
        out.setdefault(section, {})[key] = value
    return out


def resolve(
    cli_values: dict[str, Any],
    explicit: set[str] | frozenset[str] = frozenset(),
    config_file: str | os.PathLike[str] | None = None,
    primus_flags: dict[str, Any] | None = None,
    *,
    encode: bool = False,
) -> RunConfig:
    """Builds the run config: an explicit CLI option > the YAML file > the CLI/dataclass default.

    Args:
        cli_values: option name -> value as parsed (explicit or default).
        explicit: the option names given on the command line; those win over the YAML.
        config_file: optional YAML file.
        primus_flags: Primus's flags given on the command line (`PRIMUS_FLAGS` names -> value);
            they count as explicit options, and one that contradicts an explicit option of ours
            is a ConfigError naming both.
        encode: the config of an `encode` run: its layout's defaults are filled in and its
            model options checked too (`check_encode`).
    """
    cfg = RunConfig()
    yaml_values = load_yaml(config_file) if config_file else {}
    for section, values in yaml_values.items():
        sec = _section(cfg, section)
        for key, value in values.items():
            setattr(sec, key, value)
    given: dict[tuple[str, str], Setting] = {}
    for name, value in cli_values.items():
        section, key = option_key(name)
        in_yaml = key in yaml_values.get(section, {})
        if name in explicit or not in_yaml:
            hint = _type_hints(_SECTION_CLASSES[section])[key]
            where = f"--{key.replace('_', '-')}"
            checked = _typed(where, value, hint)
            if name in explicit:
                given[(section, key)] = (checked, where)
            setattr(_section(cfg, section), key, checked)
    flags = dict(primus_flags or {})
    if encode and cfg.video is not None and "center_crop" in flags and encodes_video(
            cfg.model.layout):  # a video run's --center-crop is Bridge's, not Primus's
        cfg.video.center_crop = bool(flags.pop("center_crop"))
    primus = {PRIMUS_FLAGS[n]: (v, _flag(n, v)) for n, v in flags.items()}
    for (section, name), (value, _) in merge_settings(given, primus).items():
        setattr(getattr(cfg, section), name, value)
    cfg.image.image_format = IMAGE_FORMAT_ALIASES.get(cfg.image.image_format,
                                                      cfg.image.image_format)
    chosen = {(section, key) for section, values in yaml_values.items() for key in values}
    cfg.chosen = frozenset(chosen | set(given))
    check(cfg, cfg.chosen)
    if encode:
        check_encode(cfg, cfg.chosen)
    return cfg


__all__ = ["PRIMUS_FLAGS", "ChatmlConfig", "ImageConfig", "IngestSourceConfig", "RunConfig",
           "config_mapping", "load_yaml", "output_affecting", "resolve"]
