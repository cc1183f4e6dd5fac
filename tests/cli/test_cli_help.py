"""`shardcook --help` as a newcomer reads it: commands grouped as a user meets them, each summary
a whole sentence, and links to the documentation site rather than to files of the repository."""

from __future__ import annotations

import re

from shardcook.docsite import docs_url

from tests.helpers.helptext import help_text, panels

PANELS = {
    "Try it": ["demo"],
    "Make data": ["encode", "raw", "chatml", "ingest", "status"],
    "Finish and check": ["finalize", "prepare-media", "validate", "info", "preview", "report",
                         "blend"],
    "Primus's names": ["diffusion-encoded", "diffusion-raw", "diffusion-ingest", "data"],
}
# A repository path a pip user does not have: docs/…, a markdown file, a section sign.
REPO_PATH = re.compile(r"docs/[A-Z]|\b[A-Z]+\.md\b|§")


def first_words(text: str) -> dict[str, list[str]]:
    """Panel title to the rows' first words, in order."""
    return {title: [row.split(" ")[0] for row in rows] for title, rows in panels(text).items()}


def test_commands_are_grouped_as_a_user_meets_them():
    found = first_words(help_text())
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
