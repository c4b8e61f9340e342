"""The unit lifecycle as a state machine (``twice.engine.lifecycle``): the engine moves a run only
through declared transitions, and the paths it takes are the ones docs/architecture.md shows.

Every other test in the suite checks the first half too: an undeclared transition raises where
it is made, and the suite's conftest fails any test in which one was attempted.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from tests.executor.helpers import ManualClock, day

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule
from twice.engine import lifecycle
from twice.engine.executor import Executor
from twice.engine.lifecycle import TERMINAL, TRANSITIONS, Lifecycle, LifecycleError, UnitState
from twice.errors import TwiceError
from twice.ledger import Ledger

S = UnitState


@contextmanager
def recorded() -> Iterator[list[tuple[UnitState, UnitState]]]:
    taken: list[tuple[UnitState, UnitState]] = []
    with lifecycle.watching(lambda here, to: taken.append((here, to))):
        yield taken


def test_the_table_declares_every_state_and_only_states() -> None:
    assert set(TRANSITIONS) == set(UnitState)
    for onward in TRANSITIONS.values():
        assert onward <= set(UnitState)
    assert TERMINAL == {S.STOPPED, S.SUPERSEDED}
    reachable, frontier = {S.CLAIMED}, [S.CLAIMED]
    while frontier:
        for to in TRANSITIONS[frontier.pop()]:
            if to not in reachable:
                reachable.add(to)
                frontier.append(to)
    assert reachable == set(UnitState)  # no state the engine can never reach


def test_an_undeclared_transition_is_refused_as_an_internal_error() -> None:
    machine = Lifecycle()
    with pytest.raises(LifecycleError, match="claimed -> verifying"):
        machine.move(S.VERIFYING)
    assert machine.state is S.CLAIMED
    assert lifecycle.refused  # recorded as well
    lifecycle.refused.clear()
    assert not issubclass(LifecycleError, TwiceError)  # a bug in twice, not a user's error
    machine.move(S.STOPPED)
    with pytest.raises(LifecycleError):
        machine.move(S.PLANNING)  # nothing leaves a terminal state
    lifecycle.refused.clear()
    assert machine.ended


def one_task(failures: int) -> Pipeline:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    calls = {"n": 0}
    policy = RetryPolicy(max_attempts=3, initial_delay=1.0, multiplier=2.0, max_delay=5.0,
                         jitter="none", transient=(ConnectionError,))

    @pipeline.task(retry=policy, safe_repeat=True, timeout=5)
    def extract(ctx):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] <= failures:
            raise ConnectionError("reset")
        return {"rows": 1}

    return pipeline


def test_a_success_begun_in_the_claim(ledger: Ledger, clock: ManualClock) -> None:
    executor = Executor(one_task(0), ledger, clock=clock, sleep=clock.sleep)
    with recorded() as taken:
        assert executor.run(day()).ok
    assert taken == [(S.CLAIMED, S.ATTEMPTING), (S.ATTEMPTING, S.VERIFYING),
                     (S.VERIFYING, S.PLANNING), (S.PLANNING, S.STOPPED)]


def test_a_retry_waits_its_backoff_and_starts_again(ledger: Ledger, clock: ManualClock) -> None:
    executor = Executor(one_task(1), ledger, clock=clock, sleep=clock.sleep,
                        rng=random.Random(1))
    with recorded() as taken:
        assert executor.run(day()).ok
    assert taken == [
        (S.CLAIMED, S.ATTEMPTING), (S.ATTEMPTING, S.VERIFYING), (S.VERIFYING, S.PLANNING),
        (S.PLANNING, S.WAITING), (S.WAITING, S.PLANNING), (S.PLANNING, S.STARTING),
        (S.STARTING, S.ATTEMPTING), (S.ATTEMPTING, S.VERIFYING), (S.VERIFYING, S.PLANNING),
        (S.PLANNING, S.STOPPED),
    ]


def test_an_earlier_success_stops_at_the_claim(ledger: Ledger, clock: ManualClock) -> None:
    pipeline = one_task(0)
    Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())
    with recorded() as taken:
        result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())
    assert result.unit("extract").skipped
    assert taken == [(S.CLAIMED, S.STOPPED)]


def test_exhausted_attempts_stop_while_planning(ledger: Ledger, clock: ManualClock) -> None:
    executor = Executor(one_task(9), ledger, clock=clock, sleep=clock.sleep,
                        rng=random.Random(1))
    with recorded() as taken:
        result = executor.run(day())
    assert result.unit("extract").outcome == "attempts-exhausted"
    assert taken[-1] == (S.PLANNING, S.STOPPED)
    assert taken.count((S.STARTING, S.ATTEMPTING)) == 2  # the claim began the first
