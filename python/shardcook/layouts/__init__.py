"""The one home of the on-disk format: names (`names`), what a layout is (`base.Layout`) and the
registry of layouts. A new layout is one module beside this file plus one line in `LAYOUTS`."""

from __future__ import annotations

from shardcook.errors import ConfigError
from shardcook.layouts.base import Layout, registry_function
from shardcook.layouts.bridge_flux import BRIDGE_FLUX
from shardcook.layouts.chatml import CHATML
from shardcook.layouts.generic import GENERIC
from shardcook.layouts.mlperf import MLPERF
from shardcook.layouts.preencoded import PREENCODED
from shardcook.layouts.raw import IMAGE_PARTS, RAW

#: Every layout, by registry name.
LAYOUTS: dict[str, Layout] = {
    layout.name: layout for layout in (PREENCODED, RAW, CHATML, BRIDGE_FLUX, MLPERF, GENERIC)}

__all__ = ["CHATML", "GENERIC", "IMAGE_PARTS", "LAYOUTS", "MLPERF", "PREENCODED", "RAW", "Layout",
           "by_encoding", "encode_layouts_help", "encodings", "get_layout", "registry_function"]


def get_layout(name: str) -> Layout:
    """The layout called `name`, or one sentence listing the known ones."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ConfigError(
            f"unknown layout {name!r}; use one of {', '.join(sorted(LAYOUTS))}"
        ) from None


def encodings() -> list[str]:
    """Every layout's encoding, in registry order (what `--encoding` accepts)."""
    return [layout.encoding for layout in LAYOUTS.values()]


def by_encoding(encoding: str) -> Layout | None:
    """The layout whose on-disk `encoding` is `encoding` (as dataset.yaml or the manifest say)."""
    return next((lay for lay in LAYOUTS.values() if lay.encoding == encoding), None)


def encode_layouts_help() -> str:
    """`encode --layout`'s help: every layout `encode` writes, with what it stores."""
    written = [f"{lay.name} ({lay.summary})" for lay in LAYOUTS.values() if lay.part_builder]
    return ", ".join(written[:-1]) + " or " + written[-1] + "."
