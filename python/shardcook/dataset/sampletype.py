"""What `--sample-type` and `--field-map` write into dataset.yaml, as `energon prepare
--sample-type ... --field-map ...` does: a dataset class (CrudeWebdataset, CaptioningWebdataset,
or `module:Class` such as Megatron-Bridge's ChatMLWebdataset) is named at the top level; a Sample
class of megatron.energon (CaptioningSample, ImageClassificationSample, ...) is named under
`sample_type`, read by Energon's standard webdataset factory through the `field_map`."""

from __future__ import annotations

import json
from typing import Any

from shardcook.errors import ConfigError

ENERGON = "megatron.energon"
CRUDE = "CrudeWebdataset"
#: The keys of dataset.yaml that name its class, in either form.
CLASS_KEYS = ("__module__", "__class__", "sample_type")


def _is_energon_sample(cls: str) -> bool:
    """Whether megatron.energon's `cls` is a Sample class; ConfigError when it has no such class."""
    from megatron import energon

    found = getattr(energon, cls, None)
    if not isinstance(found, type):
        raise ConfigError(
            f"--sample-type {cls} is not a class of {ENERGON}; use CrudeWebdataset, a sample "
            "class such as CaptioningSample (with --field-map), or module:Class for a class "
            "elsewhere"
        )
    return issubclass(found, energon.Sample)


def class_keys(sample_type: str) -> dict[str, Any]:
    """dataset.yaml's keys naming `sample_type` (`Class` of megatron.energon, or `module:Class`)."""
    module, _, cls = sample_type.rpartition(":")
    module = module or ENERGON
    if not cls:
        raise ConfigError(f"--sample-type {sample_type!r} names no class; write Class or "
                          "module:Class")
    # every layout's default; known without importing Energon (finalize --no-validate stays light)
    if module == ENERGON and cls != CRUDE and _is_energon_sample(cls):
        return {"sample_type": {"__module__": module, "__class__": cls}}
    return {"__module__": module, "__class__": cls}


def check_typed(content: dict[str, Any]) -> None:
    """A dataset.yaml naming a Sample class must say how its fields are read."""
    nested = content.get("sample_type")
    if isinstance(nested, dict) and "__class__" not in content and not (
        content.get("field_map") or content.get("sample_loader")
    ):
        raise ConfigError(
            f"--sample-type {nested.get('__class__')} needs --field-map naming the part of each "
            'field, e.g. \'{"image": "jpg", "caption": "txt"}\''
        )


def parse_field_map(text: str) -> dict[str, str]:
    """`--field-map` as `energon prepare` takes it: a JSON object of field name to part name."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"--field-map is not valid JSON ({e}); write it like "
                          '\'{"image": "jpg", "caption": "txt"}\'') from None
    if not (isinstance(value, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
        raise ConfigError("--field-map must be a JSON object of field names to part names, like "
                          '\'{"image": "jpg", "caption": "txt"}\'')
    return value
