"""docs/ARCHITECTURE.md's Tests section names every test folder, and only folders that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _paragraph() -> str:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    start = text.index("`tests/` has one folder per subsystem:")
    return text[start:text.index("Helper functions are the package", start)]


def test_the_tests_paragraph_names_every_test_folder():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    named = set(re.findall(r"`([a-z_]+)`", _paragraph()))
    assert folders - named == set(), "test folders the paragraph does not name"
    assert named - folders == set(), "names in the paragraph that are no test folder"
