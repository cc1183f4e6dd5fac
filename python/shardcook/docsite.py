"""The documentation site's address, read from the one place it is declared: pyproject.toml's
`[project.urls] Documentation`, as the installed package's metadata carries it."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, metadata
from pathlib import Path

# A source checkout run without a fresh install (its metadata predates the URL, or is missing)
# reads the declaration itself.
_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
_DECLARED = re.compile(r'^Documentation\s*=\s*"([^"]+)"', re.MULTILINE)


def _base_url() -> str:
    try:
        for entry in metadata("shardcook").get_all("Project-URL") or []:
            label, _, url = str(entry).partition(",")
            if label.strip() == "Documentation":
                return url.strip()
    except PackageNotFoundError:
        pass
    if _PYPROJECT.is_file() and (m := _DECLARED.search(_PYPROJECT.read_text(encoding="utf-8"))):
        return m.group(1)
    raise LookupError("shardcook's Documentation URL is declared neither in its installed "
                      "metadata nor in pyproject.toml")


def docs_url(page: str = "") -> str:
    """The site's address, or of one page (`"ENCODE/"`, `"DATASETS/#finalize"`: docs/ENCODE.md and
    the finalize section of docs/DATASETS.md, as MkDocs publishes them)."""
    return _base_url().rstrip("/") + "/" + page
