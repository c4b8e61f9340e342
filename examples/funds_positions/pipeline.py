"""funds_positions: extract -> transform -> load -> daily aggregate, one DuckDB warehouse.

Every task reads and writes only its interval's slice: extract copies the day's CSV into
``raw_positions``; transform parses it into ``positions_stage`` (unparsable rows are counted as
rejected, and acceptance allows at most one per day); load replaces the day in ``positions`` and
writes a job marker keyed by the deterministic job id, so a lost acknowledgement is reconciled
by looking the marker up; the aggregate is recomputed from the replaced slice. Because every
write replaces the interval's slice (or upserts by key), each task asserts ``safe_repeat``: a
retry after a transient error may run it again.

``twice backfill examples/funds_positions/pipeline.py --start ... --end ...`` uses the module
variable ``pipeline`` (work directory ``$TWICE_FUNDS_WORKDIR``, default ``./funds-demo``).
"""

from __future__ import annotations

import csv
import os
from datetime import date, time, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import funds_faults  # twice puts a pipeline file's folder on sys.path, as python does for a script
import funds_source as source

from twice import (
    AcceptanceCriteria,
    Interval,
    OutcomeUnknownError,
    Pipeline,
    RemoteState,
    RetryPolicy,
    Schedule,
    TaskContext,
)

HERE = Path(__file__).resolve().parent
TABLES = ("raw_positions", "positions_stage", "positions", "fund_daily")




def destination(warehouse: Path, table: str, **query: str) -> str:
    options = "&".join(["partition_column=day", *(f"{k}={v}" for k, v in query.items())])
    return f"duckdb://{warehouse.resolve()}?{options}#{table}"


def build_pipeline(workdir: str | os.PathLike[str], faults: Any = None,
                   *, transform_version: str = "1") -> Pipeline:
    """The pipeline over ``workdir/source`` into ``workdir/warehouse.duckdb``."""
    import pyarrow as pa

    from twice import open_destination
    from twice.destinations.aggregates import recompute_from_slice  # no public name yet

    root = Path(workdir)
    source_dir, warehouse = root / "source", root / "warehouse.duckdb"
    specs = {t: destination(warehouse, t) for t in TABLES}
    jobs_spec = f"duckdb://{warehouse.resolve()}?key_columns=job_id#load_jobs"
    pipeline = Pipeline("funds_positions", schedule=Schedule.daily("UTC"),
                        deadline=time(6, 0), description="Daily funds positions")

    def day_of(interval: Interval) -> date:
        return interval.start.date()

    def input_version(interval: Interval) -> str:
        return source.file_version(source.file_for(source_dir, day_of(interval)))

    @pipeline.task(
        retry=RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.05,
                          transient=(ConnectionError,)),
        timeout=30, destination=specs["raw_positions"], safe_repeat=True,
        input_partition="positions_{start:%Y-%m-%d}.csv", input_version=input_version,
    )
    def extract(ctx: TaskContext) -> dict[str, int]:
        """Copy the day's CSV, as text, into raw_positions."""
        day = day_of(ctx.interval)
        if faults is not None:
            faults.on_extract(day)
        with source.file_for(source_dir, day).open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        table = pa.table({
            "day": pa.array([day] * len(rows), pa.date32()),
            "line": pa.array(range(1, len(rows) + 1), pa.int64()),
            **{c: pa.array([r[c] for r in rows], pa.string()) for c in source.COLUMNS},
        })
        with open_destination(ctx.destination) as dest:
            dest.replace_partition(table, ctx.interval)
        return {"rows": len(rows)}

    @pipeline.task(depends_on=extract, timeout=30, destination=specs["positions_stage"],
                   transform_version=transform_version, estimated_duration=0.1, safe_repeat=True,
                   acceptance=AcceptanceCriteria(min_rows=1, max_rejected_rows=1,
                                                 max_nonfatal_errors=1))
    def transform(ctx: TaskContext) -> dict[str, int]:
        """Parse quantities and prices; count unparsable rows as rejected (not silently)."""
        if faults is not None:
            faults.on_transform(day_of(ctx.interval))
        with open_destination(specs["raw_positions"]) as raw:
            rows = raw.read_partition(ctx.interval).to_pylist()
        good, rejected = [], 0
        for row in sorted(rows, key=lambda r: r["line"]):
            try:
                quantity = Decimal(row["quantity"]).quantize(Decimal("0.01"))
                price = Decimal(row["price"]).quantize(Decimal("0.0001"))
            except InvalidOperation:
                rejected += 1
                continue
            value = (quantity * price).quantize(Decimal("0.01"))
            good.append((row["day"], row["fund_id"], row["isin"], quantity, price, value))
        if rejected:
            ctx.nonfatal(f"{rejected} unparsable row(s) rejected", rejected)
        columns: list[tuple[Any, ...]] = list(zip(*good, strict=True)) if good else [()] * 6
        table = pa.table({
            "day": pa.array(columns[0], pa.date32()),
            "fund_id": pa.array(columns[1], pa.string()),
            "isin": pa.array(columns[2], pa.string()),
            "quantity": pa.array(columns[3], pa.decimal128(18, 2)),
            "price": pa.array(columns[4], pa.decimal128(18, 4)),
            "market_value": pa.array(columns[5], pa.decimal128(18, 2)),
        })
        if transform_version != "1":  # an additive schema change (the guide, backfill tests)
            table = table.append_column("currency", pa.array(["EUR"] * len(good), pa.string()))
        with open_destination(ctx.destination) as dest:
            dest.replace_partition(table, ctx.interval)
        return {"rows": len(good), "rejected_rows": rejected}

    def reconcile_load(job_id: str, ctx: TaskContext) -> RemoteState:
        """Look for the job marker the load writes with its rows: found means it happened."""
        with open_destination(jobs_spec) as jobs:
            if jobs.schema() is None:
                return RemoteState.NOT_FOUND
            ids = jobs.read_partition(None, ["job_id"]).column("job_id").to_pylist()
        return RemoteState.SUCCEEDED if job_id in ids else RemoteState.NOT_FOUND

    @pipeline.task(depends_on=transform, timeout=30, destination=specs["positions"],
                   reconcile=reconcile_load, safe_repeat=True)
    def load(ctx: TaskContext) -> dict[str, int]:
        """Replace the day in positions; mark the job id; maybe lose the acknowledgement."""
        with open_destination(specs["positions_stage"]) as stage:
            table = stage.read_partition(ctx.interval)
        with open_destination(ctx.destination) as dest:
            dest.replace_partition(table, ctx.interval)
        marker = pa.table({"job_id": [ctx.job_id], "day": pa.array([day_of(ctx.interval)],
                                                                    pa.date32()),
                           "rows": pa.array([table.num_rows], pa.int64())})
        with open_destination(jobs_spec) as jobs:
            jobs.upsert(marker)
        if faults is not None and faults.lose_load_ack(day_of(ctx.interval)):
            raise OutcomeUnknownError(f"load of {ctx.job_id}: acknowledgement lost (injected)")
        return {"rows": table.num_rows}

    @pipeline.task(depends_on=load, timeout=30, destination=specs["fund_daily"], safe_repeat=True)
    def aggregate(ctx: TaskContext) -> None:
        """Recompute the day's per-fund totals from the replaced slice (never by deltas)."""
        with open_destination(specs["positions"]) as detail, \
                open_destination(ctx.destination) as totals:
            recompute_from_slice(
                detail, totals, ctx.interval, group_by=["day", "fund_id"],
                aggregations={"market_value": ("market_value", "sum"),
                              "positions": ("isin", "count")},
            )

    return pipeline


FaultPlan = funds_faults.FaultPlan
DEMO_START = date(2026, 11, 23)
DEMO_DAYS = 7
DEMO_END = DEMO_START + timedelta(days=DEMO_DAYS)

# TWICE_FUNDS_TRANSFORM_VERSION=2: transform's output gains a nullable ``currency`` column (the
# guide "Rerun, backfill and resolve" adds it with --accept-schema-change)
pipeline = build_pipeline(os.environ.get("TWICE_FUNDS_WORKDIR", "funds-demo"),
                          transform_version=os.environ.get("TWICE_FUNDS_TRANSFORM_VERSION", "1"))
