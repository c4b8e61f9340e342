"""Headless Chromium for the report tests: render the page, dump its DOM, take a screenshot.

Chromium is driven directly (no Selenium/Playwright): ``--dump-dom`` prints the DOM after the page
rendered, ``--screenshot`` writes a PNG. Network features are switched off so the run also shows
the page needs nothing from the network. Missing Chromium skips the test, or fails it under CI.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
)
TIMEOUT_SECONDS = 60


def chromium() -> str:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("Chromium is not installed (apt-get install -y chromium chromium-driver)")
    pytest.skip("Chromium is not installed")


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    command = [chromium(), *FLAGS, f"--user-data-dir={profile}", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS,
                            check=False)
    assert result.returncode == 0, f"chromium failed ({result.returncode}): {result.stderr}"
    return result


def dump_dom(page: Path, profile: Path) -> str:
    """The DOM Chromium built from ``page``, serialised."""
    return _run(["--dump-dom", page.resolve().as_uri()], profile).stdout


def screenshot(page: Path, png: Path, profile: Path, size: tuple[int, int] = (1400, 1000)) -> None:
    _run([f"--screenshot={png}", f"--window-size={size[0]},{size[1]}",
          page.resolve().as_uri()], profile)


def png_size(png: Path) -> tuple[int, int]:
    """Width and height from the PNG header (and proof that it is a PNG)."""
    data = png.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height
