"""Run configuration: dataclasses per section, YAML loading, and CLI > YAML > default precedence.

A YAML config has the sections `source`, `output`, `image`, `model`, `data_format`, `auth` and
(for `chatml`) `chatml`; inside a section the keys are the CLI option names with `_` for `-`
(`--image-size` is `image.image_size`; chatml's `--max-pixels` is `chatml.max_pixels`). AMD
Primus's data-prep keys are accepted as well (`source.type`, `image.center_crop`,
`model.vae_latent_mode`, ...; see `PRIMUS_KEYS`) and resolve to ours; a key given in both
spellings with different values is an error naming both.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from shardcook.dataset.splits import parse_ratio
from shardcook.errors import ConfigError

SOURCE_TYPES = ("directory", "huggingface", "webdataset", "jsonl")
#: The input option each source type needs.
SOURCE_LOCATIONS = {"directory": "input_dir", "huggingface": "hf_dataset",
                    "webdataset": "input_path", "jsonl": "input_path"}
#: The largest image side shardcook writes: WebP's limit, and a 16383^2 RGB image is 0.8 GB.
MAX_IMAGE_SIDE = 16383
#: --workers above this many threads per core is capped (thousands of threads only thrash).
MAX_WORKERS_PER_CPU = 4
RESIZE_MODES = ("crop", "stretch", "variable", "bucket")
#: Primus's `vae_latent_mode` values -> our `latent_mode`.
PRIMUS_LATENT_MODES = {"presampled": "sample", "resample": "resample"}
IMAGE_FORMATS = ("jpg", "png", "webp")
#: Other spellings of the image formats (Primus's raw takes JPEG, PNG, WEBP).
IMAGE_FORMAT_ALIASES = {"jpeg": "jpg", "JPEG": "jpg", "JPG": "jpg", "PNG": "png", "WEBP": "webp"}
VIDEO_LAYOUTS = ("frames", "mp4")
#: What a chatml sample's single image part may be.
CHATML_IMAGE_FORMATS = ("jpg", "png")


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

    def location(self) -> str:
        """The input option `source_type` needs (`input_dir`, `hf_dataset` or `input_path`);
        ConfigError when it is not set."""
        need = SOURCE_LOCATIONS[self.source_type]
        value = getattr(self, need)
        if not value:
            raise ConfigError(
                f"--source-type {self.source_type} needs --{need.replace('_', '-')} "
                f"(or source.{need} in the config)."
            )
        return str(value)


@dataclass
class OutputConfig:
    """Where and how shards are written."""

    output_dir: str | None = None
    shard_size: int = 1000
    split: list[float] = field(default_factory=lambda: [1.0, 0.0, 0.0])
    finalize: bool = True
    overwrite: bool = False
    quiet: bool = False

    @property
    def path(self) -> Path:
        """`output_dir` as a path; ConfigError when it is not set."""
        if not self.output_dir:
            raise ConfigError("--output-dir is required (or output.output_dir in the config).")
        return Path(self.output_dir)


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
    """The encoders (`encode` only; `raw` ignores this section). `precision` and `latent_mode`
    left unset take the `layout`'s defaults (`pipeline.encode.LAYOUT_DEFAULTS`)."""

    layout: str = "primus"
    model_path: str = "black-forest-labs/FLUX.1-dev"
    vae_path: str | None = None
    clip_path: str | None = None
    t5_path: str | None = None
    revision: str | None = None
    precision: str | None = None
    stored_dtype: str | None = None
    batch_size: int = 8
    t5_max_length: int = 512
    latent_mode: str | None = None
    seed: int = 0
    device: str | None = None


@dataclass
class DataFormatConfig:
    """Which fields of an input hold the image and the caption (dotted paths into JSON)."""

    image_column: str | None = None
    caption_column: str | None = None
    #: Several candidate fields, tried in order per input (Primus's `image_keys`).
    image_columns: list[str] | None = None
    #: Several candidate fields, tried in order per input (Primus's `caption_keys`).
    caption_columns: list[str] | None = None


@dataclass
class AuthConfig:
    """Credentials: where the Hugging Face token is (the file is read, never printed)."""

    hf_token_file: str | None = None


@dataclass
class ChatmlConfig:
    """How `chatml` builds conversations, splits them and stores their media."""

    conversation_column: str | None = None
    question_column: str | None = None
    answer_column: str | None = None
    system_prompt: str | None = None
    val_fraction: float = 0.01
    hf_val_split: str | None = None
    train_rows: int | None = None
    val_rows: int | None = None
    max_pixels: int | None = None
    video_layout: str = "frames"
    video_fps: float = 2.0
    max_frames: int = 32


@dataclass
class RunConfig:
    """The whole resolved configuration of one run."""

    source: SourceConfig = field(default_factory=SourceConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data_format: DataFormatConfig = field(default_factory=DataFormatConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    #: Only `chatml` runs have this section (so other commands' manifests do not change).
    chatml: ChatmlConfig | None = None

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The configuration as plain nested dicts (JSON and YAML safe)."""
        out = dataclasses.asdict(self)
        if self.chatml is None:
            del out["chatml"]
        return out

    def to_yaml(self) -> str:
        """The configuration as YAML, in section and field order."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


_SECTION_CLASSES = {
    "source": SourceConfig,
    "output": OutputConfig,
    "image": ImageConfig,
    "model": ModelConfig,
    "data_format": DataFormatConfig,
    "auth": AuthConfig,
    "chatml": ChatmlConfig,
}
# option name -> section name; a name two sections share goes to the first (chatml's
# `max_pixels` is addressed as `chatml.max_pixels`)
OPTION_SECTION: dict[str, str] = {}
for _section_name, _cls in _SECTION_CLASSES.items():
    for _f in dataclasses.fields(_cls):
        OPTION_SECTION.setdefault(_f.name, _section_name)


def _section(cfg: RunConfig, name: str) -> Any:
    """The section object `name` of `cfg`, creating the optional chatml section on first use."""
    if name == "chatml" and cfg.chatml is None:
        cfg.chatml = ChatmlConfig()
    return getattr(cfg, name)


def _option(name: str) -> tuple[str, str]:
    """(section, field) of a CLI option name, plain (`image_size`) or dotted (`chatml.max_pixels`)."""
    if "." in name:
        section, _, key = name.partition(".")
        return section, key
    if name not in OPTION_SECTION:
        raise AssertionError(f"CLI option {name!r} has no config field")
    return OPTION_SECTION[name], name


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


#: Primus's data-prep config keys that are only another name for one of ours:
#: (section, Primus key) -> (our section, our key).
PRIMUS_KEYS: dict[tuple[str, str], tuple[str, str]] = {
    ("source", "type"): ("source", "source_type"),
    ("output", "max_samples"): ("source", "max_samples"),
    ("data_format", "image_key"): ("data_format", "image_column"),
    ("data_format", "caption_key"): ("data_format", "caption_column"),
    ("data_format", "image_keys"): ("data_format", "image_columns"),
    ("data_format", "caption_keys"): ("data_format", "caption_columns"),
    ("model", "vae_latent_mode"): ("model", "latent_mode"),
}
#: Primus keys whose value is translated too (see `translate_primus`).
PRIMUS_VALUE_KEYS = frozenset(
    {("output", "compress"), ("output", "train_split"), ("image", "center_crop"),
     ("image", "variable_size")}
)

#: A config value and where it was spelled (`image.center_crop`, `--resize-mode`, ...).
Setting = tuple[Any, str]


def train_split(fraction: float, where: str) -> list[float]:
    """Primus's `--train-split F`: [F, (1-F)/2, (1-F)/2], for a finite F in [0, 1]."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
        0.0 <= fraction <= 1.0
    ):
        raise ConfigError(
            f"`{where}` must be a fraction between 0 and 1 (the share of train), not {fraction!r}."
        )
    rest = (1.0 - float(fraction)) / 2
    return [float(fraction), rest, rest]


def translate_primus(values: dict[tuple[str, str], Setting]) -> dict[tuple[str, str], Setting]:
    """Turns Primus's keys into ours: {(Primus section, key): (value, spelling)} ->
    {(our section, key): (value, spelling)}.

    `center_crop: false` squashes to size x size (`resize_mode: stretch`), `true` center-crops
    (`crop`); `variable_size: true` is `resize_mode: variable` (Primus then ignores
    center_crop); `compress: false` is what we always write and `true` is refused (Energon
    indexes and reads shards by byte offset, which a compressed tar does not have).
    """
    out: dict[tuple[str, str], Setting] = {}
    for (section, key), (value, where) in values.items():
        if (section, key) == ("output", "compress"):
            if not isinstance(value, bool):
                raise ConfigError(f"`{where}` must be true or false, not {value!r}.")
            if value:
                spelled = where if where.startswith("--") else f"{where}: true"
                raise ConfigError(
                    f"`{spelled}` is not supported: Energon indexes and reads uncompressed tars "
                    "by byte offset, so shards are always written uncompressed; drop it."
                )
        elif (section, key) == ("output", "train_split"):
            out[("output", "split")] = (train_split(value, where), where)
        elif (section, key) in (("image", "center_crop"), ("image", "variable_size")):
            if not isinstance(value, bool):
                raise ConfigError(f"`{where}` must be true or false, not {value!r}.")
            variable = values.get(("image", "variable_size"), (False, ""))[0] is True
            if key == "variable_size" and value:
                out[("image", "resize_mode")] = ("variable", where)
            elif key == "center_crop" and not variable:
                out[("image", "resize_mode")] = ("crop" if value else "stretch", where)
        elif (section, key) == ("model", "vae_latent_mode"):
            if value not in PRIMUS_LATENT_MODES:
                raise ConfigError(
                    f"`{where}` must be one of {', '.join(PRIMUS_LATENT_MODES)}, not {value!r}."
                )
            out[("model", "latent_mode")] = (PRIMUS_LATENT_MODES[value], where)
        else:
            out[PRIMUS_KEYS[(section, key)]] = (value, where)
    return out


def merge_settings(
    ours: dict[tuple[str, str], Setting], primus: dict[tuple[str, str], Setting]
) -> dict[tuple[str, str], Setting]:
    """`ours` plus the translated Primus settings; the same option set two ways to two different
    values is a ConfigError naming both spellings."""
    merged = dict(ours)
    for target, (value, where) in translate_primus(primus).items():
        if target in merged and merged[target][0] != value:
            other_value, other_where = merged[target]
            raise ConfigError(
                f"`{where}` and `{other_where}` disagree ({value!r} vs {other_value!r} for "
                f"{target[0]}.{target[1]}); give only one of them."
            )
        merged[target] = (value, where)
    return merged


def load_yaml(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Reads a config file into {section: {option: value}} in our keys, checking names, types
    and that Primus spellings agree with ours."""
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
    ours: dict[tuple[str, str], Setting] = {}
    primus: dict[tuple[str, str], Setting] = {}
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
        for key, value in values.items():
            where = f"{section}.{key}"
            if key in hints:
                ours[(section, key)] = (_check_type(where, value, hints[key]), where)
            elif (section, key) in PRIMUS_KEYS:
                target = PRIMUS_KEYS[(section, key)]
                hint = _type_hints(_SECTION_CLASSES[target[0]])[target[1]]
                primus[(section, key)] = (_check_type(where, value, hint), where)
            elif (section, key) in PRIMUS_VALUE_KEYS:
                primus[(section, key)] = (value, where)
            else:
                extra = [k for (sec, k) in (*PRIMUS_KEYS, *PRIMUS_VALUE_KEYS) if sec == section]
                raise ConfigError(
                    f"Unknown config key `{where}` in {str(p)!r}; "
                    f"`{section}` takes {', '.join([*hints, *extra])}."
                )
    out: dict[str, dict[str, Any]] = {}
    for (section, key), (value, _) in merge_settings(ours, primus).items():
        out.setdefault(section, {})[key] = value
    return out


#: Primus's command-line flags -> the Primus config key they stand for.
PRIMUS_FLAGS: dict[str, tuple[str, str]] = {
    "compress": ("output", "compress"),
    "center_crop": ("image", "center_crop"),
    "variable_size": ("image", "variable_size"),
    "train_split": ("output", "train_split"),
    "vae_latent_mode": ("model", "vae_latent_mode"),
}


def _flag(name: str, value: Any) -> str:
    """How a flag was spelled on the command line (`--no-center-crop` for center_crop=False)."""
    flag = name.replace("_", "-")
    return f"--no-{flag}" if value is False else f"--{flag}"


def resolve(
    cli_values: dict[str, Any],
    explicit: set[str] | frozenset[str] = frozenset(),
    config_file: str | os.PathLike[str] | None = None,
    primus_flags: dict[str, Any] | None = None,
) -> RunConfig:
    """Builds the run config: an explicit CLI option > the YAML file > the CLI/dataclass default.

    Args:
        cli_values: option name -> value as parsed (explicit or default).
        explicit: the option names given on the command line; those win over the YAML.
        config_file: optional YAML file.
        primus_flags: Primus's flags given on the command line (`PRIMUS_FLAGS` names -> value);
            they count as explicit options, and one that contradicts an explicit option of ours
            is a ConfigError naming both.
    """
    cfg = RunConfig()
    yaml_values = load_yaml(config_file) if config_file else {}
    for section, values in yaml_values.items():
        sec = _section(cfg, section)
        for key, value in values.items():
            setattr(sec, key, value)
    given: dict[tuple[str, str], Setting] = {}
    for name, value in cli_values.items():
        section, key = _option(name)
        in_yaml = key in yaml_values.get(section, {})
        if name in explicit or not in_yaml:
            hint = _type_hints(_SECTION_CLASSES[section])[key]
            where = f"--{key.replace('_', '-')}"
            checked = _check_type(where, value, hint)
            if name in explicit:
                given[(section, key)] = (checked, where)
            setattr(_section(cfg, section), key, checked)
    primus = {PRIMUS_FLAGS[n]: (v, _flag(n, v)) for n, v in (primus_flags or {}).items()}
    for (section, name), (value, _) in merge_settings(given, primus).items():
        setattr(getattr(cfg, section), name, value)
    cfg.image.image_format = IMAGE_FORMAT_ALIASES.get(cfg.image.image_format,
                                                      cfg.image.image_format)
    check(cfg)
    return cfg


def check_auth(cfg: RunConfig) -> None:
    """Reads the token file now (and forgets the token), so a missing or loose file stops the
    run before any work."""
    from shardcook.encoders.auth import read_token_file

    if cfg.auth.hf_token_file:
        read_token_file(cfg.auth.hf_token_file)


def check(cfg: RunConfig) -> None:
    """Raises ConfigError naming the first option whose value cannot work."""
    check_auth(cfg)
    s, o, i = cfg.source, cfg.output, cfg.image
    if s.source_type not in SOURCE_TYPES:
        raise ConfigError(
            f"--source-type must be one of {', '.join(SOURCE_TYPES)}, not {s.source_type!r}."
        )
    s.location()  # raises ConfigError when the input option is not set
    if s.max_samples is not None and s.max_samples < 1:
        raise ConfigError(f"--max-samples must be at least 1, not {s.max_samples}.")
    o.path  # noqa: B018 - raises ConfigError when no output folder was given
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
    for name in ("image_size", "max_size"):
        if getattr(i, name) > MAX_IMAGE_SIDE:
            raise ConfigError(f"--{name.replace('_', '-')} must be at most {MAX_IMAGE_SIDE} "
                              f"(WebP's largest side), not {getattr(i, name)}.")
    if i.min_size < 0:
        raise ConfigError(f"--min-size must be 0 or more, not {i.min_size}.")
    if i.workers is not None and i.workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {i.workers}.")
    i.workers = cap_workers(i.workers)
    if cfg.chatml is not None:
        check_chatml(cfg.chatml, s, i)


def check_chatml(c: ChatmlConfig, s: SourceConfig, i: ImageConfig) -> None:
    """The chatml section's checks (part of `check`)."""
    if i.image_format not in CHATML_IMAGE_FORMATS:
        raise ConfigError(f"--image-format must be jpg or png for chatml, not {i.image_format!r}.")
    if not 0.0 <= c.val_fraction < 1.0:
        raise ConfigError(f"--val-fraction must be at least 0 and below 1, not {c.val_fraction}.")
    for name in ("max_pixels", "train_rows", "val_rows"):
        value = getattr(c, name)
        if value is not None and value < (0 if name == "val_rows" else 1):
            least = 0 if name == "val_rows" else 1
            raise ConfigError(f"--{name.replace('_', '-')} must be at least {least}, not {value}.")
    if c.video_layout not in VIDEO_LAYOUTS:
        raise ConfigError(
            f"--video-layout must be one of {', '.join(VIDEO_LAYOUTS)}, not {c.video_layout!r}.")
    if not c.video_fps > 0:
        raise ConfigError(f"--video-fps must be above 0, not {c.video_fps}.")
    if c.max_frames < 1:
        raise ConfigError(f"--max-frames must be at least 1, not {c.max_frames}.")
    if (c.question_column is None) != (c.answer_column is None):
        raise ConfigError("--question-column and --answer-column go together; give both.")
    if c.system_prompt is not None and c.question_column is None:
        raise ConfigError("--system-prompt needs --question-column and --answer-column.")
    if c.hf_val_split is not None and s.source_type != "huggingface":
        raise ConfigError("--hf-val-split needs a Hugging Face dataset (--hf-dataset).")
    if c.val_rows is not None and c.train_rows is None and c.hf_val_split is None:
        raise ConfigError("--val-rows needs --train-rows (or --hf-val-split).")


def cap_workers(workers: int | None) -> int | None:
    """`workers`, capped at `MAX_WORKERS_PER_CPU` per core with one log line saying so."""
    limit = MAX_WORKERS_PER_CPU * (os.cpu_count() or 1)
    if workers is None or workers <= limit:
        return workers
    logging.getLogger(__name__).warning(
        "--workers %d is more than %d per core; using %d threads.", workers,
        MAX_WORKERS_PER_CPU, limit)
    return limit


# Options that change what is written; a resumed run must match the earlier run on all of them.
RUNTIME_ONLY = frozenset(
    {"output_dir", "finalize", "overwrite", "quiet", "workers", "hf_token_file"}
)


def output_affecting(cfg: RunConfig, *, with_model: bool = False) -> dict[str, Any]:
    """The flat {option: value} map a resumed run is compared on (runtime-only options left out)."""
    flat: dict[str, Any] = {}
    for section, values in cfg.to_dict().items():
        if section == "model" and not with_model:
            continue
        for key, value in values.items():
            if key not in RUNTIME_ONLY:
                flat[key if key not in flat else f"{section}.{key}"] = value
    as_json: dict[str, Any] = json.loads(json.dumps(flat))  # tuples become lists, as on disk
    return as_json
