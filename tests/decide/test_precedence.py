"""Property tests of the pure engine: precedence, timing arithmetic and order independence."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from twice.core.decision import (
    Decision,
    DecisionWindow,
    TaskEvidence,
    TaskState,
    decide,
    decide_task,
)
from twice.core.policy import RetryPolicy


@st.composite
def situations(draw: st.DrawFn) -> tuple[DecisionWindow, TaskEvidence]:
    as_of = draw(st.integers(0, 1000))
    initial = draw(st.integers(1, 50))
    policy = RetryPolicy(max_attempts=draw(st.integers(1, 10)), initial_delay=initial,
                         multiplier=draw(st.integers(1, 5)),
                         max_delay=draw(st.integers(initial, 200)), jitter="none")
    window = DecisionWindow(as_of, draw(st.integers(0, 2000)), draw(st.integers(0, 50)), policy)
    state = draw(st.sampled_from(list(TaskState)))
    observed = draw(st.integers(0, as_of))
    ended = None if state in (TaskState.RUNNING, TaskState.UNKNOWN) else draw(
        st.integers(0, observed))
    task = TaskEvidence(draw(st.text("abc", min_size=1, max_size=4)), state, draw(st.booleans()),
                        draw(st.integers(1, 10)), observed, ended, draw(st.integers(1, 100)),
                        draw(st.integers(0, 100)))
    return window, task


def expected(window: DecisionWindow, task: TaskEvidence) -> Decision:
    """The precedence written as a table, independently of the engine's code."""
    stale = window.as_of - task.observed_at > window.max_observation_age
    by_state = {TaskState.RUNNING: Decision.OBSERVE_RUNNING,
                TaskState.UNKNOWN: Decision.RECONCILE_REMOTE,
                TaskState.SUCCEEDED: Decision.VALIDATE_OUTPUT,
                TaskState.TERMINAL: Decision.REPAIR_CAUSE}
    if stale:
        return Decision.REFRESH_OBSERVATION
    if task.state in by_state:
        return by_state[task.state]
    if task.attempts >= window.policy.max_attempts:
        return Decision.ATTEMPTS_EXHAUSTED
    if not task.safe_repeat:
        return Decision.RECONCILE_EFFECTS
    assert task.last_finished_at is not None
    delays = [window.policy.initial_delay * window.policy.multiplier ** k for k in range(10)]
    delay = min(window.policy.max_delay, delays[task.attempts - 1])
    start = max(window.as_of, task.last_finished_at + delay)
    if start + task.duration + task.validation > window.deadline:
        return Decision.DEADLINE_INFEASIBLE
    return Decision.WAIT_BACKOFF if start > window.as_of else Decision.RETRY_ELIGIBLE


@settings(max_examples=600, deadline=None)
@given(situations())
def test_precedence_matches_the_table(situation: tuple[DecisionWindow, TaskEvidence]) -> None:
    window, task = situation
    result = decide_task(task, window)
    assert result.decision is expected(window, task)
    assert result.reason
    timed = result.decision in (Decision.DEADLINE_INFEASIBLE, Decision.WAIT_BACKOFF,
                                Decision.RETRY_ELIGIBLE)
    assert (result.estimated_finish is not None) == timed
    if timed:
        assert result.earliest_start is not None and result.backoff is not None
        assert result.earliest_start >= window.as_of
        assert result.backoff <= window.policy.max_delay
        assert result.estimated_finish == result.earliest_start + task.duration + task.validation


@settings(max_examples=200, deadline=None)
@given(st.lists(situations(), min_size=1, max_size=8), st.randoms())
def test_decisions_do_not_depend_on_order(
    situations_: list[tuple[DecisionWindow, TaskEvidence]], rnd: random.Random
) -> None:
    window = situations_[0][0]
    tasks = {task.id: task for _, task in situations_}
    # re-anchor every task in the first window (observations must not be in its future)
    tasks = {k: t for k, t in tasks.items() if t.observed_at <= window.as_of}
    if not tasks:
        return
    ordered = list(tasks.values())
    shuffled = ordered[:]
    rnd.shuffle(shuffled)
    assert decide(window, ordered) == decide(window, shuffled)
