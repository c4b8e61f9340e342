"""A backfill keeps the executor's rules: what it retries, what it runs on, what it leaves.

The old stand-in retried any transient error whether or not repeating the task was asserted
safe, and ran a task whose upstream (outside ``--tasks``) had never run. These pin the rules
``twice backfill`` now shares with ``twice run``.
"""

from __future__ import annotations

import pytest
from tests.executor.helpers import ManualClock, day

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers.backfill import run_backfill
from twice.ledger import Ledger


def flaky(calls: list[int], failures: int):  # type: ignore[no-untyped-def]
    def task(ctx: TaskContext) -> None:
        calls.append(ctx.attempt)
        if len(calls) <= failures:
            raise ConnectionError("reset by peer")

    return task


RETRY = RetryPolicy(max_attempts=3, initial_delay=1.0, jitter="none",
                    transient=(ConnectionError,))


@pytest.mark.parametrize("safe_repeat", [True, False])
def test_a_transient_error_is_retried_only_when_repeating_is_asserted_safe(
    ledger: Ledger, clock: ManualClock, safe_repeat: bool
) -> None:
    calls: list[int] = []
    pipeline = Pipeline("flaky", schedule=Schedule.daily("UTC"))
    pipeline.task(name="send", retry=RETRY, safe_repeat=safe_repeat)(flaky(calls, 1))
    [run] = run_backfill(pipeline, ledger, [day()], sleep=clock.sleep).runs
    if safe_repeat:
        assert run.status == "succeeded" and calls == [1, 2]
        assert run.attempts == [(1, "failed-transient"), (2, "succeeded")]
        assert clock.sleeps == [1.0]  # the policy's backoff, no jitter
    else:
        assert run.status == "failed" and run.outcome == "reconcile-effects" and calls == [1]
        assert "repeat not asserted safe" in run.reason


def test_a_task_whose_upstream_never_ran_is_blocked_not_run_on_missing_data(
    ledger: Ledger, clock: ManualClock
) -> None:
    ran: list[str] = []
    pipeline = Pipeline("deps", schedule=Schedule.daily("UTC"))
    pipeline.task(name="extract")(lambda ctx: ran.append("extract"))
    pipeline.task(name="load", depends_on="extract")(lambda ctx: ran.append("load"))
    [run] = run_backfill(pipeline, ledger, [day()], tasks=["load"], sleep=clock.sleep).runs
    assert run.status == "blocked" and ran == []
    assert "dependency extract was not selected to run" in run.reason
    run_backfill(pipeline, ledger, [day()], sleep=clock.sleep)
    [held] = run_backfill(pipeline, ledger, [day()], tasks=["load"], force=True,
                          sleep=clock.sleep).runs
    assert held.status == "held" and ran == ["extract", "load"]  # not safe_repeat
    assert "--repeat load" in held.reason
    [again] = run_backfill(pipeline, ledger, [day()], tasks=["load"], force=True,
                           repeat=["load"], sleep=clock.sleep).runs
    assert again.status == "succeeded" and ran == ["extract", "load", "load"]


def test_a_unit_another_holder_is_running_is_left_to_it(
    ledger: Ledger, clock: ManualClock
) -> None:
    ran: list[str] = []
    pipeline = Pipeline("held", schedule=Schedule.daily("UTC"))
    pipeline.task(name="only")(lambda ctx: ran.append("x"))
    uow_id = pipeline.unit_of_work("only", day()).uow_id
    ledger.record_unit(pipeline.unit_of_work("only", day()))
    assert ledger.acquire_lease(uow_id, "worker-7", 600).acquired
    result = run_backfill(pipeline, ledger, [day()], sleep=clock.sleep)
    [run] = result.runs
    assert run.status == "leased-elsewhere" and "worker-7" in run.reason and ran == []
    assert not result.ok and run.attempts == []
