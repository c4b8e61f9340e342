"""The pipeline the append trials kill: ``events`` appends each day's rows once (an owned
write, not ``safe_repeat``), ``rollup`` upserts a per-day summary of them by key (``replace`` on
Parquet, which has no upsert). Its rows are a pure function of the day, so the parent computes
what the tables must hold without twice. Configured by the environment: ``APPEND_ENGINE``
(sqlite, duckdb, parquet, postgresql), ``APPEND_ROOT`` (a directory), ``APPEND_PG`` (a
database URL, for postgresql)."""

from __future__ import annotations

import os
import time
from datetime import date
from typing import Any

import pyarrow as pa

from twice import Pipeline, Schedule, TaskContext
from twice.destinations import open_destination

ENGINE = os.environ.get("APPEND_ENGINE", "sqlite")
ROOT = os.environ.get("APPEND_ROOT", ".")


def spec(table: str, engine: str = ENGINE, root: str = ROOT,
         postgres: str = os.environ.get("APPEND_PG", "")) -> str:
    keys = "&key_columns=day" if table == "rollup" and engine != "parquet" else ""
    query = f"?partition_column=day{keys}"
    return {
        "sqlite": f"sqlite://{root}/warehouse.db{query}#{table}",
        "duckdb": f"duckdb://{root}/warehouse.duckdb{query}#{table}",
        "parquet": f"parquet://{root}/{table}{query}",
        "postgresql": f"{postgres}{query}#public.{table}",
    }[engine]


def day_rows(day: date) -> list[dict[str, Any]]:
    return [{"day": day, "id": i, "amount": day.day * 100 + i} for i in range(5 + day.day % 4)]


def rollup_row(day: date) -> dict[str, Any]:
    rows = day_rows(day)
    return {"day": day, "n": len(rows), "total": sum(r["amount"] for r in rows)}


pipeline = Pipeline("append_trials", schedule=Schedule.daily("UTC"))


@pipeline.task(destination=spec("events"), write="append")
def events(ctx: TaskContext) -> pa.Table:
    time.sleep(0.02)  # room for a kill to land inside the unit
    return pa.Table.from_pylist(day_rows(ctx.interval.start.date()))


@pipeline.task(depends_on=events, destination=spec("rollup"),
               write="replace" if ENGINE == "parquet" else "upsert", safe_repeat=True)
def rollup(ctx: TaskContext) -> pa.Table:
    with open_destination(spec("events")) as source:
        table = source.read_partition(ctx.interval)
    day = ctx.interval.start.date()
    return pa.Table.from_pylist([{"day": day, "n": table.num_rows,
                                  "total": sum(table.column("amount").to_pylist())}])
