"""Writes the command-line reference, docs/CLI.md, from the typer app: every command, every
option with its help and default, so the documentation cannot miss an option. The page is
committed, so its links work in a checkout as on the site; `python scripts/cli_reference.py`
rewrites it after a command or option changes, and tests/docs fails while it is not current.
`render()` is the page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The page, listed in mkdocs.yml's nav.
PAGE = Path(__file__).resolve().parents[1] / "docs" / "CLI.md"


def commands(group: Any, words: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    """(`shardcook WORDS`, command) of every command under the click group `group` (typer's
    own copy of click), in --help's order, groups walked into."""
    found = []
    for name, command in group.commands.items():
        if command.hidden:
            continue
        if hasattr(command, "commands"):
            found += commands(command, (*words, name))
        else:
            found.append((" ".join(("shardcook", *words, name)), command))
    return found


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _spelled(param: Any) -> str:
    if param.param_type_name == "argument":
        return f"`{param.name.upper()}`"
    return ", ".join(f"`{flag}`" for flag in (*param.opts, *param.secondary_opts))


def _default(param: Any) -> str:
    default = param.default
    if default is None or param.param_type_name == "argument" or (
            param.is_flag and not param.secondary_opts):
        return ""
    if isinstance(default, (list, tuple)):
        default = ",".join(map(str, default))
    return f"`{default}`"


def _summary(command: Any) -> str:
    """The command's help without the guide's address (the site links the guides)."""
    paragraphs = (command.help or "").split("\n\n")
    return "\n\n".join(p for p in paragraphs if not p.startswith("Guide: "))


def render() -> str:
    """The markdown of the reference page."""
    import typer
    from shardcook.cli import app

    root = typer.main.get_command(app)
    lines = ["# Command-line reference", "",
             "Every command and option, as `shardcook COMMAND --help` shows them; generated from "
             "the command line itself (`python scripts/cli_reference.py`). An option of `raw`, "
             "`encode` and "
             "`chatml` is also a key of a `--config` file: the option's name with `_` for `-`, "
             "in its section ([Runs](RUNS.md#config-files)).", "",
             "## shardcook", "", "| option | what it does | default |", "|---|---|---|"]
    lines += [f"| {_spelled(p)} | {_cell(p.help or '')} | {_default(p)} |" for p in root.params]
    for words, command in commands(root):
        lines += ["", f"## {words}", "", _summary(command), "",
                  "| option | what it does | default |", "|---|---|---|"]
        lines += [f"| {_spelled(p)} | {_cell(getattr(p, 'help', None) or '')} | {_default(p)} |"
                  for p in command.params]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
