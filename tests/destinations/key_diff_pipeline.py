"""The pipeline of the key-diff tests: one task replacing a day of a Delta or Iceberg table
keyed by ``id``, whose second version removes key 0, changes key 1, keeps 2 and 3, adds 7."""

from __future__ import annotations

import pyarrow as pa

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule

SCHEDULE = Schedule.daily("UTC")
SPECS = {
    "delta": "delta://{tmp}/t?partition_column=day&key_columns=id",
    "iceberg": "iceberg://{tmp}/wh?partition_column=day&key_columns=id#ns.t",
}
SCHEMA = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("v", pa.int64())])


def build(spec: str, version: dict[str, int]) -> Pipeline:
    """``version["v"]`` (1 or 2) says which rows the task writes when it runs."""
    pipeline = Pipeline("keydiff", schedule=SCHEDULE)

    @pipeline.task(destination=spec, write="replace", safe_repeat=True,
                   retry=RetryPolicy(max_attempts=1))
    def load(ctx: TaskContext) -> pa.Table:
        day = ctx.interval.start.date()
        if version["v"] == 1:
            rows = [{"day": day, "id": i, "v": i} for i in range(4)]
        else:  # 0 removed, 1 changed, 2 and 3 kept, 7 added
            rows = [{"day": day, "id": 1, "v": 100}, {"day": day, "id": 2, "v": 2},
                    {"day": day, "id": 3, "v": 3}, {"day": day, "id": 7, "v": 7}]
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    return pipeline
