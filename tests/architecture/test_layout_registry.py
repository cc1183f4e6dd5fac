"""Every `module:name` the layout registry names imports, and names something of the right kind:
a layout is read from its registry entry alone, so a wrong string would fail only at use. The
name -> encoding table of docs/FORMAT.md is the registry's."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
from shardcook.layouts import LAYOUTS, EncodeSpec, Layout, Reading, registry_function
from shardcook.layouts.base import NOT_COOKED

#: The reading spec's and the encode spec's fields that name a `module:name`.
SPEC_FIELDS = {Reading: ("cooker", "checker", "split_checker", "agreement", "timesteps",
                         "task_encoder", "preview"),
               EncodeSpec: ("part_builder", "job")}
FORMAT_MD = Path(__file__).parents[2] / "docs" / "FORMAT.md"


def specs() -> list[tuple[str, str, str]]:
    found = []
    for layout in LAYOUTS.values():
        for spec in (layout.reading, layout.encode):
            for name in SPEC_FIELDS[type(spec)] if spec is not None else ():
                if (value := getattr(spec, name)) is not None:
                    found.append((layout.name, name, value))
    return found


@pytest.mark.parametrize(("layout", "field", "spec"), specs())
def test_registry_names_import(layout: str, field: str, spec: str) -> None:
    assert callable(registry_function(spec)), f"{layout}.{field} = {spec!r} is not callable"


def test_every_kind_of_spec_is_covered() -> None:
    named = {name for names in SPEC_FIELDS.values() for name in names}
    assert {field for _, field, _ in specs()} == named
    for cls, names in SPEC_FIELDS.items():  # a new module:name field is added here too
        strings = {f.name for f in fields(cls) if f.type in ("str | None", "str")}
        assert strings - {"summary", "refusal", "model"} == set(names), cls.__name__


@pytest.mark.parametrize("layout", [lay for lay in LAYOUTS.values() if lay.encode],
                         ids=lambda lay: lay.name)
def test_every_encoded_layout_names_a_registered_model(layout: Layout) -> None:
    """`EncodeSpec.model` is a key of the model registry, whose `module:name`s import."""
    from shardcook.encoders.models import MODELS

    assert layout.encode is not None
    model = MODELS[layout.encode.model]
    for what in ("encoders", "manifest", "normalisation"):
        assert callable(model.function(what)), (model.name, what)


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=lambda lay: lay.name)
def test_reading_declarations_agree(layout: Layout) -> None:
    """A layout a task encoder reads has a cooker; a cooker's options are its task encoder's."""
    reading = layout.reading
    assert (reading.cooker is None) == (reading.task_encoder is None), layout.name
    assert set(reading.cooker_options) <= set(reading.task_encoder_options), layout.name
    for option in reading.task_encoder_options:
        assert option in ("image_format", "resample_latents")
    assert not (reading.cooker and not layout.subflavored), "a cooker is picked by subflavor"


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=lambda lay: lay.name)
def test_encode_declarations_agree(layout: Layout) -> None:
    """A layout `encode` writes says its defaults and modes; a latent picture says its scaling."""
    from shardcook.encoders.loading import LATENT_MODES, PRECISIONS

    spec = layout.encode
    if spec is None:
        return
    defaults = dict(spec.defaults)
    assert set(defaults) == {"precision", "latent_mode"}
    assert defaults["precision"] in PRECISIONS and defaults["latent_mode"] in spec.latent_modes
    assert set(spec.latent_modes) <= set(LATENT_MODES)
    # a layout whose shards no trainer reads through Energon (AutoModel's cache) has no picture
    assert (layout.reading.preview is not None or layout.reading is NOT_COOKED) and spec.summary
    if set(spec.latent_modes) != set(LATENT_MODES) or spec.stored_dtypes:
        assert spec.refusal, "a layout that refuses modes or dtypes says why"


def test_encode_layout_help_is_built_from_the_registry():
    from shardcook.layouts import encode_layouts_help

    text = encode_layouts_help()
    for layout in LAYOUTS.values():
        assert (f"{layout.name} (" in text) == (layout.encode is not None), layout.name


@pytest.mark.parametrize("option", ["precision", "latent_mode"])
def test_encode_defaults_in_help_come_from_the_registry(option):
    from shardcook.config.sections import ModelConfig
    from shardcook.layouts import encode_default_help

    help_text = next(f for f in fields(ModelConfig) if f.name == option).metadata["cli"].help
    assert encode_default_help(option) in help_text()
    for layout in LAYOUTS.values():
        if layout.encode is not None:
            default = dict(layout.encode.defaults)[option]
            assert f"{layout.name} {default}" in encode_default_help(option)


def test_format_md_maps_names_to_encodings_as_the_registry_does():
    """docs/FORMAT.md §3's table is the one documented mapping of `--layout` names to on-disk
    encodings, with the task encoder each is read by."""
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| [^|]+ \| ([^|]+) \|$",
                      FORMAT_MD.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert {name: encoding for name, encoding, _ in rows} == {
        layout.name: layout.encoding for layout in LAYOUTS.values()}
    for name, _, reader in rows:
        spec = LAYOUTS[name].reading.task_encoder
        named = re.findall(r"`(\w+)`", reader)
        assert named == ([spec.rpartition(":")[2]] if spec else []), name
