"""The hourly pipeline of the year-of-hourly-units benchmark (bench/bench_year.py).

Three hourly tasks with small owned writes (``write="replace"``, a few rows each): ``readings``
and ``prices`` are independent, ``summary`` depends on both and reads their slices. The
destination is chosen by ``$TWICE_BENCH_YEAR_DEST``: ``sqlite`` (default; one SQLite file in
``$TWICE_BENCH_WORKDIR``, the embedded destination) or a PostgreSQL URL (tables in its
``public`` schema).

The seconds spent inside the three task bodies are written, at exit, to
``$TWICE_BENCH_WORKDIR/task-seconds-<pid>``: the task's own time, which the benchmark puts
next to the end-to-end time.
"""

from __future__ import annotations

import atexit
import os
import time
from pathlib import Path

import pyarrow as pa

from twice import Pipeline, Schedule, TaskContext

WORKDIR = Path(os.environ.get("TWICE_BENCH_WORKDIR", ".")).resolve()
DEST = os.environ.get("TWICE_BENCH_YEAR_DEST", "sqlite")


def _spec(table: str) -> str:
    if DEST == "sqlite":
        return f"sqlite:///{WORKDIR / 'year.db'}?partition_column=hour#{table}"
    return f"{DEST}?partition_column=hour#public.{table}"


_spent = [0.0]


@atexit.register
def _write_task_seconds() -> None:
    if _spent[0]:
        (WORKDIR / f"task-seconds-{os.getpid()}").write_text(f"{_spent[0]:.6f}\n")


HOUR = pa.timestamp("us", tz="UTC")
pipeline = Pipeline("bench_year", schedule=Schedule.hourly("UTC"),
                    description="a year of hourly units (issue 38)")


@pipeline.task(destination=_spec("readings"), write="replace", safe_repeat=True,
               timeout=60)
def readings(ctx: TaskContext) -> pa.Table:
    """Four sensor readings for the hour."""
    began = time.perf_counter()
    hour = ctx.interval.start
    table = pa.table({
        "hour": pa.array([hour] * 4, HOUR),
        "sensor": pa.array(["a", "b", "c", "d"], pa.string()),
        "value": pa.array([float(hour.hour + n) for n in range(4)], pa.float64()),
    })
    _spent[0] += time.perf_counter() - began
    return table


@pipeline.task(destination=_spec("prices"), write="replace", safe_repeat=True,
               timeout=60)
def prices(ctx: TaskContext) -> pa.Table:
    """Three prices for the hour."""
    began = time.perf_counter()
    hour = ctx.interval.start
    table = pa.table({
        "hour": pa.array([hour] * 3, HOUR),
        "item": pa.array(["x", "y", "z"], pa.string()),
        "price": pa.array([1.0 + hour.day, 2.0 + hour.hour, 3.0], pa.float64()),
    })
    _spent[0] += time.perf_counter() - began
    return table


@pipeline.task(depends_on=[readings, prices], destination=_spec("summary"), write="replace",
               safe_repeat=True, timeout=60)
def summary(ctx: TaskContext) -> pa.Table:
    """The hour's mean reading and mean price, from both upstream slices."""
    began = time.perf_counter()
    values = ctx.read_upstream("readings").column("value").to_pylist()
    costs = ctx.read_upstream("prices").column("price").to_pylist()
    table = pa.table({
        "hour": pa.array([ctx.interval.start] * 2, HOUR),
        "measure": pa.array(["reading", "price"], pa.string()),
        "mean": pa.array([sum(values) / len(values), sum(costs) / len(costs)], pa.float64()),
    })
    _spent[0] += time.perf_counter() - began
    return table
