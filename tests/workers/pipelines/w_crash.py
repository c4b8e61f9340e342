"""A load whose destination write can be reconciled, and a notification that cannot.

``load`` stamps its rows with its job id; its reconciler asks the destination what became of
that job id: rows of this job whose fingerprint equals the expected rows' -> succeeded; rows
of this job that differ -> failed; no rows of this job -> not-found (it never wrote).
"""

from __future__ import annotations

from twice_w_side import amounts, begin, destination, mark, work

from twice import Pipeline
from twice.core.policy import RetryPolicy
from twice.define.pipeline import RemoteState, TaskContext
from twice.define.schedule import Schedule
from twice.destinations.fingerprint import arrow_sums, resolve_columns
from twice.destinations.rows import to_arrow

pipeline = Pipeline("w_crash", schedule=Schedule.daily("UTC"))
RETRY = RetryPolicy(max_attempts=3, initial_delay=0.1, jitter="none",
                    transient=(ConnectionError,))


def _rows(ctx: TaskContext, job_id: str) -> list[dict[str, object]]:
    return [{**row, "job_id": job_id} for row in amounts(ctx.interval.start.date())]


def reconcile_load(job_id: str, ctx: TaskContext) -> RemoteState:
    with destination("w_positions") as positions:
        schema = positions.schema()
        if schema is None:
            return RemoteState.NOT_FOUND
        stamped = positions.read_partition(ctx.interval, ["job_id"]).column("job_id")
        if job_id not in stamped.to_pylist():
            return RemoteState.NOT_FOUND
        columns = resolve_columns(schema, None)
        expected = to_arrow(_rows(ctx, job_id), target=schema)
        wanted = arrow_sums(expected, [(name, schema[name]) for name in columns])
        found = positions.fingerprint_sums(ctx.interval, columns)
    return RemoteState.SUCCEEDED if tuple(found) == wanted else RemoteState.FAILED


@pipeline.task(retry=RETRY, reconcile=reconcile_load, timeout=60)
def load(ctx: TaskContext) -> int:
    execution = begin(ctx)
    work("TWICE_W_PAUSE_BEFORE")
    rows = _rows(ctx, ctx.job_id)
    with destination("w_positions") as positions:
        positions.replace_partition(rows, ctx.interval)
    mark(execution, "written")
    work("TWICE_W_PAUSE_AFTER")
    mark(execution, "ended")
    return len(rows)


@pipeline.task(retry=RETRY, timeout=60)
def notify(ctx: TaskContext) -> None:
    """Sends a message nobody can take back: no reconcile, not safe to repeat."""
    execution = begin(ctx)
    work("TWICE_W_PAUSE_BEFORE")
    mark(execution, "written")
    work("TWICE_W_PAUSE_AFTER")
    mark(execution, "ended")
