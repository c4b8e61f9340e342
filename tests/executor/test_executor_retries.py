"""Transient failures are retried with jittered backoff; permanent ones stop at once; budgets end.

Every test runs real task functions against a real SQLite ledger, then checks that the ledger
tells the true story and that the planner over the ledger agrees with what the executor did.
"""

from __future__ import annotations

import itertools
import random
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.executor.helpers import ManualClock, day, decisions, no_sleep, observed, outcomes
from tests.executor.helpers import planner_decisions as planner

from twice.core.backoff import jitter_bounds, jittered_delay
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger


def flaky_pipeline(failures: int, policy: RetryPolicy, *, safe_repeat: bool = True,
                   error: type[Exception] = ConnectionError) -> tuple[Pipeline, Counter[str]]:
    """A one-task pipeline whose task raises ``error`` ``failures`` times per interval."""
    calls: Counter[str] = Counter()
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=policy, safe_repeat=safe_repeat, timeout=5)
    def extract(ctx):  # type: ignore[no-untyped-def]
        calls[ctx.interval.label] += 1
        if calls[ctx.interval.label] <= failures:
            raise error(f"positions db reset the connection (call {calls[ctx.interval.label]})")
        ctx.nonfatal("3 rows with a null account skipped", 3)
        return {"rows": 120}

    return pipeline, calls


def test_transient_failures_then_success(ledger: Ledger, ledger_url: str,
                                         clock: ManualClock) -> None:
    policy = RetryPolicy(max_attempts=4, initial_delay=2.0, multiplier=2.0, max_delay=30.0,
                         jitter="full", transient=(ConnectionError,))
    pipeline, calls = flaky_pipeline(2, policy)
    executor = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep, rng=random.Random(7))
    result = executor.run(day())

    unit = result.unit("extract")
    assert result.ok and unit.outcome == "succeeded"
    assert unit.attempts == 3 and calls[day().label] == 3
    assert unit.value == {"rows": 120}
    uow = unit.uow_id
    assert outcomes(ledger, uow) == ["failed-transient", "failed-transient", "succeeded"]
    errors = ledger.errors(uow)
    assert [(e.error_class, e.classification, e.attempt) for e in errors] == [
        ("ConnectionError", "transient", 1), ("ConnectionError", "transient", 2)
    ]
    assert [(n.message, n.count, n.attempt) for n in ledger.nonfatal_errors(uow)] == [
        ("3 rows with a null account skipped", 3, 3)
    ]
    # The planner was consulted before each retry and said "wait for the backoff".
    recorded = ledger.decisions(uow)
    assert [d.decision for d in recorded] == ["wait-backoff", "wait-backoff"]
    assert [d.detail["backoff"] for d in recorded] == [2.0, 4.0]
    # Backoff = policy delay with full jitter from the seeded rng: never above the delay.
    expected_rng = random.Random(7)
    expected = [jittered_delay(policy, n, expected_rng) for n in (1, 2)]
    assert [d.detail["jittered_delay"] for d in recorded] == expected
    assert clock.sleeps == pytest.approx(expected, abs=1e-6)  # waits go through timedelta
    for n, waited in enumerate(clock.sleeps, start=1):
        low, high = jitter_bounds(policy, n)
        assert low <= waited <= high
    assert "run-started" in observed(ledger, uow, "executor")
    assert planner(ledger_url, clock())["extract"]["decision"] == "validate-output"


def test_permanent_error_stops_after_one_attempt(ledger: Ledger, ledger_url: str,
                                                 clock: ManualClock) -> None:
    policy = RetryPolicy(max_attempts=5, initial_delay=0.01, transient=(ConnectionError,))
    pipeline, calls = flaky_pipeline(10, policy, error=ValueError)
    result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())

    unit = result.unit("extract")
    assert not result.ok and unit.outcome == "failed-permanent"
    assert unit.attempts == 1 and sum(calls.values()) == 1 and clock.sleeps == []
    assert outcomes(ledger, unit.uow_id) == ["failed-permanent"]
    [error] = ledger.errors(unit.uow_id)
    assert (error.error_class, error.classification) == ("ValueError", "permanent")
    assert decisions(ledger, unit.uow_id) == ["repair-cause"]
    assert unit.next_decision == "repair-cause"
    assert planner(ledger_url, clock())["extract"]["decision"] == "repair-cause"


def test_attempts_exhausted(ledger: Ledger, ledger_url: str, clock: ManualClock) -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay=1.0, jitter="none",
                         transient=(ConnectionError,))
    pipeline, _ = flaky_pipeline(99, policy)
    result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())

    unit = result.unit("extract")
    assert unit.outcome == "attempts-exhausted" and unit.attempts == 3
    assert outcomes(ledger, unit.uow_id) == ["failed-transient"] * 3
    assert decisions(ledger, unit.uow_id) == ["wait-backoff", "wait-backoff",
                                              "attempts-exhausted"]
    assert clock.sleeps == [1.0, 2.0]  # no jitter: exactly the policy's delays
    row = planner(ledger_url, clock())["extract"]
    assert row["decision"] == "attempts-exhausted"
    assert row["reason"] == "3 of 3 attempts used (the first try counts)"


def test_unsafe_repeat_is_not_retried_blindly(ledger: Ledger, ledger_url: str,
                                              clock: ManualClock) -> None:
    """A transient error on a task not asserted safe to repeat: reconcile effects first."""
    policy = RetryPolicy(max_attempts=3, initial_delay=0.01, transient=(ConnectionError,))
    pipeline, calls = flaky_pipeline(1, policy, safe_repeat=False)
    unit = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).unit("extract")
    assert unit.outcome == "reconcile-effects" and sum(calls.values()) == 1
    assert decisions(ledger, unit.uow_id) == ["reconcile-effects"]
    assert planner(ledger_url, clock())["extract"]["decision"] == "reconcile-effects"


def test_rerun_gets_a_fresh_budget_and_attempt_numbers_keep_growing(
    ledger: Ledger, ledger_url: str, clock: ManualClock
) -> None:
    policy = RetryPolicy(max_attempts=2, initial_delay=1.0, jitter="none",
                         transient=(ConnectionError,))
    pipeline, _ = flaky_pipeline(3, policy)
    executor = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep)
    first = executor.run(day()).unit("extract")
    assert first.outcome == "attempts-exhausted" and first.total_attempts == 2
    second = executor.run(day()).unit("extract")
    assert second.outcome == "succeeded"
    assert (second.attempts, second.total_attempts) == (2, 4)
    # Backoff restarted with the run (1 s again), unlike Airflow's cleared try_number.
    assert clock.sleeps == [1.0, 1.0]
    third = executor.run(day()).unit("extract")
    assert third.outcome == "succeeded" and third.attempts == 0
    assert "already succeeded in attempt 4" in third.notes[0]
    assert [a.number for a in ledger.attempts(first.uow_id)] == [1, 2, 3, 4]


_counter = itertools.count()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(failures=st.integers(min_value=0, max_value=5),
       max_attempts=st.integers(min_value=1, max_value=5))
def test_property_attempts_made(failures: int, max_attempts: int) -> None:
    """For k transient failures and m max attempts: min(k + 1, m) attempts, success iff k < m."""
    policy = RetryPolicy(max_attempts=max_attempts, initial_delay=0.01,
                         transient=(ConnectionError,))
    pipeline, calls = flaky_pipeline(failures, policy)
    interval = day(-next(_counter))  # past days: an open interval is refused by default
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'ledger.db'}"
        with Ledger.open(url) as ledger:
            unit = Executor(pipeline, ledger, sleep=no_sleep).run(interval).unit("extract")
            recorded = outcomes(ledger, unit.uow_id)
        verdict = planner(url)["extract"]["decision"]
    assert unit.attempts == len(recorded) == calls[interval.label] == min(failures + 1,
                                                                         max_attempts)
    assert (unit.outcome == "succeeded") == (failures < max_attempts)
    expected = "validate-output" if failures < max_attempts else "attempts-exhausted"
    assert verdict == expected
    assert recorded[-1] == ("succeeded" if failures < max_attempts else "failed-transient")
