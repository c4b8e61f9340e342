"""The report's opening, rendered by headless Chromium over a REAL faulted run's ledger.

The page must open with the needs-attention summary (``#needs-attention``: headline, counts,
the units that need a person) and the per-interval grid (``#interval-grid``), before the unit
cards. Chromium's dumped DOM shows what a browser actually built; the screenshot shows it
renders to a real picture. Set ``TWICE_REPORT_ARTIFACTS`` to a folder to keep both.
"""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from tests.reports.browser import dump_dom, png_size, screenshot
from tests.reports.dom import Element, parse
from tests.reports.faulted import EXPECTED, FaultedRun, run_faulted

from twice.reports import load_evidence, render_html

MIN_PNG_BYTES = 30_000  # a blank 1400x1000 page is about 6 KB


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> FaultedRun:
    return run_faulted(tmp_path_factory.mktemp("faulted-browser") / "run")


@pytest.fixture(scope="module")
def page(faulted: FaultedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("health-page") / "health-report.html"
    path.write_text(render_html(load_evidence(faulted.url, as_of=faulted.as_of)),
                    encoding="utf-8")
    return path


def _position(dom: Element, element: Element) -> int:
    return next(i for i, e in enumerate(dom.iter()) if e is element)


def test_chromium_builds_summary_then_grid_then_cards(page: Path, faulted: FaultedRun,
                                                      tmp_path: Path) -> None:
    dom = parse(dump_dom(page, tmp_path / "profile"))
    summary = dom.one("section", id="needs-attention")
    grid_section = dom.one("section", id="grid")
    cards = dom.one("section", id="timelines")
    assert _position(dom, summary) < _position(dom, grid_section) < _position(dom, cards)
    assert _position(dom, summary) < _position(dom, dom.one("table", id="units-table"))
    headline = summary.one("p", id="headline")
    assert headline.all_text().startswith("needs attention: 1 unknown, 1 held, 2 refused")
    assert "attention" in headline.classes
    cards_counts = {c.attrs["data-state"]: c.one("b").all_text()
                    for c in summary.one("div", id="summary").find_all("div", "card")}
    assert cards_counts == {"unknown": "1", "held": "1", "refused": "2", "failed": "3",
                            "unverified": "1", "blocked": "2", "waiting": "1", "asserted": "1",
                            "verified": "2"}
    items = summary.one("ul", id="attention-list").find_all("li", "attention-item")
    assert len(items) == 10 and items[0].attrs["data-health"] == "unknown"
    grid = grid_section.one("table", id="interval-grid")
    cells = grid.find_all("td", "cell")
    assert len(grid.find_all("tr", "grid-row")) == 2 and len(cells) == len(EXPECTED) == 14
    assert {c.attrs["data-uow"]: c.attrs["data-health"] for c in cells} == faulted.expected()
    articles = {a.attrs["id"] for a in cards.find_all("article", "unit")}
    assert {c.one("a").attrs["href"][1:] for c in cells} == articles
    assert grid_section.one("ul", id="health-legend")


def _distinct_colours(png: Path, rows: int = 40) -> int:
    """Distinct RGB colours in the first ``rows`` scanlines below the top (8-bit RGB/RGBA PNG,
    filters undone): a blank or unstyled page has very few."""
    data = png.read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    bit_depth, colour_type = data[24], data[25]
    assert bit_depth == 8 and colour_type in (2, 6), (bit_depth, colour_type)
    channels = 3 if colour_type == 2 else 4
    chunks, offset = [], 8
    while offset < len(data):
        length = struct.unpack(">I", data[offset:offset + 4])[0]
        kind = data[offset + 4:offset + 8]
        if kind == b"IDAT":
            chunks.append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    previous = bytearray(stride)
    colours: set[bytes] = set()
    for row in range(min(height, 400)):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + pred) & 0xFF
        previous = line
        if row >= 400 - rows:
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, channels))
    return len(colours)


def test_screenshot_shows_the_summary_and_grid(page: Path, tmp_path: Path) -> None:
    png = tmp_path / "health-report.png"
    screenshot(page, png, tmp_path / "profile", size=(1400, 1000))
    assert png_size(png) == (1400, 1000)
    assert png.stat().st_size > MIN_PNG_BYTES
    # The first screen holds the coloured headline, cards, attention list and grid: many
    # colours, not a blank or unstyled page.
    assert _distinct_colours(png) > 40
    keep = os.environ.get("TWICE_REPORT_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(png, Path(keep) / png.name)
        shutil.copy(page, Path(keep) / page.name)
