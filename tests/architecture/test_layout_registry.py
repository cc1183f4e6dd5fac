"""Every `module:name` the layout registry names imports, and names something of the right kind:
a layout is read from its registry entry alone, so a wrong string would fail only at use."""

from __future__ import annotations

import pytest
from shardcook.layouts import LAYOUTS, Layout, registry_function

#: The Layout fields that name a `module:name`.
SPEC_FIELDS = ("cooker", "checker", "split_checker", "task_encoder", "preview", "part_builder")


def specs() -> list[tuple[str, str, str]]:
    return [(layout.name, field, spec) for layout in LAYOUTS.values() for field in SPEC_FIELDS
            if (spec := getattr(layout, field)) is not None]


@pytest.mark.parametrize(("layout", "field", "spec"), specs())
def test_registry_names_import(layout: str, field: str, spec: str) -> None:
    assert callable(registry_function(spec)), f"{layout}.{field} = {spec!r} is not callable"


def test_every_kind_of_spec_is_covered() -> None:
    assert {field for _, field, _ in specs()} == set(SPEC_FIELDS)


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=lambda lay: lay.name)
def test_encode_declarations_agree(layout: Layout) -> None:
    """A layout `encode` writes says its defaults and modes; a latent picture says its scaling."""
    from shardcook.encoders.loading import LATENT_MODES, PRECISIONS

    if layout.part_builder is None:
        assert not (layout.encode_defaults or layout.latent_modes or layout.encoder_facts)
        return
    defaults = dict(layout.encode_defaults)
    assert set(defaults) == {"precision", "latent_mode"}
    assert defaults["precision"] in PRECISIONS and defaults["latent_mode"] in layout.latent_modes
    assert set(layout.latent_modes) <= set(LATENT_MODES)
    assert layout.latents_scaled is not None and layout.preview is not None
    if set(layout.latent_modes) != set(LATENT_MODES) or layout.stored_dtypes:
        assert layout.encode_refusal, "a layout that refuses modes or dtypes says why"
    for option in layout.task_encoder_options:
        assert option in ("image_format", "resample_latents")


def test_encode_layout_help_is_built_from_the_registry():
    from shardcook.layouts import LAYOUTS, encode_layouts_help

    text = encode_layouts_help()
    for layout in LAYOUTS.values():
        assert (f"{layout.name} (" in text) == (layout.part_builder is not None), layout.name
        assert layout.part_builder is None or layout.summary, layout.name
