"""`shardcook --help` as a newcomer reads it: commands grouped as a user meets them, each summary
a whole sentence, and links to the documentation site rather than to files of the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from shardcook.docsite import docs_url

PANELS = {
    "Try it": ["demo"],
    "Make data": ["encode", "raw", "chatml", "ingest"],
    "Finish and check": ["finalize", "validate", "info", "preview", "blend"],
    "Primus's names": ["diffusion-encoded", "diffusion-raw", "diffusion-ingest", "data"],
}
# A repository path a pip user does not have: docs/…, a markdown file, a section sign.
REPO_PATH = re.compile(r"docs/[A-Z]|\b[A-Z]+\.md\b|§")


def help_text(*command: str) -> str:
    # Wide enough that rich wraps no summary: every line break left is the help's own.
    env = {**os.environ, "COLUMNS": "400", "TERM": "dumb", "NO_COLOR": "1"}
    run = subprocess.run([sys.executable, "-m", "shardcook", *command, "--help"], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return run.stdout


def panels(text: str) -> dict[str, list[str]]:
    """Panel title to the rows' first words, in order, from rich's boxes."""
    found: dict[str, list[str]] = {}
    rows: list[str] | None = None
    for line in text.splitlines():
        if m := re.match(r"╭─ (.+?) ─", line):
            rows = found.setdefault(m.group(1), [])
        elif line.startswith("╰"):
            rows = None
        elif rows is not None:
            rows.append(line.strip("│ ").split(" ")[0])
    return found


def test_commands_are_grouped_as_a_user_meets_them():
    found = panels(help_text())
    assert list(found) == ["Options", *PANELS]
    for title, commands in PANELS.items():
        # One row per command: a summary that wrapped onto a second row would add a row.
        assert found[title] == commands, (title, found[title])


def test_help_links_the_site_and_cites_no_repository_path():
    root = help_text()
    assert docs_url() in root
    for commands in PANELS.values():
        for command in commands:
            text = help_text(command)
            assert not REPO_PATH.search(text), (command, REPO_PATH.search(text))
            assert f"Guide: {docs_url()}" in text, command
    assert REPO_PATH.search("shards (docs/FORMAT.md §3, preencoded)")  # what encode used to cite
