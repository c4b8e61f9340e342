"""A tiny hourly pipeline for the planning benchmark (bench/bench_planning.py).

One task writing one row per UTC hour into a DuckDB table (``$TWICE_BENCH_WORKDIR``, default
the current directory). The benchmark only plans it (``twice backfill ... --dry-run``): nothing
is ever written, so the task body is never run there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from twice import Pipeline, Schedule, TaskContext

WORKDIR = Path(os.environ.get("TWICE_BENCH_WORKDIR", ".")).resolve()
HOURLY = f"duckdb://{WORKDIR / 'hourly.duckdb'}?partition_column=hour#readings"

pipeline = Pipeline("bench_hourly", schedule=Schedule.hourly("UTC"),
                    description="one row per hour (planning benchmark)")


@pipeline.task(destination=HOURLY, write="replace", safe_repeat=True)
def readings(ctx: TaskContext) -> pa.Table:
    """The hour's one reading."""
    return pa.table({
        "hour": pa.array([ctx.interval.start], pa.timestamp("us", tz="UTC")),
        "value": pa.array([ctx.interval.start.hour], pa.int64()),
    })
