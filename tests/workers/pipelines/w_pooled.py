"""Three independent tasks sharing a one-slot pool around the same (pretend) database."""

from __future__ import annotations

from twice_w_side import begin, mark, work

from twice import Pipeline
from twice.define.pipeline import TaskContext
from twice.define.schedule import Schedule

pipeline = Pipeline("w_pooled", schedule=Schedule.daily("UTC"))
pipeline.pool("warehouse", slots=1)


def _use_warehouse(ctx: TaskContext) -> None:
    execution = begin(ctx)
    work()
    mark(execution, "ended")


@pipeline.task(pool="warehouse", safe_repeat=True)
def positions(ctx: TaskContext) -> None:
    _use_warehouse(ctx)


@pipeline.task(pool="warehouse", safe_repeat=True)
def trades(ctx: TaskContext) -> None:
    _use_warehouse(ctx)


@pipeline.task(pool="warehouse", safe_repeat=True)
def prices(ctx: TaskContext) -> None:
    _use_warehouse(ctx)
