"""The README is a short front door whose every link lands, and the guides in docs/ are all
reachable from its map. (scripts/test builds the docs/ site with `mkdocs build --strict`, which
checks the links between the pages.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def _prose(path: Path) -> list[str]:
    """The lines of a markdown file outside fenced code blocks."""
    lines, in_code = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_code = not in_code
        elif not in_code:
            lines.append(line)
    return lines


def _anchors(path: Path) -> set[str]:
    """The ids MkDocs gives the headings of a page (python-markdown's toc slugs)."""
    anchors = set()
    for line in _prose(path):
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*$", line):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).replace("`", "")
            anchors.add(slugify(text, "-"))
    return anchors


def _relative_links(path: Path) -> list[str]:
    return [target for line in _prose(path) for target in LINK.findall(line)
            if not re.match(r"[a-z]+:", target)]


def test_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize("readme", [README, ROOT / "benches" / "README.md"],
                         ids=lambda p: p.parent.name)
def test_every_readme_link_and_anchor_resolves(readme: Path):
    broken = []
    for target in _relative_links(readme):
        file, _, anchor = target.partition("#")
        page = (readme.parent / file) if file else readme
        if not page.is_file():
            broken.append(f"{target}: no file {file}")
        elif anchor and anchor not in _anchors(page):
            broken.append(f"{target}: {page.name} has no heading #{anchor}")
    assert not broken, broken


def test_readme_map_reaches_every_guide():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _relative_links(README)}
    unreached = [p.name for p in sorted(DOCS.glob("*.md"))
                 if p.name != "index.md" and p.resolve() not in linked]
    assert not unreached, f"docs pages not linked from README.md: {unreached}"


def test_the_home_page_reaches_every_guide():
    home = DOCS / "index.md"
    linked = {(DOCS / t.partition("#")[0]).resolve() for t in _relative_links(home)}
    unreached = [p.name for p in sorted(DOCS.glob("*.md"))
                 if p != home and p.resolve() not in linked]
    assert not unreached, f"docs pages not linked from docs/index.md: {unreached}"


def test_site_nav_lists_every_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(nav: object) -> set[str]:
        if isinstance(nav, str):
            return {nav}
        items = nav.values() if isinstance(nav, dict) else nav
        return set().union(*(pages(item) for item in items)) if items else set()

    assert pages(config["nav"]) == {p.name for p in DOCS.glob("*.md")}


def test_docs_url_is_declared_once():
    """mkdocs.yml's site_url is the package's Documentation URL (pyproject.toml), not a second
    one."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["site_url"] == project["urls"]["Documentation"]


def test_measurements_are_stated_without_goals():
    """PERFORMANCE.md and the benches say what was measured and how it compares, not what some
    goal wanted."""
    files = [DOCS / "PERFORMANCE.md", *(ROOT / "benches").glob("*.py")]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bgoals?\b", line, re.IGNORECASE)]
    assert not found, found


def test_no_work_log_sentences():
    """The docs state facts; they do not narrate how a session went."""
    phrases = ("lent to this task", "the issue asks", "this session", "on this machine (load",
               "issue", "none was lent")
    files = [README, *DOCS.glob("*.md"), *(ROOT / "benches").glob("*.py")]
    found = [f"{p.relative_to(ROOT)}: {phrase!r}" for p in files
             for phrase in phrases if phrase in p.read_text(encoding="utf-8").lower()]
    assert not found, found
