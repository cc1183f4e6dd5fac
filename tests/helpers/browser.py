"""A report page opened from its file in headless Chromium (Debian's `chromium`, driven by
Playwright's Python package; no browser is downloaded): what it logged, what it asked the network
for, its images, the counts it shows, and a screenshot."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

#: Where CI and Debian put it; PATH is searched too.
CHROMIUM = ("chromium", "chromium-browser")


def chromium() -> str:
    """The system Chromium's path; skips the test when there is none."""
    found = next((p for p in map(shutil.which, CHROMIUM) if p), None)
    if found is None:
        pytest.skip("no chromium on PATH (CI installs Debian's: apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is missing")
    return found


@dataclass
class Opened:
    console_errors: list[str] = field(default_factory=list)
    #: Every request that was not for the file itself or a data: URI (all were refused).
    requests: list[str] = field(default_factory=list)
    #: (alt, naturalWidth) of every <img>.
    images: list[tuple[str, int]] = field(default_factory=list)
    #: data-count name -> the number shown.
    counts: dict[str, int] = field(default_factory=dict)
    #: The text of every sample's caption, and of every conversation turn.
    captions: list[str] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)
    #: The tag of every audio and video player whose source is inline.
    media: list[str] = field(default_factory=list)
    #: Whether a script the dataset smuggled in ran (it would set window.__pwned).
    injected_ran: bool = False
    screenshot: bytes = b""
    #: The latent statistics' rows (channel, mean, std) and warnings, as shown.
    channels: list[str] = field(default_factory=list)
    latent_warnings: list[str] = field(default_factory=list)
    #: The texts of the first card's parts after clicking it.
    clicked_parts: list[str] = field(default_factory=list)


def open_report(page_file: Path, screenshot: Path | None = None, *,
                full_page: bool = False) -> Opened:
    """Opens `page_file` in headless Chromium, every non-file, non-data request refused; with
    `full_page` the screenshot shows the whole page, not its first screen."""
    return open_reports([(page_file, screenshot)], full_page=full_page)[0]


def open_reports(pages: Sequence[tuple[Path, Path | None]], *,
                 full_page: bool = False) -> list[Opened]:
    """`open_report` of each (page file, screenshot) in one browser, each in a new tab."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(),
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            return [_read(browser.new_page(viewport={"width": 1200, "height": 900}), page_file,
                          screenshot, full_page) for page_file, screenshot in pages]
        finally:
            browser.close()


def _read(page: Page, page_file: Path, screenshot: Path | None, full_page: bool) -> Opened:
    got = Opened()
    url = page_file.resolve().as_uri()
    page.on("console", lambda m: got.console_errors.append(m.text)
            if m.type == "error" else None)
    page.on("pageerror", lambda e: got.console_errors.append(str(e)))

    def route(r):
        if r.request.url == url or r.request.url.startswith("data:"):
            r.continue_()
        else:
            got.requests.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(url, wait_until="load")
    got.images = [tuple(x) for x in page.eval_on_selector_all(
        "img", "els => els.map(e => [e.alt, e.complete ? e.naturalWidth : 0])")]
    got.counts = {k: int(v.replace(",", "")) for k, v in page.eval_on_selector_all(
        "[data-count]", "els => els.map(e => [e.dataset.count, e.textContent])")}
    got.captions = page.locator(".caption").all_text_contents()
    got.turns = page.locator(".card summary .turn").all_text_contents()
    got.media = page.eval_on_selector_all(
        "audio, video", "els => els.filter(e => e.src.startsWith('data:'))"
        ".map(e => e.tagName.toLowerCase())")
    got.channels = page.locator("table:has(th:text-is('channel')) tr:has(td)").all_inner_texts()
    got.latent_warnings = page.locator("[data-warning=latents]").all_inner_texts()
    got.injected_ran = bool(page.evaluate("() => window.__pwned === true"))
    got.screenshot = page.screenshot(full_page=full_page, path=screenshot)
    cards = page.locator("details.card > summary")
    if cards.count():
        cards.first.click()
        got.clicked_parts = page.locator(
            "details.card[open] .parts td:first-child").all_inner_texts()
    return got


def blank(png: bytes) -> bool:
    """True when the screenshot is one colour."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as img:
        return len(img.convert("RGB").getcolors(maxcolors=2) or [0, 0]) < 2
