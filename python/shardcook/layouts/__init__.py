"""The one home of the on-disk format: names (`names`), what a layout is (`base.Layout`) and the
registry of layouts. A new layout is one module beside this file plus one line in `LAYOUTS`."""

from __future__ import annotations

from shardcook.layouts.automodel import AUTOMODEL
from shardcook.layouts.base import EncodeSpec, Layout, Reading, registry_function
from shardcook.layouts.bridge_flux import BRIDGE_FLUX
from shardcook.layouts.chatml import CHATML
from shardcook.layouts.generic import GENERIC
from shardcook.layouts.mlperf import MLPERF
from shardcook.layouts.preencoded import PREENCODED
from shardcook.layouts.raw import IMAGE_PARTS, RAW
from shardcook.layouts.wan import WAN

#: Every layout, by registry name.
LAYOUTS: dict[str, Layout] = {
    layout.name: layout for layout in (PREENCODED, RAW, CHATML, BRIDGE_FLUX, MLPERF, GENERIC, WAN,
                                      AUTOMODEL)}

#: The layout `encode` writes when `--layout` is not given.
DEFAULT_ENCODE_LAYOUT = PREENCODED.name

__all__ = ["CHATML", "DEFAULT_ENCODE_LAYOUT", "GENERIC", "IMAGE_PARTS", "LAYOUTS", "MLPERF",
           "PREENCODED", "RAW", "EncodeSpec", "Layout", "Reading", "by_encoding",
           "encode_default_help", "encode_layouts_help", "encodings", "read_by",
           "registry_function"]


def encodings() -> list[str]:
    """Every layout's encoding, in registry order (what `--encoding` accepts)."""
    return [layout.encoding for layout in LAYOUTS.values()]


def by_encoding(encoding: str) -> Layout | None:
    """The layout whose on-disk `encoding` is `encoding` (as dataset.yaml or the manifest say)."""
    return next((lay for lay in LAYOUTS.values() if lay.encoding == encoding), None)


def encode_layouts_help() -> str:
    """`encode --layout`'s help: every layout `encode` writes, with what it stores."""
    written = [f"{lay.name} ({lay.encode.summary})" for lay in LAYOUTS.values() if lay.encode]
    return ", ".join(written[:-1]) + " or " + written[-1] + "."


def encode_default_help(option: str) -> str:
    """The default each layout `encode` writes gives `option` (`precision`, `latent_mode`), for
    that option's help."""
    return "default, by --layout: " + ", ".join(
        f"{lay.name} {dict(lay.encode.defaults)[option]}" for lay in LAYOUTS.values() if lay.encode)


def read_by(task_encoder: type) -> list[Layout]:
    """The layouts whose reading spec names `task_encoder` (a class): the ones it cooks."""
    return [lay for lay in LAYOUTS.values() if lay.reading.task_encoder is not None
            and registry_function(lay.reading.task_encoder) is task_encoder]
