"""The fake BigQuery follows the documented job-id semantics, and the executor never duplicates a
job after a lost acknowledgement: it reconciles by the same job id first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.executor.helpers import ManualClock, day, decisions, observed, outcomes
from tests.executor.helpers import planner_decisions as planner

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, RemoteState
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.remote import (
    AcknowledgementLost,
    DuplicateJob,
    JobError,
    JobFailed,
    JobNotFound,
    JobState,
    SubmitBackendError,
    reconcile_job,
    run_job,
    submit_or_inspect,
)
from twice.testing.fake_bigquery import FakeBigQuery

BAD_ROWS = JobError("invalid", "Error while reading data, error message: 2 rows skipped")
QUOTA = JobError("quotaExceeded", "Quota exceeded: too many table update operations")

# -- the fake service on its own ------------------------------------------------------------


def test_reusing_a_job_id_answers_duplicate_and_the_job_can_be_inspected(
    clock: ManualClock,
) -> None:
    bq = FakeBigQuery(clock=clock, duration=10)
    first = bq.submit("load_g1", {"load": "positions"})
    assert first.state is JobState.RUNNING
    with pytest.raises(DuplicateJob) as info:
        bq.submit("load_g1", {"load": "positions"})
    assert info.value.job_id == "load_g1" and info.value.status == 409
    assert bq.get("load_g1").job_id == "load_g1"
    assert submit_or_inspect(bq, "load_g1", {}).state is JobState.RUNNING
    assert list(bq.jobs) == ["load_g1"]
    with pytest.raises(JobNotFound):
        bq.get("other")


def test_states_and_done_is_not_success(clock: ManualClock) -> None:
    bq = FakeBigQuery(clock=clock, pending=1, duration=2)
    bq.plan_job("failed", error_result=QUOTA)
    bq.plan_job("tolerant", errors=(BAD_ROWS,))
    for job_id in ("failed", "tolerant"):
        assert bq.submit(job_id, {}).state is JobState.PENDING
    clock.advance(1.5)
    assert bq.get("failed").state is JobState.RUNNING
    clock.advance(1.5)
    failed, tolerant = bq.get("failed"), bq.get("tolerant")
    assert failed.done and failed.failed and failed.remote_state() is RemoteState.FAILED
    assert failed.to_api()["status"]["errorResult"]["reason"] == "quotaExceeded"
    # errors without errorResult are non-fatal: the job succeeded (check acceptance!)
    assert tolerant.succeeded and tolerant.nonfatal_errors == (BAD_ROWS,)
    assert tolerant.remote_state() is RemoteState.SUCCEEDED
    assert "errorResult" not in tolerant.to_api()["status"]
    assert failed.observed_at == clock()


def test_cancel_returns_at_once_and_does_not_mean_cancelled(clock: ManualClock) -> None:
    bq = FakeBigQuery(clock=clock, duration=0.2, cancel_delay=0.5)
    bq.submit("quick", {})
    assert bq.cancel("quick").state is JobState.RUNNING
    clock.advance(1)
    assert bq.get("quick").succeeded  # it finished before the cancel took effect
    bq.plan_job("slow", duration=60)
    bq.submit("slow", {})
    bq.cancel("slow")
    clock.advance(1)
    stopped = bq.get("slow")
    assert stopped.failed and stopped.error_result is not None
    assert stopped.error_result.reason == "stopped"


def test_faults_lost_ack_and_5xx(clock: ManualClock) -> None:
    bq = FakeBigQuery(clock=clock)
    bq.lose_acknowledgements()
    with pytest.raises(AcknowledgementLost) as lost:
        bq.submit("a", {})
    assert isinstance(lost.value, ConnectionError) and lost.value.outcome == "unknown"
    assert "a" in bq.jobs  # the job exists although the client saw an error
    bq.fail_next("submit", created=True)
    with pytest.raises(SubmitBackendError) as err:
        bq.submit("b", {})
    assert err.value.outcome == "unknown" and "b" in bq.jobs
    bq.fail_next("get", status=500)
    assert reconcile_job(bq, "a") is RemoteState.UNKNOWN  # a 5xx read is no evidence
    assert reconcile_job(bq, "a") is RemoteState.SUCCEEDED
    assert reconcile_job(bq, "never") is RemoteState.NOT_FOUND
    bq.lose_acknowledgements(arrive_after=1.0, error="timeout")
    with pytest.raises(TimeoutError):
        bq.submit("late", {})
    assert reconcile_job(bq, "late") is RemoteState.NOT_FOUND  # still in flight
    clock.advance(1.0)
    assert reconcile_job(bq, "late") is RemoteState.SUCCEEDED


# -- the executor against it ----------------------------------------------------------------


def remote_pipeline(bq: FakeBigQuery, *, reconcile: bool = True,
                    policy: RetryPolicy | None = None,
                    calls: list[str] | None = None) -> Pipeline:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    reconciler: Callable[[str, Any], RemoteState] | None = (
        (lambda job_id, ctx: reconcile_job(bq, job_id)) if reconcile else None
    )

    @pipeline.task(
        retry=policy or RetryPolicy(max_attempts=3, initial_delay=1.0, jitter="none",
                                    transient=(ConnectionError,)),
        safe_repeat=True, timeout=5, reconcile=reconciler, destination="bq:funds.positions",
    )
    def load(ctx):  # type: ignore[no-untyped-def]
        if calls is not None:
            calls.append(ctx.job_id)
        return run_job(bq, ctx.job_id, {"load": ctx.interval.label}, poll_interval=0.01)

    return pipeline


def executor(pipeline: Pipeline, ledger: Ledger, clock: ManualClock, **options: Any
             ) -> Executor:
    return Executor(pipeline, ledger, clock=clock, sleep=clock.sleep, poll_interval=0.5,
                    observe_timeout=10, **options)


def test_lost_ack_reconcile_finds_the_job_and_nothing_is_resubmitted(
    ledger: Ledger, ledger_url: str, clock: ManualClock
) -> None:
    bq = FakeBigQuery(clock=clock, duration=2.0)  # still RUNNING when first looked at
    bq.lose_acknowledgements()
    calls: list[str] = []
    result = executor(remote_pipeline(bq, calls=calls), ledger, clock).run(day())

    unit = result.unit("load")
    assert unit.outcome == "succeeded" and unit.attempts == 1
    assert len(bq.jobs) == 1 and bq.answers("submit") == ["created; acknowledgement lost"]
    assert calls == [unit.job_id]
    uow = unit.uow_id
    assert outcomes(ledger, uow) == ["succeeded"]  # unknown, then resolved by reconcile
    [attempt] = ledger.attempts(uow)
    assert attempt.job_id == unit.job_id and attempt.job_id.endswith("_g1")
    [error] = ledger.errors(uow)
    assert error.classification == "unknown" and "AcknowledgementLost" in error.error_class
    assert decisions(ledger, uow) == ["reconcile-remote"]
    # observed running, polled, then succeeded -- all from the reconciler
    assert observed(ledger, uow, "reconcile") == ["running", "succeeded"]
    assert clock.sleeps == [0.5] * 4
    assert [(g.generation, g.state) for g in ledger.job_generations(uow)] == [(1, "succeeded")]
    assert planner(ledger_url, clock())["load"]["decision"] == "validate-output"


def test_lost_ack_in_flight_same_job_id_resubmitted_duplicate_answered_one_job(
    ledger: Ledger, ledger_url: str, clock: ManualClock
) -> None:
    """The request is still in flight when reconciled (not found): the SAME job id is
    resubmitted, the service answers duplicate, the task inspects it: exactly one job."""
    bq = FakeBigQuery(clock=clock)
    bq.lose_acknowledgements(arrive_after=0.5)
    calls: list[str] = []
    result = executor(remote_pipeline(bq, calls=calls), ledger, clock).run(day())

    unit = result.unit("load")
    assert unit.outcome == "succeeded" and unit.attempts == 2
    assert len(bq.jobs) == 1, "a second job would duplicate the load"
    [job_id] = bq.jobs
    assert calls == [job_id, job_id]
    assert bq.answers("submit") == [
        "request in flight; acknowledgement lost",
        "created (late request arrived)",
        "409 duplicate",
    ]
    uow = unit.uow_id
    attempts = ledger.attempts(uow)
    assert [(a.outcome, a.generation, a.job_id) for a in attempts] == [
        ("failed-transient", 1, job_id), ("succeeded", 1, job_id)
    ]
    assert [e.error_class for e in ledger.errors(uow)] == [
        "twice.remote.jobs.AcknowledgementLost", "twice.engine.reconcile.RequestNeverArrived"
    ]
    assert decisions(ledger, uow) == ["reconcile-remote", "wait-backoff"]
    assert observed(ledger, uow, "reconcile") == ["not-found"]
    assert observed(ledger, uow, "remote:bigquery") == ["succeeded"]
    assert [(g.generation, g.state) for g in ledger.job_generations(uow)] == [(1, "succeeded")]
    assert planner(ledger_url, clock())["load"]["decision"] == "validate-output"


def test_reconcile_confirms_failure_then_a_new_generation(
    ledger: Ledger, clock: ManualClock
) -> None:
    bq = FakeBigQuery(clock=clock)
    pipeline = remote_pipeline(bq)
    first_id = pipeline.unit_of_work("load", day()).job_id(1)
    bq.plan_job(first_id, error_result=QUOTA)
    bq.lose_acknowledgements()
    unit = executor(pipeline, ledger, clock).run(day()).unit("load")

    assert unit.outcome == "succeeded" and unit.attempts == 2
    second_id = pipeline.unit_of_work("load", day()).job_id(2)
    assert sorted(bq.jobs) == sorted([first_id, second_id])
    assert bq.get(first_id).failed and bq.get(second_id).succeeded
    generations = ledger.job_generations(unit.uow_id)
    assert [(g.generation, g.job_id, g.state) for g in generations] == [
        (1, first_id, "confirmed-failed"), (2, second_id, "succeeded")
    ]
    assert [a.job_id for a in ledger.attempts(unit.uow_id)] == [first_id, second_id]
    assert observed(ledger, unit.uow_id, "reconcile") == ["failed"]


def test_job_failed_error_result_confirms_the_generation(
    ledger: Ledger, ledger_url: str, clock: ManualClock
) -> None:
    """DONE with errorResult is a failure (permanent unless JobFailed is listed transient)."""
    bq = FakeBigQuery(clock=clock)
    bq.plan_next(error_result=QUOTA)
    unit = executor(remote_pipeline(bq), ledger, clock).run(day()).unit("load")
    assert unit.outcome == "failed-permanent" and unit.attempts == 1
    [error] = ledger.errors(unit.uow_id)
    assert error.error_class == "twice.remote.jobs.JobFailed" and "quotaExceeded" in error.message
    [generation] = ledger.job_generations(unit.uow_id)
    assert generation.state == "confirmed-failed"
    assert planner(ledger_url, clock())["load"]["decision"] == "repair-cause"

    retried = FakeBigQuery(clock=clock)
    retried.plan_next(error_result=JobError("backendError", "retry me"))
    policy = RetryPolicy(max_attempts=2, initial_delay=1, jitter="none", transient=(JobFailed,))
    pipeline = remote_pipeline(retried, policy=policy)
    # day(1) has not ended at the test morning: allowed explicitly.
    again = executor(pipeline, ledger, clock, allow_open=True).run(day(1)).unit("load")
    assert again.outcome == "succeeded" and len(retried.jobs) == 2  # g1 failed, g2 new


def test_no_reconcile_function_stops_at_reconcile_remote(
    ledger: Ledger, ledger_url: str, clock: ManualClock
) -> None:
    bq = FakeBigQuery(clock=clock)
    bq.lose_acknowledgements()
    unit = executor(remote_pipeline(bq, reconcile=False), ledger, clock).run(day()).unit("load")
    assert unit.outcome == "unknown-needs-reconcile" and unit.attempts == 1
    assert "no reconcile function" in unit.reason
    assert outcomes(ledger, unit.uow_id) == ["unknown"]
    assert decisions(ledger, unit.uow_id) == ["reconcile-remote"]
    assert len(bq.jobs) == 1 and len(bq.answers("submit")) == 1  # never retried blindly
    assert planner(ledger_url, clock())["load"]["decision"] == "reconcile-remote"


def test_nonfatal_remote_errors_and_remote_observation_are_recorded(
    ledger: Ledger, clock: ManualClock
) -> None:
    bq = FakeBigQuery(clock=clock)
    bq.plan_next(errors=(BAD_ROWS,))
    unit = executor(remote_pipeline(bq), ledger, clock).run(day()).unit("load")
    assert unit.outcome == "succeeded"
    [nonfatal] = ledger.nonfatal_errors(unit.uow_id)
    assert nonfatal.detail["source"] == "remote:bigquery" and "2 rows skipped" in nonfatal.message
    latest = ledger.latest_observation(unit.uow_id, source="remote:bigquery")
    assert latest is not None and latest.state == "succeeded"
    assert latest.observed_at == clock()


def test_unknown_left_by_an_earlier_run_is_reconciled_first(
    ledger: Ledger, clock: ManualClock
) -> None:
    bq = FakeBigQuery(clock=clock, duration=60)
    bq.lose_acknowledgements()
    pipeline = remote_pipeline(bq)
    short = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep, poll_interval=1,
                     observe_timeout=3)
    first = short.run(day()).unit("load")
    assert first.outcome == "unknown-needs-reconcile" and "still running" in first.reason
    assert first.next_decision == "reconcile-remote"
    clock.advance(60)
    second = short.run(day()).unit("load")
    assert second.outcome == "succeeded" and second.attempts == 0
    assert len(bq.jobs) == 1 and len(bq.answers("submit")) == 1
    assert outcomes(ledger, first.uow_id) == ["succeeded"]
