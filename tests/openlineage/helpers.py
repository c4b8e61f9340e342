"""Shared helpers of the OpenLineage tests: the test day, DuckDB tables, a writing task."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow as pa

from twice.core.interval import Interval
from twice.define.pipeline import TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination


def day() -> Interval:
    return Schedule.daily("UTC").interval_for(date(2026, 11, 30))


def table(tmp_path: Path, name: str) -> str:
    return f"duckdb://{tmp_path / (name + '.duckdb')}?partition_column=day#{name}"


def write_rows(ctx: TaskContext, rows: int) -> dict[str, int]:
    when = ctx.interval.start.date()
    data = pa.table({"day": pa.array([when] * rows, pa.date32()),
                     "v": pa.array(list(range(rows)), pa.int64())})
    with open_destination(ctx.destination) as dest:
        dest.replace_partition(data, ctx.interval)
    return {"rejected_rows": 0}
