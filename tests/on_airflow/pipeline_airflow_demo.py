"""A two-task twice pipeline for the real-Airflow tests, configured by environment variables.

``TWICE_AF_DIR``: folder of the SQLite destination. ``TWICE_AF_FAIL_ATTEMPTS``: comma-separated
twice attempt numbers of ``extract`` that fail transiently AFTER writing their partition (a lost
acknowledgement), so the retry really rewrites it.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination

FOLDER = os.environ.get("TWICE_AF_DIR", ".")
FAILING = {int(n) for n in os.environ.get("TWICE_AF_FAIL_ATTEMPTS", "").split(",") if n}
POSITIONS = f"sqlite:///{FOLDER}/warehouse.db?partition_column=day&key_columns=id#positions"
TOTALS = f"sqlite:///{FOLDER}/warehouse.db?partition_column=day&key_columns=day#totals"

pipeline = Pipeline("af_demo", schedule=Schedule.daily("UTC"))
pipeline.pool("positions_db", slots=2)
policy = RetryPolicy(
    max_attempts=3, initial_delay=0.2, multiplier=1, max_delay=0.2, jitter="none",
    transient=(ConnectionError,),
)


@pipeline.task(retry=policy, safe_repeat=True, pool="positions_db", slots=2,
               destination=POSITIONS, timeout=timedelta(seconds=60))
def extract(ctx: TaskContext) -> dict[str, Any]:
    day = ctx.interval.start.date()
    rows = [{"id": i, "day": day, "amount": 10 * i + day.day} for i in range(5)]
    with open_destination(ctx.destination) as dest:
        written = dest.replace_partition(rows, ctx.interval)
    if ctx.attempt in FAILING:
        raise ConnectionError(f"attempt {ctx.attempt}: positions db reset after the write")
    return {"rows": written.rows_written}


@pipeline.task(depends_on=[extract], retry=policy, safe_repeat=True, destination=TOTALS)
def load(ctx: TaskContext) -> None:
    with open_destination(POSITIONS) as source:
        table = source.read_partition(ctx.interval)
    total = sum(table.column("amount").to_pylist())
    with open_destination(ctx.destination) as dest:
        dest.replace_partition(
            [{"day": ctx.interval.start.date(), "total": total, "rows": table.num_rows}],
            ctx.interval,
        )
