"""A timeout leaves the outcome unknown (not failed); a retry that cannot finish by the deadline
is not started, and that is recorded; no attempt starts after the workflow deadline."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.executor.helpers import ManualClock, day, decisions, no_sleep, outcomes
from tests.executor.helpers import planner_decisions as planner

from twice.core.policy import Jitter, RetryPolicy
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.remote import reconcile_job, submit_or_inspect, wait_for_job
from twice.testing.fake_bigquery import FakeBigQuery


def test_timeout_is_unknown_not_failed_and_the_thread_keeps_running(
    real_ledger: Ledger, ledger_url: str
) -> None:
    finished = threading.Event()
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=RetryPolicy(max_attempts=3, transient=(TimeoutError,)),
                   safe_repeat=True, timeout=0.2)
    def extract(ctx):  # type: ignore[no-untyped-def]
        time.sleep(0.6)
        finished.set()  # the side effect still happens after the timeout

    started = time.monotonic()
    unit = Executor(pipeline, real_ledger, sleep=no_sleep).run(day()).unit("extract")
    assert time.monotonic() - started < 0.55  # the executor stopped waiting at the timeout
    # TimeoutError is listed transient, yet an unknown outcome is never retried blindly.
    assert unit.outcome == "unknown-needs-reconcile" and unit.attempts == 1
    assert outcomes(real_ledger, unit.uow_id) == ["unknown"]
    [error] = real_ledger.errors(unit.uow_id)
    assert error.classification == "unknown" and error.error_class.endswith("AttemptTimeout")
    assert "may still be running" in error.message
    assert decisions(real_ledger, unit.uow_id) == ["reconcile-remote"]
    assert planner(ledger_url)["extract"]["decision"] == "reconcile-remote"
    assert finished.wait(2), "the timed-out thread was not stopped: its work continued"


def test_timeout_while_the_remote_job_runs_then_reconcile_finds_it(
    real_ledger: Ledger, ledger_url: str
) -> None:
    bq = FakeBigQuery(duration=0.4)  # real time
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=RetryPolicy(max_attempts=2, transient=(ConnectionError,)),
                   safe_repeat=True, timeout=0.1,
                   reconcile=lambda job_id, ctx: reconcile_job(bq, job_id))
    def load(ctx):  # type: ignore[no-untyped-def]
        submit_or_inspect(bq, ctx.job_id, {})
        return wait_for_job(bq, ctx.job_id, poll_interval=0.02)

    executor = Executor(pipeline, real_ledger, poll_interval=0.05, observe_timeout=5)
    unit = executor.run(day()).unit("load")
    assert unit.outcome == "succeeded" and unit.attempts == 1
    assert len(bq.jobs) == 1 and bq.answers("submit") == ["created"]
    assert outcomes(real_ledger, unit.uow_id) == ["succeeded"]
    # the timed-out thread, still waiting on the job, is given the observe budget to end
    # before the service is asked (twice.engine.settlement.CommitEvidence.wait_for_thread): one look
    # finds it
    states = [o.state for o in real_ledger.observations(unit.uow_id) if o.source == "reconcile"]
    assert states == ["succeeded"]
    assert planner(ledger_url)["load"]["decision"] == "validate-output"


def deadline_pipeline(calls: list[int], jitter: Jitter = "none") -> Pipeline:
    # The 2026-11-30 delivery is due at 2026-12-01T06:00Z.
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"), deadline=timedelta(hours=6))

    @pipeline.task(
        retry=RetryPolicy(max_attempts=4, initial_delay=40, jitter=jitter,
                          transient=(ConnectionError,)),
        safe_repeat=True, timeout=60, estimated_duration=30, validation_duration=5,
    )
    def load(ctx):  # type: ignore[no-untyped-def]
        calls.append(ctx.attempt)
        raise ConnectionError("warehouse unavailable")

    return pipeline


def test_retry_that_misses_the_deadline_is_not_started(ledger_url: str) -> None:
    clock = ManualClock(datetime(2026, 12, 1, 5, 58, 50, tzinfo=UTC))
    calls: list[int] = []
    with Ledger.open(ledger_url, clock=clock) as ledger:
        unit = Executor(deadline_pipeline(calls), ledger, clock=clock,
                        sleep=clock.sleep).run(day()).unit("load")
        # attempt 1 fits (05:58:50 + 35 s); attempt 2 could start 05:59:30, finish 06:00:05.
        assert unit.outcome == "deadline-infeasible"
        assert calls == [1] and unit.attempts == 1 and clock.sleeps == []
        assert outcomes(ledger, unit.uow_id) == ["failed-transient"]
        [record] = ledger.decisions(unit.uow_id)
        assert record.decision == "deadline-infeasible" and record.not_started
        assert record.attempt == 2  # the withheld attempt, never begun
        assert record.detail["estimated_finish"] == "2026-12-01T06:00:05Z"
        assert "after the deadline 2026-12-01T06:00:00Z" in record.reason
    assert planner(ledger_url, clock())["load"]["decision"] == "deadline-infeasible"


def test_retry_finishing_exactly_at_the_deadline_is_started(ledger_url: str) -> None:
    """The lab's boundary: a finish (validation included) at the deadline still fits."""
    clock = ManualClock(datetime(2026, 12, 1, 5, 58, 45, tzinfo=UTC))
    calls: list[int] = []
    with Ledger.open(ledger_url, clock=clock) as ledger:
        unit = Executor(deadline_pipeline(calls), ledger, clock=clock,
                        sleep=clock.sleep).run(day()).unit("load")
        # attempt 2: start 05:59:25, finish 06:00:00 (= deadline); attempt 3 cannot fit.
        assert calls == [1, 2] and clock.sleeps == [40.0]
        assert decisions(ledger, unit.uow_id) == ["wait-backoff", "deadline-infeasible"]
        first = ledger.decisions(unit.uow_id)[0]
        assert first.detail["estimated_finish"] == "2026-12-01T06:00:00Z"
    assert unit.outcome == "deadline-infeasible"


def test_first_attempt_that_cannot_finish_by_the_deadline_is_not_started(
    ledger_url: str,
) -> None:
    clock = ManualClock(datetime(2026, 12, 1, 5, 59, 30, tzinfo=UTC))
    calls: list[int] = []
    with Ledger.open(ledger_url, clock=clock) as ledger:
        unit = Executor(deadline_pipeline(calls), ledger, clock=clock,
                        sleep=clock.sleep).run(day()).unit("load")
        assert unit.outcome == "deadline-infeasible" and calls == []
        assert ledger.attempts(unit.uow_id) == []
        [record] = ledger.decisions(unit.uow_id)
        assert record.not_started and record.attempt == 1
    assert planner(ledger_url, clock())["load"]["decision"] == "deadline-infeasible"


def flaky_pipeline(clock: ManualClock, calls: list[int], *, max_attempts: int = 5,
                   jitter: Jitter = "none", estimated_duration: float = 2) -> Pipeline:
    """``extract`` fails transiently after 2 s of (manual) time, under a 10 s workflow timeout;
    retried after 4 s."""
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"), workflow_timeout=10)

    @pipeline.task(retry=RetryPolicy(max_attempts=max_attempts, initial_delay=4, jitter=jitter,
                                     transient=(ConnectionError,)),
                   safe_repeat=True, timeout=5, estimated_duration=estimated_duration)
    def extract(ctx):  # type: ignore[no-untyped-def]
        calls.append(ctx.attempt)
        clock.advance(2)  # each attempt takes 2 s of (manual) time
        raise ConnectionError("flaky")

    return pipeline


def test_no_attempt_starts_after_the_workflow_deadline(ledger: Ledger, clock: ManualClock,
                                                       ledger_url: str) -> None:
    calls: list[int] = []
    pipeline = flaky_pipeline(clock, calls)
    unit = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).unit("extract")
    # 0-2 attempt 1, wait 4, 6-8 attempt 2, then a retry would start at 16 > 10: refused.
    assert calls == [1, 2] and unit.outcome == "deadline-infeasible"
    not_started = [d for d in ledger.decisions(unit.uow_id) if d.not_started]
    assert len(not_started) == 1 and not_started[0].attempt == 3
    assert not_started[0].detail["evidence"]["deadline"] == "2026-12-01T05:00:10Z"
    # Offline, a new run would get a fresh workflow budget: the planner would retry later.
    assert planner(ledger_url, clock())["extract"]["decision"] in ("wait-backoff",
                                                                  "retry-eligible")


def test_without_an_estimate_the_timeout_is_assumed(ledger: Ledger, clock: ManualClock) -> None:
    """No estimated_duration: an attempt may take its whole timeout, so the planner never
    starts one that could not finish (the seed's rule), and says the number was assumed."""
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"), workflow_timeout=10)
    calls: list[int] = []

    @pipeline.task(retry=RetryPolicy(max_attempts=5, initial_delay=4, jitter="none",
                                     transient=(ConnectionError,)),
                   safe_repeat=True, timeout=5)
    def extract(ctx):  # type: ignore[no-untyped-def]
        calls.append(ctx.attempt)
        clock.advance(2)
        raise ConnectionError("flaky")

    unit = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).unit("extract")
    # 0-2 attempt 1, wait 4: attempt 2 would run 6-11 (its 5 s timeout) > 10: not started.
    assert calls == [1] and unit.outcome == "deadline-infeasible"
    [refused] = [d for d in ledger.decisions(unit.uow_id) if d.not_started]
    assert refused.detail["evidence"]["duration_basis"] == "assumed: the task's timeout"
    assert refused.detail["evidence"]["duration"] == 5


PROCESS_PIPELINE = """\
import time
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule

pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

@pipeline.task(timeout=20)
def extract(ctx):
    ctx.nonfatal("1 duplicate key dropped")
    return 3

@pipeline.task(timeout=0.5)
def hang(ctx):
    time.sleep(30)
"""


def test_process_isolation_terminates_and_still_reports_unknown(
    real_ledger: Ledger, tmp_path: Path
) -> None:
    from twice.define.load import load_pipeline

    path = tmp_path / "proc.py"
    path.write_text(PROCESS_PIPELINE)
    pipeline = load_pipeline(path)
    started = time.monotonic()
    result = Executor(pipeline, real_ledger, isolation="process", sleep=no_sleep,
                      max_workers=2).run(day())
    assert time.monotonic() - started < 15
    extract, hang = result.unit("extract"), result.unit("hang")
    assert extract.outcome == "succeeded" and extract.value == 3
    [nonfatal] = real_ledger.nonfatal_errors(extract.uow_id)  # carried back from the child
    assert nonfatal.message == "1 duplicate key dropped" and nonfatal.attempt == 1
    assert hang.outcome == "unknown-needs-reconcile"
    assert outcomes(real_ledger, hang.uow_id) == ["unknown"]
    [error] = real_ledger.errors(hang.uow_id)
    assert "child process was terminated" in error.message  # local work stopped; remote may not


class ClientTimeout(OSError):
    """Shaped like a client library's timeout (requests.exceptions.Timeout is an OSError)."""


@pytest.mark.parametrize("error", [TimeoutError("read timed out"), ClientTimeout("deadline")])
def test_a_timeout_raised_in_task_code_is_unknown_not_a_blind_retry(
    ledger: Ledger, clock: ManualClock, error: Exception
) -> None:
    """The seeds: a timeout may leave the remote outcome unknown. Listed as transient or not,
    it is reconciled first, never resubmitted blindly."""
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    calls: list[int] = []

    @pipeline.task(retry=RetryPolicy(max_attempts=3, initial_delay=1, jitter="none",
                                     transient=(TimeoutError, OSError)), safe_repeat=True)
    def submit(ctx):  # type: ignore[no-untyped-def]
        calls.append(ctx.attempt)
        raise error

    unit = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).unit("submit")
    assert calls == [1] and unit.outcome == "unknown-needs-reconcile"
    assert [a.outcome for a in ledger.attempts(unit.uow_id or "")] == ["unknown"]


def test_a_task_may_declare_its_timeouts_plain_failures(ledger: Ledger,
                                                        clock: ManualClock) -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    calls: list[int] = []

    @pipeline.task(retry=RetryPolicy(max_attempts=3, initial_delay=1, jitter="none",
                                     transient=(TimeoutError,)),
                   safe_repeat=True, timeout_is_failure=True)
    def local_query(ctx):  # type: ignore[no-untyped-def]
        calls.append(ctx.attempt)
        if len(calls) < 3:
            raise TimeoutError("statement timeout: rolled back, nothing happened")

    unit = Executor(pipeline, ledger, clock=clock,
                    sleep=clock.sleep).run(day()).unit("local_query")
    assert calls == [1, 2, 3] and unit.outcome == "succeeded"


def test_a_timed_out_attempt_keeps_its_pool_slots_while_its_thread_runs(
    real_ledger: Ledger,
) -> None:
    """The thread of a timed-out attempt keeps loading the pool's dependency: its slots stay
    held until it ends, so a light task of the same pool does not start meanwhile."""
    pipeline = Pipeline("pools", schedule=Schedule.daily("UTC"))
    pipeline.pool("warehouse", slots=2)
    ended: dict[str, float] = {}

    @pipeline.task(pool="warehouse", slots=2, timeout=0.2)
    def heavy(ctx):  # type: ignore[no-untyped-def]
        time.sleep(1.0)
        ended["heavy"] = time.monotonic()

    @pipeline.task(pool="warehouse", slots=1, timeout=5)
    def light(ctx):  # type: ignore[no-untyped-def]
        ended["light_started"] = time.monotonic()

    first = Executor(pipeline, real_ledger, pool_poll_interval=0.01).run(day(), ["heavy"])
    assert first.unit("heavy").outcome == "unknown-needs-reconcile"
    assert "heavy" not in ended  # the caller stopped waiting; the thread runs on
    second = Executor(pipeline, real_ledger, pool_poll_interval=0.01).run(day(), ["light"])
    assert second.unit("light").outcome == "succeeded"
    assert ended["light_started"] >= ended["heavy"]  # never ran beside the heavy thread


class _TopOfRange(random.Random):
    """Draws the longest jittered delay every time."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_a_jittered_backoff_that_would_end_past_the_workflow_deadline_is_not_slept(
    ledger: Ledger, clock: ManualClock
) -> None:
    """Found by a probe: the planner checks the backoff without its jitter, so the executor
    slept the drawn delay past the workflow deadline, then refused. The drawn delay is
    checked before sleeping it."""
    calls: list[int] = []
    pipeline = flaky_pipeline(clock, calls, max_attempts=3, jitter="additive",
                              estimated_duration=3.5)
    unit = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep,
                    rng=_TopOfRange()).run(day()).unit("extract")
    # attempt 1: 0-2; without jitter attempt 2 runs 6-9.5 (fits 10), with it 7-10.5: refused
    assert calls == [1] and unit.outcome == "deadline-infeasible"
    assert clock.sleeps == []
    [refused] = [d for d in ledger.decisions(unit.uow_id) if d.not_started]
    assert refused.attempt == 2 and "workflow timeout" in refused.reason


def test_a_jittered_backoff_that_would_end_past_the_delivery_deadline_is_not_slept(
    ledger_url: str,
) -> None:
    """Same for the delivery deadline: 05:58:45 + 40 s backoff + 35 s finishes at 06:00:00
    (fits); the drawn 50 s would finish at 06:00:10."""
    clock = ManualClock(datetime(2026, 12, 1, 5, 58, 45, tzinfo=UTC))
    calls: list[int] = []
    pipeline = deadline_pipeline(calls, jitter="additive")
    with Ledger.open(ledger_url, clock=clock) as ledger:
        unit = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep,
                        rng=_TopOfRange()).run(day()).unit("load")
        assert calls == [1] and clock.sleeps == []
        assert unit.outcome == "deadline-infeasible"
        [refused] = [d for d in ledger.decisions(unit.uow_id) if d.decision != "wait-backoff"]
        assert refused.decision == "deadline-infeasible"


def test_an_attempt_that_waited_for_its_files_writer_is_checked_against_the_deadline_again(
    tmp_path: Path,
) -> None:
    """Found by a probe: two tasks writing one SQLite file, one waited for the other's hold
    on the file, then started after the workflow deadline had passed (its check was made
    before the wait). After the wait, the checks are made again."""
    pipeline = Pipeline("shared_file", schedule=Schedule.daily("UTC"), workflow_timeout=2.0)
    ran: list[str] = []
    spec = f"sqlite:///{tmp_path / 'wh.db'}?partition_column=day#"

    def make(name: str) -> None:
        @pipeline.task(name=name, destination=spec + name, write="replace", safe_repeat=True,
                       estimated_duration=1.0, validation_duration=0.2)
        def task(ctx):  # type: ignore[no-untyped-def]
            ran.append(name)
            time.sleep(1.0)
            return [{"day": ctx.interval.start.date(), "v": 1}]

    make("first")
    make("second")
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        result = Executor(pipeline, ledger, max_workers=2).run(day())
        # whichever took the file first ran; the other cannot finish 1.2 s in what is left
        assert len(ran) == 1, ran
        other = result.unit("second" if ran == ["first"] else "first")
        assert other.outcome == "deadline-infeasible"
        assert ledger.attempts(other.uow_id) == []
