"""One Airflow try = one twice attempt, on a real SQLite ledger (no Airflow needed).

Drives ``twice.drivers.airflow.run_try`` the way Airflow's retry loop would (try_number growing,
``max_tries`` raised on a clear) and checks the Executor options ``attempts_per_call`` and
``continue_run`` against the ledger: the run's budget, backoff and safe-repeat rules span tries.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twice.core.interval import Interval
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, Task, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.drivers.airflow import (
    IntervalRefused,
    TryOutcome,
    first_try_of_budget,
    interval_from_airflow,
    run_try,
)
from twice.engine.evidence import RUN_STARTED
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.testing import ManualClock

DAY = Interval(datetime(2026, 11, 4, tzinfo=UTC), datetime(2026, 11, 5, tzinfo=UTC))
START = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    """Time shared by the ledger and the executor; moves only when slept on or advanced."""
    return ManualClock(START)


@pytest.fixture
def ledger(tmp_path: Path, clock: ManualClock) -> Iterator[Ledger]:
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock) as opened:
        yield opened


class Airflow:
    """Airflow's bookkeeping for one task instance: try_number and max_tries (clear-aware)."""

    def __init__(self, pipeline: Pipeline, task: str, ledger: Ledger, clock: ManualClock) -> None:
        self.pipeline, self.task, self.ledger, self.clock = pipeline, task, ledger, clock
        self.retries = pipeline.get_task(task).retry.max_attempts - 1
        self.try_number = 0
        self.max_tries = self.retries
        self.outcomes: list[TryOutcome] = []

    def clear(self) -> None:
        self.max_tries = self.try_number + self.retries  # what Airflow's clear does

    def try_once(self, wait: float = 0.0) -> TryOutcome:
        self.clock.advance(wait)
        self.try_number += 1
        outcome = run_try(
            self.pipeline, self.task, self.ledger, DAY,
            holder=f"airflow:d.{self.task}:run:try-{self.try_number}",
            continue_run=not first_try_of_budget(self.try_number, self.max_tries, self.retries),
            clock=self.clock, sleep=self.clock.sleep,
        )
        self.outcomes.append(outcome)
        return outcome

    def run(self, waits: float = 0.0) -> list[str]:
        """Airflow's loop: retry while twice says so and Airflow has tries left."""
        first = self.try_number
        while True:
            outcome = self.try_once(0.0 if self.try_number == first else waits)
            if outcome.verdict != "retry" or self.try_number > self.max_tries:
                return [o.verdict for o in self.outcomes]


def _pipeline(fn: Any, *, max_attempts: int = 3, safe_repeat: bool = True, delay: float = 10.0,
              destination: str = "") -> Pipeline:
    pipeline = Pipeline("af", schedule=Schedule.daily("UTC"))
    policy = RetryPolicy(max_attempts=max_attempts, initial_delay=delay, multiplier=1,
                         max_delay=delay, jitter="none", transient=(ConnectionError,))
    pipeline.add_task(
        Task.create(fn, name="t", retry=policy, safe_repeat=safe_repeat, destination=destination)
    )
    return pipeline


def _outcomes(ledger: Ledger, outcome: TryOutcome) -> list[str]:
    return [a.outcome for a in ledger.attempts(outcome.unit.uow_id or "")]


def _runs(ledger: Ledger, outcome: TryOutcome) -> int:
    uow = outcome.unit.uow_id or ""
    return sum(o.state == RUN_STARTED for o in ledger.observations(uow))


def test_transient_then_success_is_one_run_across_two_tries(
    ledger: Ledger, clock: ManualClock
) -> None:
    def flaky(ctx: TaskContext) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("reset")

    airflow = Airflow(_pipeline(flaky), "t", ledger, clock)
    assert airflow.run(waits=10.0) == ["retry", "succeeded"]
    last = airflow.outcomes[-1]
    assert _outcomes(ledger, last) == ["failed-transient", "succeeded"]
    assert _runs(ledger, last) == 1  # continue_run: try 2 continued try 1's run
    holders = [a.holder for a in ledger.attempts(last.unit.uow_id or "")]
    assert holders == ["airflow:d.t:run:try-1", "airflow:d.t:run:try-2"]
    assert [o.unit.attempts for o in airflow.outcomes] == [1, 1]  # one attempt per try
    assert airflow.outcomes[0].unit.next_decision == "wait-backoff"
    assert clock.sleeps == []  # Airflow already waited the policy delay: twice adds nothing


def test_twice_waits_the_backoff_airflow_did_not(ledger: Ledger, clock: ManualClock) -> None:
    def flaky(ctx: TaskContext) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("reset")

    airflow = Airflow(_pipeline(flaky, delay=10.0), "t", ledger, clock)
    assert airflow.run(waits=4.0) == ["retry", "succeeded"]
    assert clock.sleeps == [pytest.approx(6.0)]  # the rest of the 10 s policy delay


def test_budget_spans_tries_and_a_clear_opens_a_fresh_one(
    ledger: Ledger, clock: ManualClock
) -> None:
    def broken(ctx: TaskContext) -> None:
        raise ConnectionError("still down")

    airflow = Airflow(_pipeline(broken, max_attempts=3), "t", ledger, clock)
    assert airflow.run(waits=10.0) == ["retry", "retry", "fail"]
    third = airflow.outcomes[-1]
    assert third.unit.outcome == "attempts-exhausted"
    assert third.unit.next_decision == "attempts-exhausted"
    assert _outcomes(ledger, third) == ["failed-transient"] * 3
    # the task is cleared: Airflow grants a fresh budget, so does twice (a new run)
    airflow.clear()
    fourth = airflow.try_once(wait=10.0)
    assert fourth.verdict == "retry" and not fourth.continued_run
    assert _runs(ledger, fourth) == 2
    assert [a.number for a in ledger.attempts(fourth.unit.uow_id or "")] == [1, 2, 3, 4]


def test_without_continue_run_every_try_gets_a_fresh_budget(ledger: Ledger,
                                                            clock: ManualClock) -> None:
    """Why continue_run exists: one run per call would never exhaust the budget."""
    def broken(ctx: TaskContext) -> None:
        raise ConnectionError("still down")

    pipeline = _pipeline(broken, max_attempts=2)
    verdicts = []
    for n in range(4):
        clock.advance(10)
        outcome = run_try(pipeline, "t", ledger, DAY, holder=f"h{n}", continue_run=False,
                          clock=clock, sleep=clock.sleep)
        verdicts.append(outcome.verdict)
    assert verdicts == ["retry"] * 4
    assert _runs(ledger, outcome) == 4


def test_permanent_error_fails_without_retry(ledger: Ledger, clock: ManualClock) -> None:
    def wrong(ctx: TaskContext) -> None:
        raise KeyError("column amount")

    airflow = Airflow(_pipeline(wrong), "t", ledger, clock)
    assert airflow.run() == ["fail"]
    outcome = airflow.outcomes[0]
    assert outcome.unit.outcome == "failed-permanent"
    assert "Not retried by Airflow" in outcome.message and "KeyError" in outcome.message
    assert _outcomes(ledger, outcome) == ["failed-permanent"]


def test_unsafe_repeat_stops_after_a_failed_attempt(ledger: Ledger, clock: ManualClock) -> None:
    def flaky(ctx: TaskContext) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("reset")

    airflow = Airflow(_pipeline(flaky, safe_repeat=False), "t", ledger, clock)
    verdicts = airflow.run(waits=10.0)
    assert verdicts[-1] == "fail"
    assert airflow.outcomes[-1].unit.outcome == "reconcile-effects"
    assert _outcomes(ledger, airflow.outcomes[-1]) == ["failed-transient"]  # no blind retry


def test_rerun_after_success_rewrites_nothing(
    ledger: Ledger, clock: ManualClock, tmp_path: Path
) -> None:
    spec = f"sqlite:///{tmp_path / 'wh.db'}?partition_column=day&key_columns=id#positions"
    calls: list[int] = []

    def write(ctx: TaskContext) -> None:
        calls.append(ctx.attempt)
        rows = [{"id": i, "day": ctx.interval.start.date(), "v": i * i} for i in range(4)]
        with open_destination(ctx.destination) as dest:
            dest.replace_partition(rows, ctx.interval)

    pipeline = _pipeline(write, destination=spec)
    first = Airflow(pipeline, "t", ledger, clock)
    assert first.run() == ["succeeded"]
    again = Airflow(pipeline, "t", ledger, clock)  # a new DAG run for the same interval
    assert again.run() == ["succeeded"]
    assert calls == [1]
    assert again.outcomes[0].unit.attempts == 0
    # The engine verified the output once, before the first try counted as succeeded (the
    # same rule as every driver); the second DAG run executed and recorded nothing new.
    assert first.outcomes[0].partition is not None
    assert first.outcomes[0].partition["verdict"] == "new"
    assert first.outcomes[0].partition["source"] == "commit record"
    (latest,) = [f for f in ledger.latest_fingerprints() if f.partition == DAY.label]
    versions = ledger.fingerprints(latest.destination, DAY.label)
    assert [v.version for v in versions] == [1] and versions[0].row_count == 4
    assert again.outcomes[0].partition is None


def test_attempts_per_call_is_validated(ledger: Ledger) -> None:
    pipeline = _pipeline(lambda ctx: None)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="attempts_per_call"):
            Executor(pipeline, ledger, attempts_per_call=bad)  # type: ignore[arg-type]


def test_attempts_per_call_two_makes_two_attempts_per_call(ledger: Ledger,
                                                           clock: ManualClock) -> None:
    def broken(ctx: TaskContext) -> None:
        raise ConnectionError("down")

    pipeline = _pipeline(broken, max_attempts=5, delay=1.0)
    executor = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep, attempts_per_call=2,
                        continue_run=True)
    first = executor.run(DAY).unit("t")
    assert (first.outcome, first.attempts, first.total_attempts) == ("attempts-exhausted", 2, 2)
    second = executor.run(DAY).unit("t")
    assert (second.attempts, second.total_attempts) == (2, 4)
    third = executor.run(DAY).unit("t")  # the policy's 5 attempts end inside this call
    assert (third.attempts, third.total_attempts) == (1, 5)
    assert third.next_decision == "attempts-exhausted"


# --------------------------------------------------------------------------- the interval


def test_zero_width_interval_is_refused_with_the_reason() -> None:
    pipeline = _pipeline(lambda ctx: None)
    at = datetime(2026, 11, 5, tzinfo=UTC)
    with pytest.raises(IntervalRefused, match="zero-width") as info:
        interval_from_airflow(pipeline, at, at)
    assert "data_interval_start == data_interval_end" in str(info.value)
    assert "CronDataIntervalTimetable" in str(info.value)


def test_off_grid_missing_and_naive_intervals_are_refused() -> None:
    pipeline = _pipeline(lambda ctx: None)
    start = datetime(2026, 11, 4, 6, tzinfo=UTC)
    with pytest.raises(IntervalRefused, match="not an interval of the daily"):
        interval_from_airflow(pipeline, start, start + timedelta(days=1))
    with pytest.raises(IntervalRefused, match="no data interval"):
        interval_from_airflow(pipeline, None, start)
    with pytest.raises(IntervalRefused, match="timezone-aware"):
        interval_from_airflow(pipeline, datetime(2026, 11, 4), datetime(2026, 11, 5))
    assert interval_from_airflow(pipeline, DAY.start, DAY.end) == DAY


@given(st.integers(0, 10), st.integers(0, 10))
def test_first_try_of_budget_matches_airflow_clears(retries: int, clears: int) -> None:
    """Simulate Airflow: a budget of retries+1 tries, cleared ``clears`` times."""
    try_number, max_tries = 0, retries
    firsts = []
    for _ in range(clears + 1):
        for position in range(retries + 1):
            try_number += 1
            firsts.append((first_try_of_budget(try_number, max_tries, retries), position == 0))
        max_tries = try_number + retries
    assert all(got == expected for got, expected in firsts)


def test_a_try_holds_its_lease_under_this_process(tmp_path) -> None:
    """Found by a probe: a try's holder named no process, so a try killed on this host held
    its unit for the whole lease and Airflow's retries ran out on it. The holder starts with
    this host and pid (a gone process frees the unit at once), and fits the ledger's column
    whatever the length of Airflow's ids."""
    import os
    import socket

    from twice.core.unit import UnitOfWork
    from twice.drivers.airflow.runner import MAX_HOLDER, try_holder
    from twice.ledger.lease_holders import exited

    span = Interval(datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))

    holder = try_holder("dag", "extract", "scheduled__2026-11-30", 2)
    assert holder == (f"{socket.gethostname()}:{os.getpid()}:airflow:dag.extract:"
                      "scheduled__2026-11-30:try-2")
    assert not exited(holder)  # this process
    long = try_holder("d" * 250, "t" * 250, "r" * 250, 1)
    assert len(long) == MAX_HOLDER and long != try_holder("d" * 250, "t" * 250, "r" * 250, 2)
    with Ledger.open(tmp_path / "l.db") as ledger:  # the id fits where the ledger keeps it
        uow = ledger.record_unit(UnitOfWork("p", "t", span, "", "1")).uow_id
        assert ledger.begin_attempt(uow, holder=long).holder == long


def test_a_try_for_an_interval_that_has_not_ended_is_refused_not_retried(
    ledger: Ledger, clock: ManualClock
) -> None:
    """Found by a probe: a DAG run for a future interval ended in an OpenIntervalError
    traceback, which Airflow retried until the tries ran out; ``twice run``, ``backfill`` and
    ``worker`` refuse it as bad input. The try is refused the way the operator fails it."""
    ran: list[int] = []
    pipeline = Pipeline("early", schedule=Schedule.daily("UTC"))

    @pipeline.task(safe_repeat=True)
    def t(ctx: TaskContext) -> None:
        ran.append(ctx.attempt)

    future = Interval(datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    with pytest.raises(IntervalRefused, match="has not ended"):
        run_try(pipeline, "t", ledger, future, holder="airflow:d.t:run:try-1",
                continue_run=False, clock=clock, sleep=clock.sleep)
    assert ran == [] and ledger.units() == []
