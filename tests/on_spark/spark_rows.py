"""Rows and helpers shared by the Spark tests."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa

from twice.core.interval import Interval

D1, D2, D3 = date(2026, 11, 29), date(2026, 11, 30), date(2026, 12, 1)
SCHEMA = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("name", pa.string())])


def days(first: date, count: int) -> Interval:
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    return Interval(start, start + timedelta(days=count))


def rows(day: date, ids: range | list[int], tag: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.Table.from_pylist(
        [{"day": day, "id": i, "name": f"{tag}{i}"} for i in ids], schema=SCHEMA
    )


def concat(*tables: pa.Table) -> pa.Table:
    return pa.concat_tables(tables)


def canonical(table: pa.Table) -> list[dict[str, Any]]:
    """Rows in a canonical order, for comparisons."""
    return sorted(table.to_pylist(), key=lambda r: repr(sorted(r.items())))
