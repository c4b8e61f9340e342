"""Jittered backoff for the executor.

The planner waits exactly ``policy.backoff_after(n)`` (no jitter) so its forecasts are
reproducible; the executor spreads real retries with jitter so that many tasks failing together
do not all return at the same instant and hit a recovering service again:

- ``none``: ``v`` (exactly the plan)
- ``full``: ``uniform(0, v)`` (may shorten the wait, never lengthens it)
- ``equal``: ``v/2 + uniform(0, v/2)`` (may shorten it by up to half, never lengthens it)
- ``additive``: ``v + uniform(0, v/4)`` (never shorter than the plan, up to 25 % LONGER: the
  retry decorator of the Indonesian chapter, ``jeda + random.uniform(0, jeda * 0.25)``)

where ``v = policy.backoff_after(n)`` is already capped at ``max_delay`` (additive may pass the
cap by its 25 %). Because additive jitter can lengthen a wait, the executor plans again after
every wait, so the deadline check sees the real start time. The random source is
injectable: pass a seeded ``random.Random`` in tests, leave it out in production.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from twice.core.policy import ADDITIVE_JITTER_FRACTION, RetryPolicy

_shared_rng = random.Random()


def jitter_bounds(policy: RetryPolicy, attempts: int) -> tuple[float, float]:
    """Smallest and largest wait the executor may choose after ``attempts`` tries."""
    planned = policy.backoff_after(attempts)
    if policy.jitter == "full":
        return (0, planned)
    if policy.jitter == "equal":
        return (planned / 2, planned)
    if policy.jitter == "additive":
        return (planned, planned * (1 + ADDITIVE_JITTER_FRACTION))
    return (planned, planned)


def jittered_delay(
    policy: RetryPolicy, attempts: int, rng: random.Random | None = None
) -> float:
    """The wait after ``attempts`` tries, with the policy's jitter drawn from ``rng``."""
    low, high = jitter_bounds(policy, attempts)
    if low == high:
        return high
    # uniform(a, b) may round to just past b; clamp so the cap is never exceeded.
    return min(high, (rng or _shared_rng).uniform(low, high))


def delays(policy: RetryPolicy, rng: random.Random | None = None) -> Iterator[float]:
    """The waits between all attempts if every one fails: ``max_attempts - 1`` values."""
    for attempts in range(1, policy.max_attempts):
        yield jittered_delay(policy, attempts, rng)
