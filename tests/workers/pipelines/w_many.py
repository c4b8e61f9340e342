"""Two dependent tasks over many days: extract stages the source, load copies it onward."""

from __future__ import annotations

from twice_w_side import amounts, begin, destination, mark, work

from twice import Pipeline
from twice.define.pipeline import TaskContext
from twice.define.schedule import Schedule

pipeline = Pipeline("w_many", schedule=Schedule.daily("UTC"))


@pipeline.task(safe_repeat=True)
def extract(ctx: TaskContext) -> int:
    execution = begin(ctx)
    work()
    rows = amounts(ctx.interval.start.date())
    with destination("w_staging") as staging:
        staging.replace_partition(rows, ctx.interval)
    mark(execution, "ended")
    return len(rows)


@pipeline.task(depends_on=[extract], safe_repeat=True)
def load(ctx: TaskContext) -> int:
    execution = begin(ctx)
    work()
    with destination("w_staging") as staging:
        staged = staging.read_partition(ctx.interval).to_pylist()
    rows = [{**row, "job_id": ctx.job_id} for row in staged]
    with destination("w_positions") as positions:
        positions.replace_partition(rows, ctx.interval)
    mark(execution, "ended")
    return len(rows)
