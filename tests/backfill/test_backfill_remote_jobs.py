"""``run_backfill`` with a remote task on the fake BigQuery: ``twice.remote``'s unknown outcomes
are reconciled by the same job id (not recorded as failures), and a job that failed with a
transient ``errorResult`` is retried as a new job, not as the same failed one."""

from __future__ import annotations

from tests.executor.helpers import ManualClock, day

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, RemoteState, TaskContext
from twice.define.schedule import Schedule
from twice.drivers.backfill import run_backfill
from twice.ledger import Ledger
from twice.remote import BackendError, JobError, JobFailed, JobStatus, reconcile_job, run_job
from twice.testing.fake_bigquery import FakeBigQuery


def remote_pipeline(bq: FakeBigQuery) -> Pipeline:
    pipeline = Pipeline("bf_remote", schedule=Schedule.daily("UTC"))

    def reconcile(job_id: str, _ctx: TaskContext) -> RemoteState:
        return reconcile_job(bq, job_id)

    @pipeline.task(retry=RetryPolicy(max_attempts=3, initial_delay=1.0, jitter="none",
                                     transient=(BackendError, JobFailed)),
                   safe_repeat=True, reconcile=reconcile)
    def load(ctx: TaskContext) -> JobStatus:
        return run_job(bq, ctx.job_id, {"day": ctx.interval.label}, poll_interval=0.01)

    return pipeline


def test_a_lost_acknowledgement_is_reconciled_not_failed(
    ledger: Ledger, clock: ManualClock
) -> None:
    bq = FakeBigQuery(clock=clock)
    bq.lose_acknowledgements()
    pipeline = remote_pipeline(bq)
    [run] = run_backfill(pipeline, ledger, [day()], sleep=clock.sleep).runs
    assert run.status == "succeeded" and run.attempts == [(1, "succeeded")]
    job_id = pipeline.unit_of_work("load", day()).job_id(1)
    assert run.reconciled == [f"{job_id}: succeeded"]
    assert list(bq.jobs) == [job_id] and len(bq.answers("submit")) == 1
    [error] = ledger.errors(run.uow_id)
    assert error.classification == "unknown" and error.error_class.endswith("AcknowledgementLost")


def test_an_unreconcilable_unknown_is_left_unknown_and_the_next_backfill_reconciles_it(
    ledger: Ledger, clock: ManualClock
) -> None:
    bq = FakeBigQuery(clock=clock)
    bq.fail_next("submit", created=True)  # 5xx to the submit: the job may exist
    bq.fail_next("get")  # and the reconcile's only look gets a 5xx too: no evidence
    pipeline = remote_pipeline(bq)
    [run] = run_backfill(pipeline, ledger, [day()], sleep=clock.sleep,
                         poll_interval=1.0, observe_timeout=1.0).runs
    assert run.status == "failed" and run.outcome == "unknown-needs-reconcile"
    assert run.attempts == [(1, "unknown")] and "nothing resubmitted" in run.reason
    assert [a.outcome for a in ledger.attempts(run.uow_id)] == ["unknown"]
    assert len(bq.answers("submit")) == 1  # not retried blindly
    # The next backfill asks about the same job id before anything else: it had succeeded.
    [again] = run_backfill(pipeline, ledger, [day()], sleep=clock.sleep).runs
    job_id = pipeline.unit_of_work("load", day()).job_id(1)
    assert again.status == "succeeded" and again.attempts == [(1, "succeeded")]
    assert again.reconciled == [f"{job_id}: succeeded"]
    assert len(bq.answers("submit")) == 1 and list(bq.jobs) == [job_id]


def test_a_job_failed_with_a_transient_error_is_retried_as_a_new_job(
    ledger: Ledger, clock: ManualClock
) -> None:
    bq = FakeBigQuery(clock=clock)
    pipeline = remote_pipeline(bq)
    unit = pipeline.unit_of_work("load", day())
    bq.plan_job(unit.job_id(1), error_result=JobError("backendError", "Backend error"))
    [run] = run_backfill(pipeline, ledger, [day()], sleep=clock.sleep).runs
    assert run.status == "succeeded"
    assert run.attempts == [(1, "failed-transient"), (2, "succeeded")]
    assert [a.job_id for a in ledger.attempts(unit.uow_id)] == [unit.job_id(1), unit.job_id(2)]
    assert bq.get(unit.job_id(1)).failed and bq.get(unit.job_id(2)).succeeded
