"""Helpers shared by the destination tests (importable as ``dest_helpers``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from twice.interval import Interval


def day_interval(day: date, days: int = 1) -> Interval:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return Interval(start, start + timedelta(days=days))


def sorted_rows(table: Any) -> list[dict[str, Any]]:
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: repr(sorted(r.items())))
