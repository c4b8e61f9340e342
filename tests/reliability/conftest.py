"""Shared pieces of the reliability suite: trial counts, figures, skip-or-fail.

Every suite records its figures with :func:`record` (trials, faults injected, rows compared,
mismatches); ``pytest_terminal_summary`` prints them at the end of the run, so a CI log shows
what was actually exercised, not just "passed". ``TWICE_RELIABILITY_TRIALS`` scales the trial
counts (default 1 = the modest CI size; 5 means five times as many random trials).
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict

import pytest

_FIGURES: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
_LOCK = threading.Lock()
COLUMNS = ("trials", "faults", "rows_compared", "mismatches")


def scale() -> int:
    """The trial multiplier from ``TWICE_RELIABILITY_TRIALS`` (>= 1)."""
    text = os.environ.get("TWICE_RELIABILITY_TRIALS", "1")
    try:
        value = int(text)
    except ValueError:
        raise pytest.UsageError(
            f"TWICE_RELIABILITY_TRIALS must be an integer, got {text!r}"
        ) from None
    return max(1, value)


def record(suite: str, **figures: int) -> None:
    """Add figures (trials, faults, rows_compared, mismatches, or any other count) to a suite."""
    with _LOCK:
        for name, value in figures.items():
            _FIGURES[suite][name] += int(value)


def unavailable(reason: str) -> None:
    """Skip locally, fail under CI: a missing component must not pass silently there."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (required when CI is set)")
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FIGURES:
        return
    write = terminalreporter.write_line
    terminalreporter.section("twice reliability figures")
    extra = sorted({k for f in _FIGURES.values() for k in f} - set(COLUMNS))
    header = ["suite", *COLUMNS, *extra]
    rows = [[suite] + [str(f.get(c, 0)) for c in (*COLUMNS, *extra)]
            for suite, f in sorted(_FIGURES.items())]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    total = sum(f.get("mismatches", 0) for f in _FIGURES.values())
    write(f"mismatches = {total} (scale TWICE_RELIABILITY_TRIALS={scale()})")
