"""Each run option is declared once, in its config field's metadata (`config.sections.option`):
the options of raw, encode, chatml, ingest and their Primus aliases are made from those fields
(same help, panel and default), no help text of a field is written again anywhere else in the
package, and --help shows each field's help in its panel in every command that takes it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import typer
from shardcook.cli import app
from shardcook.cli.pipelines import CHATML_OPTIONS, ENCODE_OPTIONS, RAW_OPTIONS
from shardcook.config import PRIMUS_FLAGS
from shardcook.config.ingest import INGEST_OPTIONS
from shardcook.config.sections import _SECTION_CLASSES, OPTION_SECTION
from shardcook.dataset.arguments import BlendOptions, DatasetOptions
from shardcook.fields import CLI, CliOption

from tests.helpers.helptext import help_text, panels

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "shardcook"
#: The config fields each run command takes, by the command's function name.
FIELDS = {"raw": RAW_OPTIONS, "encode": ENCODE_OPTIONS, "chatml": CHATML_OPTIONS,
          "ingest": INGEST_OPTIONS}
#: The run commands as typed (Primus's names too) -> their function.
COMMANDS = {("raw",): "raw", ("encode",): "encode", ("chatml",): "chatml",
            ("ingest",): "ingest", ("diffusion-raw",): "raw", ("diffusion-encoded",): "encode",
            ("diffusion-ingest",): "ingest", ("data", "diffusion-raw"): "raw",
            ("data", "diffusion-encoded"): "encode", ("data", "diffusion-ingest"): "ingest"}
#: The only options of a run command that are not config fields.
NOT_FIELDS = {"raw": {"config", "print_config", "center_crop", "variable_size", "train_split",
                      "compress"},
              "chatml": {"config", "print_config", "input"},
              "ingest": {"config", "inputs", "old_split"}}
NOT_FIELDS["encode"] = NOT_FIELDS["raw"] | {"vae_latent_mode"}


def cli_fields() -> dict[str, CliOption]:
    """Every config field that is a command-line option, by its option name (dotted where the
    name is another section's first: `chatml.max_pixels`)."""
    found = {}
    for section, cls in _SECTION_CLASSES.items():
        for f in dataclasses.fields(cls):
            if CLI in f.metadata:
                name = f.name if OPTION_SECTION[f.name] == section else f"{section}.{f.name}"
                found[name] = f.metadata[CLI]
    return found


def click_command(*words: str):
    command = typer.main.get_command(app)
    for word in words:
        command = command.commands[word]
    return command


def default_of(name: str):
    section, _, key = name.rpartition(".")
    cls = _SECTION_CLASSES[section or OPTION_SECTION[key]]
    value = getattr(cls(), key)
    return ",".join(f"{v:g}" for v in value) if key == "split" else value


def test_run_options_are_made_from_the_config_fields():
    fields = cli_fields()
    assert NOT_FIELDS["encode"] - {"config", "print_config"} == set(PRIMUS_FLAGS)
    for words, command in COMMANDS.items():
        listed = {name.rpartition(".")[2]: name for name in FIELDS[command]}
        params = click_command(*words).params
        assert {p.name for p in params} == set(listed) | NOT_FIELDS[command], words
        for p in params:
            if p.name in NOT_FIELDS[command]:
                continue
            name = listed[p.name]
            meta = fields[name]
            assert p.help == meta.help_in(command), (words, name)
            assert p.rich_help_panel == meta.panel, (words, name)
            assert p.default == default_of(name), (words, name)
            if meta.flags:
                spelled = [s for flag in meta.flags for s in flag.split("/")]
                assert [*p.opts, *p.secondary_opts] == spelled, (words, name)
    # every field declared an option is one, in some command
    assert set(fields) == {name for names in FIELDS.values() for name in names}
    # what the commands word differently is each a command's own
    assert fields["image_size"].help_in("encode") != fields["image_size"].help_in("raw")
    assert fields["shard_size"].help_in("chatml") != fields["shard_size"].help_in("raw")


@pytest.mark.parametrize("command", ["finalize", "validate", "info", "preview", "blend"])
def test_dataset_command_options_are_made_from_their_declarations(command):
    cls = BlendOptions if command == "blend" else DatasetOptions
    declared = {f.name: f.metadata[CLI] for f in dataclasses.fields(cls) if CLI in f.metadata}
    options = [p for p in click_command(command).params if p.param_type_name == "option"]
    assert options
    for p in options:
        if p.name == "old_split":  # blend's --split, the old spelling of --split-part
            continue
        meta = declared.get(p.name) or cli_fields()[p.name]  # preview's --hf-token-file
        assert p.help == meta.help_in(command), (command, p.name)
        if meta.flags:
            assert [*p.opts, *p.secondary_opts] == [
                s for flag in meta.flags for s in flag.split("/")], (command, p.name)


def test_the_two_scratch_dirs_say_which_folder_they_are():
    run = cli_fields()["scratch_dir"].help_in("raw")
    (dataset,) = [f.metadata[CLI].help_in("validate") for f in dataclasses.fields(DatasetOptions)
                  if f.name == "scratch_dir"]
    assert "this run stages its shards until they are uploaded" in run
    assert "the command makes its view of the dataset" in dataset


def test_preview_hf_token_file_is_the_config_field():
    (option,) = [p for p in click_command("preview").params if p.name == "hf_token_file"]
    assert option.help == cli_fields()["hf_token_file"].help_in("preview")


def test_no_option_help_is_written_outside_the_config_fields():
    """Each help text of a field (and each command's wording of it) is a string in
    config/sections.py only: a copy beside a typer.Option would be a second declaration."""
    texts = {text for meta in cli_fields().values()
             for text in (meta.help, *meta.help_for.values()) if isinstance(text, str)}
    copies = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "config" / "sections.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Constant) and node.value in texts):
                continue
            copies.append((path.relative_to(PACKAGE), node.value, node.lineno))
    assert not copies


@pytest.mark.parametrize("command", FIELDS)
def test_help_shows_each_fields_help_in_its_panel(command):
    # each panel's text whole again (a help wrapped onto more rows too)
    shown = {title: " ".join(" ".join(rows).split())
             for title, rows in panels(help_text(command)).items()}
    fields = cli_fields()
    for name in FIELDS[command]:
        meta = fields[name]
        assert " ".join(meta.help_in(command).split()) in shown[meta.panel], (command, name)
