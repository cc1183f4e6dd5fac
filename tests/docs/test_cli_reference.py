"""The command-line reference page (docs/CLI.md, written by scripts/cli_reference.py and
committed) names every option and argument of every command, found here by walking the typer app
itself, with its help; and the committed page is what the command line gives now."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import typer
import yaml
from shardcook.cli import app

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cli_reference.py"


def _script():
    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _every_command(group, words=("shardcook",)):
    """(words, click command) of the app and every command under it, walked here, not by the
    hook."""
    yield words, group
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _every_command(command, (*words, name))
        elif not command.hidden:
            yield (*words, name), command


def _sections(page: str) -> dict[str, str]:
    """{heading: its text} of the page's `## ` sections."""
    parts = re.split(r"^## (.+)$", page, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_page_names_every_option_of_every_command():
    sections = _sections(_script().render())
    root = typer.main.get_command(app)
    missing = []
    count = 0
    for words, command in _every_command(root):
        if hasattr(command, "commands") and words != ("shardcook",):
            continue  # a group: its commands are walked
        text = sections.get(" ".join(words))
        if text is None:
            missing.append(" ".join(words))
            continue
        for param in command.params:
            count += 1
            names = [param.name.upper()] if param.param_type_name == "argument" else [
                *param.opts, *param.secondary_opts]
            for name in names:
                if f"`{name}`" not in text:
                    missing.append(f"{' '.join(words)} {name}")
            help_text = " ".join((param.help or "").split()).replace("|", "\\|")
            if help_text not in text:
                missing.append(f"{' '.join(words)} {param.name}: help")
    assert not missing, missing
    assert count > 150  # every run option of raw, encode and chatml, and their aliases


def test_the_options_the_guides_once_missed_are_there():
    sections = _sections(_script().render())
    for command in ("raw", "encode", "chatml"):
        for option in ("--scratch-dir", "--upload-queue"):
            assert f"`{option}`" in sections[f"shardcook {command}"], (command, option)
    assert "`--hf-streaming`" in sections["shardcook raw"]


def test_the_committed_page_is_current():
    """docs/CLI.md is in the checkout, so the guides' links to it work there too; it must be
    what the command line says now."""
    module = _script()
    assert module.PAGE == ROOT / "docs" / "CLI.md"
    assert module.PAGE.read_text(encoding="utf-8") == module.render(), (
        "docs/CLI.md is not the command line's reference any more: run "
        "`python scripts/cli_reference.py` and commit docs/CLI.md")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert "hooks" not in config  # one page, not a second one made when the site is built
