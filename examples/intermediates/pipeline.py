"""intermediates: one expensive result, kept as a materialized intermediate, read by two tasks.

The pipeline of docs/guides/intermediates.md.

- ``enriched`` joins the day's positions with the day's prices (the expensive step; here the
  rows are generated from the day, so the example needs no input files) and returns them.
  It is declared ``intermediate=Intermediate(owner=..., retention=...)``: twice replaces the
  day's slice of the ``enriched`` table with the rows, records the slice's version (a hash of
  the unit of work: pipeline, task, interval, input and transform versions, destination) and
  its integrity fingerprint in the ledger's catalog, and on a rerun of the same unit reuses
  the stored slice, without running the task, while that fingerprint still matches.
- ``exposure`` (market value per fund) and ``largest`` (each fund's largest position) read the
  day's slice back with ``ctx.read_upstream("enriched")``.

Every amount is a decimal, so the integrity fingerprint covers every column (floats have no
canonical text and would be left out of it). The warehouse lives in
``$INTERMEDIATES_WORKDIR/warehouse.duckdb`` (default ``./intermediates-work``, relative to the
directory you run twice from).
"""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from twice import Intermediate, Interval, Pipeline, Schedule, TaskContext

WORKDIR = Path(os.environ.get("INTERMEDIATES_WORKDIR", "intermediates-work")).resolve()
WORKDIR.mkdir(parents=True, exist_ok=True)
WAREHOUSE = WORKDIR / "warehouse.duckdb"
ENRICHED = f"duckdb://{WAREHOUSE}?partition_column=day#enriched"
EXPOSURE = f"duckdb://{WAREHOUSE}?partition_column=day#exposure"
LARGEST = f"duckdb://{WAREHOUSE}?partition_column=day#largest"

FUNDS = ("F1", "F2", "F3")
ISINS = ("PT0001", "PT0002", "PT0003", "PT0004")

pipeline = Pipeline(
    "fund_exposure",
    schedule=Schedule.daily("UTC"),
    description="Positions enriched with prices once a day, read by two reports",
)


def position_rows(interval: Interval) -> list[dict[str, object]]:
    """The day's positions with their prices: the same rows for the same day, every time."""
    day = interval.start.date()
    rows = []
    for fund in FUNDS:
        for isin in ISINS:
            seed = int(hashlib.sha256(f"{day}/{fund}/{isin}".encode()).hexdigest()[:8], 16)
            quantity = 100 + seed % 900
            price = Decimal(1000 + seed % 9000) / 100
            rows.append({"day": day, "fund": fund, "isin": isin, "quantity": quantity,
                         "price": price, "market_value": price * quantity})
    return rows


@pipeline.task(
    destination=ENRICHED,
    intermediate=Intermediate(owner="team-funds", retention=timedelta(days=7)),
    safe_repeat=True,  # running it again has no effect beyond replacing its slice
    timeout=120,
    estimated_duration=1,
)
def enriched(ctx: TaskContext) -> pa.Table:
    """The day's positions joined with the day's prices (the step worth keeping)."""
    rows = position_rows(ctx.interval)
    return pa.table({
        "day": pa.array([r["day"] for r in rows], pa.date32()),
        "fund": pa.array([r["fund"] for r in rows], pa.string()),
        "isin": pa.array([r["isin"] for r in rows], pa.string()),
        "quantity": pa.array([r["quantity"] for r in rows], pa.int64()),
        "price": pa.array([r["price"] for r in rows], pa.decimal128(12, 2)),
        "market_value": pa.array([r["market_value"] for r in rows], pa.decimal128(18, 2)),
    })


@pipeline.task(depends_on=enriched, destination=EXPOSURE, write="replace", safe_repeat=True,
               timeout=60, estimated_duration=1)
def exposure(ctx: TaskContext) -> pa.Table:
    """Market value per fund, from the day's enriched positions."""
    totals: dict[str, Decimal] = {}
    for row in ctx.read_upstream("enriched").to_pylist():
        totals[row["fund"]] = totals.get(row["fund"], Decimal(0)) + row["market_value"]
    funds = sorted(totals)
    return pa.table({
        "day": pa.array([ctx.interval.start.date()] * len(funds), pa.date32()),
        "fund": pa.array(funds, pa.string()),
        "market_value": pa.array([totals[f] for f in funds], pa.decimal128(18, 2)),
    })


@pipeline.task(depends_on=enriched, destination=LARGEST, write="replace", safe_repeat=True,
               timeout=60, estimated_duration=1)
def largest(ctx: TaskContext) -> pa.Table:
    """Each fund's largest position of the day, from the same enriched slice."""
    best: dict[str, dict[str, object]] = {}
    for row in ctx.read_upstream("enriched").to_pylist():
        kept = best.get(row["fund"])
        if kept is None or (row["market_value"], row["isin"]) > (kept["market_value"],
                                                                 kept["isin"]):
            best[row["fund"]] = row
    funds = sorted(best)
    return pa.table({
        "day": pa.array([ctx.interval.start.date()] * len(funds), pa.date32()),
        "fund": pa.array(funds, pa.string()),
        "isin": pa.array([best[f]["isin"] for f in funds], pa.string()),
        "market_value": pa.array([best[f]["market_value"] for f in funds],
                                 pa.decimal128(18, 2)),
    })
