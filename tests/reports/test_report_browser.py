"""The report page rendered by headless Chromium: the DOM it builds and a screenshot.

A static parse can pass on a page no browser would render (an unclosed SVG, a stray quote); the
dumped DOM shows what Chromium actually built. Set ``TWICE_REPORT_ARTIFACTS`` to a folder to keep
the screenshot for a look.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tests.reports.browser import dump_dom, png_size, screenshot
from tests.reports.dom import parse
from tests.reports.story import StoryLedger

from twice.reports import Evidence, render_html
from twice.reports.timeline_svg import slug

MIN_PNG_BYTES = 30_000  # a blank 1400x1000 page is about 6 KB


@pytest.fixture(scope="module")
def rendered(evidence: Evidence, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    page = folder / "report.html"
    page.write_text(render_html(evidence), encoding="utf-8")
    return page


def test_chromium_renders_units_bars_and_deadline(rendered: Path, evidence: Evidence,
                                                  story: StoryLedger, tmp_path: Path) -> None:
    dom = parse(dump_dom(rendered, tmp_path / "profile"))
    rows = dom.one("table", id="units-table").find_all("tr", "unit-row")
    assert {row.attrs["data-uow"] for row in rows} == set(story.uow.values())
    bars = dom.find_all("rect", "attempt-bar")
    assert len(bars) == sum(len(unit.attempts) for unit in evidence.units) == 11
    assert len(dom.find_all("line", "deadline-line")) == len(evidence.units)
    archive = dom.one("svg", id=f"timeline-{slug(story.uow['archive'])}")
    assert len(archive.find_all("rect", "not-started-bar")) == 1
    assert dom.find_all("g", "backoff-gap")


def test_screenshot_is_a_real_picture(rendered: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    screenshot(rendered, png, tmp_path / "profile")
    assert png_size(png) == (1400, 1000)
    assert png.stat().st_size > MIN_PNG_BYTES
    keep = os.environ.get("TWICE_REPORT_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(png, Path(keep) / png.name)
        shutil.copy(rendered, Path(keep) / rendered.name)
