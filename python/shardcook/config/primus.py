"""AMD Primus's data-prep config keys and flags, translated to ours; a setting given both ways
with different values is an error naming both spellings."""

from __future__ import annotations

from typing import Any

from shardcook.config.sections import PRIMUS_LATENT_MODES
from shardcook.errors import ConfigError

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
