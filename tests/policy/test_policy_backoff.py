"""Executor jitter: bounded by the plan, reproducible with a seed, and actually random."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from twice.core.backoff import delays, jitter_bounds, jittered_delay
from twice.core.policy import RetryPolicy
from twice.interop.translations import to_prefect

delay_values = st.one_of(st.integers(0, 600), st.floats(0, 600, allow_nan=False))


@st.composite
def policies(draw: st.DrawFn, jitter: str | None = None) -> RetryPolicy:
    initial = draw(delay_values)
    return RetryPolicy(
        max_attempts=draw(st.integers(1, 10)),
        initial_delay=initial,
        multiplier=draw(st.one_of(st.integers(1, 5), st.floats(1, 5))),
        max_delay=initial + draw(delay_values),
        jitter=jitter or draw(st.sampled_from(["none", "full", "equal"])),
    )


@st.composite
def policy_and_attempts(draw: st.DrawFn, jitter: str | None = None) -> tuple[RetryPolicy, int]:
    policy = draw(policies(jitter))
    return policy, draw(st.integers(1, max(1, policy.max_attempts)))


@given(policy_and_attempts("full"), st.integers())
def test_full_jitter_stays_within_zero_and_the_capped_plan(case: tuple[RetryPolicy, int],
                                                           seed: int) -> None:
    policy, attempts = case
    planned = policy.backoff_after(attempts)
    delay = jittered_delay(policy, attempts, random.Random(seed))
    assert 0 <= delay <= planned <= policy.max_delay


@given(policy_and_attempts("equal"), st.integers())
def test_equal_jitter_stays_within_half_and_all_of_the_plan(case: tuple[RetryPolicy, int],
                                                            seed: int) -> None:
    policy, attempts = case
    planned = policy.backoff_after(attempts)
    delay = jittered_delay(policy, attempts, random.Random(seed))
    assert planned / 2 <= delay <= planned <= policy.max_delay


@given(policy_and_attempts("none"))
def test_no_jitter_is_exactly_the_plan(case: tuple[RetryPolicy, int]) -> None:
    policy, attempts = case
    assert jittered_delay(policy, attempts, random.Random(0)) == policy.backoff_after(attempts)


@given(policies(), st.integers())
def test_never_exceeds_max_delay_and_matches_its_bounds(policy: RetryPolicy, seed: int) -> None:
    for attempts, delay in enumerate(delays(policy, random.Random(seed)), start=1):
        low, high = jitter_bounds(policy, attempts)
        assert low <= delay <= high <= policy.max_delay


@given(policies(), st.integers())
def test_same_seed_same_delays(policy: RetryPolicy, seed: int) -> None:
    first = list(delays(policy, random.Random(seed)))
    assert first == list(delays(policy, random.Random(seed)))
    assert len(first) == policy.max_attempts - 1


@given(st.sampled_from(["full", "equal"]), st.integers(1, 100), st.integers())
def test_jitter_is_really_applied_across_seeds(jitter: str, initial: int, base_seed: int) -> None:
    """Unlike Prefect 3, whose retry_jitter_factor is accepted and ignored, the waits differ."""
    policy = RetryPolicy(max_attempts=2, initial_delay=initial, max_delay=initial, jitter=jitter)
    waits = {jittered_delay(policy, 1, random.Random(base_seed + i)) for i in range(20)}
    assert len(waits) > 1


def test_prefect_translation_says_its_jitter_is_ignored() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay=4, max_delay=12, jitter="full")
    translation = to_prefect(policy)
    assert any("ignores it" in difference for difference in translation.differences)
    assert {row.tool_wait.spread for row in translation.rows()} == {"fixed"}


def test_int_policy_without_jitter_gives_exact_int_delays() -> None:
    """The lab-compatible engine needs exact integer arithmetic: 4, 8, 12, never 8.0."""
    policy = RetryPolicy(max_attempts=4, initial_delay=4, multiplier=2, max_delay=12,
                         jitter="none")
    waits = list(delays(policy))
    assert waits == [4, 8, 12]
    assert all(type(wait) is int for wait in waits)


def test_default_random_source_is_used_when_none_is_given() -> None:
    policy = RetryPolicy(max_attempts=2, initial_delay=10, max_delay=10, jitter="full")
    assert 0 <= jittered_delay(policy, 1) <= 10
