"""Jittered backoff for the executor.

The planner waits exactly ``policy.backoff_after(n)`` (no jitter) so its forecasts are
reproducible; the executor spreads real retries with jitter so that many tasks failing together
do not all return at the same instant and hit a recovering service again. Jitter only ever
shortens the planned wait, never lengthens it, so a plan that fits the deadline still fits:

- ``none``: ``v``
- ``full``: ``uniform(0, v)``
- ``equal``: ``v/2 + uniform(0, v/2)``

where ``v = policy.backoff_after(n)`` is already capped at ``max_delay``. The random source is
injectable: pass a seeded ``random.Random`` in tests, leave it out in production.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from twice.policy import RetryPolicy

_shared_rng = random.Random()


def jitter_bounds(policy: RetryPolicy, attempts: int) -> tuple[float, float]:
    """Smallest and largest wait the executor may choose after ``attempts`` tries."""
    planned = policy.backoff_after(attempts)
    if policy.jitter == "full":
        return (0, planned)
    if policy.jitter == "equal":
        return (planned / 2, planned)
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
