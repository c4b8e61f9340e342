"""first_pipeline: one CSV of orders per day -> DuckDB, every day's partition replaced.

The pipeline built step by step in docs/guides/first-pipeline.md.

- ``orders`` reads ONLY its interval's file, ``data/orders-YYYY-MM-DD.csv``, and returns the
  rows; twice replaces that day's partition of the ``orders`` table (one transaction, with a
  commit record and a fingerprint).
- ``revenue`` reads the same day's partition of ``orders`` back and returns one row per
  customer; twice replaces that day's partition of ``revenue``.

The warehouse lives in ``$FIRST_PIPELINE_WORKDIR/warehouse.duckdb`` (default
``./first-pipeline-work``, relative to the directory you run twice from). Set
``FIRST_PIPELINE_FLAKY=1`` to make the first read of each file fail once with a transient
error, to watch the retry policy at work.
"""

from __future__ import annotations

import csv
import hashlib
import os
from datetime import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from twice import Interval, Pipeline, RetryPolicy, Schedule, TaskContext

DATA = Path(__file__).resolve().parent / "data"  # the input: one CSV per day
WORKDIR = Path(os.environ.get("FIRST_PIPELINE_WORKDIR", "first-pipeline-work")).resolve()
WORKDIR.mkdir(parents=True, exist_ok=True)
WAREHOUSE = WORKDIR / "warehouse.duckdb"
ORDERS = f"duckdb://{WAREHOUSE}?partition_column=day#orders"
REVENUE = f"duckdb://{WAREHOUSE}?partition_column=day#revenue"

pipeline = Pipeline(
    "first_pipeline",
    schedule=Schedule.daily("UTC"),  # one interval per UTC day: [00:00, next 00:00)
    deadline=time(6, 0),  # each day's output is due at 06:00 the next morning
    description="Daily orders and revenue per customer",
)


class SourceUnavailableError(ConnectionError):
    """The share holding the CSV files did not answer: another try may succeed."""


def orders_file(interval: Interval) -> Path:
    """The only file the interval reads."""
    return DATA / f"orders-{interval.start:%Y-%m-%d}.csv"


def orders_version(interval: Interval) -> str:
    """The input version: a hash of the day's file (a corrected file is a new unit of work)."""
    return hashlib.sha256(orders_file(interval).read_bytes()).hexdigest()[:16]


FLAKY = os.environ.get("FIRST_PIPELINE_FLAKY") == "1"
_failed_once: set[str] = set()


@pipeline.task(
    destination=ORDERS,
    write="replace",  # twice replaces the interval's partition with what the task returns
    safe_repeat=True,  # running it again has no effect beyond that replace
    retry=RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=10.0,
                      transient=(SourceUnavailableError,)),  # nothing else is retried
    input_partition="orders-{start:%Y-%m-%d}.csv",
    input_version=orders_version,
)
def orders(ctx: TaskContext) -> pa.Table:
    """The day's orders, exactly as in that day's file."""
    path = orders_file(ctx.interval)
    if FLAKY and path.name not in _failed_once:
        _failed_once.add(path.name)
        raise SourceUnavailableError(f"the share did not answer reading {path.name} (simulated)")
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return pa.table({
        "day": pa.array([ctx.interval.start.date()] * len(rows), pa.date32()),
        "order_id": pa.array([row["order_id"] for row in rows], pa.string()),
        "customer": pa.array([row["customer"] for row in rows], pa.string()),
        "amount": pa.array([Decimal(row["amount"]) for row in rows], pa.decimal128(12, 2)),
    })


@pipeline.task(depends_on=orders, destination=REVENUE, write="replace", safe_repeat=True)
def revenue(ctx: TaskContext) -> pa.Table:
    """The day's revenue per customer, recomputed from the day's orders."""
    day_orders = ctx.read_upstream("orders").to_pylist()
    totals: dict[str, Decimal] = {}
    counts: dict[str, int] = {}
    for row in day_orders:
        totals[row["customer"]] = totals.get(row["customer"], Decimal(0)) + row["amount"]
        counts[row["customer"]] = counts.get(row["customer"], 0) + 1
    customers = sorted(totals)
    return pa.table({
        "day": pa.array([ctx.interval.start.date()] * len(customers), pa.date32()),
        "customer": pa.array(customers, pa.string()),
        "orders": pa.array([counts[c] for c in customers], pa.int64()),
        "revenue": pa.array([totals[c] for c in customers], pa.decimal128(14, 2)),
    })
