"""Invariants of twice.retry over random policies, failure scripts and deadlines."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.retrying.retrying_helpers import FakeClock, Script
from twice.core.backoff import jitter_bounds
from twice.core.policy import JITTERS, RetryPolicy
from twice.interop.retrying import RetryDeadlineExceeded, retry


class Permanent(Exception):
    pass


@st.composite
def policies(draw: st.DrawFn) -> RetryPolicy:
    initial = draw(st.floats(0.0, 5.0, allow_nan=False))
    return RetryPolicy(
        max_attempts=draw(st.integers(1, 8)),
        initial_delay=initial,
        multiplier=draw(st.floats(1.0, 4.0, allow_nan=False)),
        max_delay=initial + draw(st.floats(0.0, 30.0, allow_nan=False)),
        jitter=draw(st.sampled_from(JITTERS)),
        transient=(ConnectionError,),
    )


errors = st.lists(st.sampled_from([None, "transient", "permanent"]), max_size=12).map(
    lambda kinds: [None if k is None else ConnectionError() if k == "transient" else Permanent()
                   for k in kinds])


@settings(max_examples=300, deadline=None)
@given(policy=policies(), script=errors, seed=st.integers(0, 2**32 - 1))
def test_calls_and_waits_stay_within_the_policy(policy: RetryPolicy, script: list,
                                                seed: int) -> None:
    clock = FakeClock()
    fn = Script(script)
    r = retry(policy, sleep=clock.sleep, rng=random.Random(seed))
    try:
        r.call(fn)
        outcome = "succeeded"
    except ConnectionError:
        outcome = "exhausted"
    except Permanent:
        outcome = "permanent"
    assert 1 <= fn.calls <= policy.max_attempts
    assert sum(clock.sleeps) <= _longest_total(policy)
    assert all(wait > 0 for wait in clock.sleeps)  # a zero wait is not slept
    for row in r.last_attempts[1:]:
        low, high = jitter_bounds(policy, row.number - 1)
        assert low <= row.waited <= high
    # The script decides how it ends: first non-transient entry, or budget exhausted.
    first = next((i for i, e in enumerate(script) if not isinstance(e, ConnectionError)),
                 len(script))
    if first < policy.max_attempts:
        assert fn.calls == first + 1
        assert outcome == ("succeeded" if first >= len(script) or script[first] is None
                           else "permanent")
    else:
        assert (fn.calls, outcome) == (policy.max_attempts, "exhausted")
    assert [a.number for a in r.last_attempts] == list(range(1, fn.calls + 1))
    assert sum(a.waited for a in r.last_attempts) == sum(clock.sleeps)


@settings(max_examples=300, deadline=None)
@given(policy=policies(), transient_failures=st.integers(0, 10),
       budget=st.floats(0.0, 60.0, allow_nan=False),
       duration=st.floats(0.0, 10.0, allow_nan=False), seed=st.integers(0, 2**32 - 1))
def test_every_started_attempt_fits_the_deadline(policy: RetryPolicy, transient_failures: int,
                                                 budget: float, duration: float,
                                                 seed: int) -> None:
    clock = FakeClock()
    fn = Script([ConnectionError()] * transient_failures, clock=clock, duration=duration)
    r = retry(policy, deadline=budget, attempt_duration=duration, sleep=clock.sleep,
              clock=clock, rng=random.Random(seed))
    ends = clock.now + budget
    try:
        r.call(fn)
    except RetryDeadlineExceeded as refused:
        assert refused.attempts[-1].outcome == "not-started"
        assert fn.calls < policy.max_attempts and fn.calls <= transient_failures
    except ConnectionError:
        assert fn.calls == policy.max_attempts
    assert fn.calls <= policy.max_attempts
    assert all(start + duration <= ends for start in fn.starts)
    assert sum(clock.sleeps) <= _longest_total(policy)


def _longest_total(policy: RetryPolicy) -> float:
    """The most the waits may add up to: the plan, or up to 25 % more with additive jitter."""
    return sum(jitter_bounds(policy, n)[1] for n in range(1, policy.max_attempts))
