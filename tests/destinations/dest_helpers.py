"""Helpers shared by the destination tests (importable as ``dest_helpers``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from twice.core.interval import Interval


def day_interval(day: date, days: int = 1) -> Interval:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return Interval(start, start + timedelta(days=days))


def sorted_rows(rows: Any) -> list[dict[str, Any]]:
    """Rows of an Arrow table (or a list of dicts) in a canonical order, for comparisons."""
    rows = rows if isinstance(rows, list) else rows.to_pylist()
    return sorted(rows, key=lambda r: repr(sorted(r.items())))
