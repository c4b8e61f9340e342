"""Entry points of the worker processes the concurrency tests spawn.

Each worker opens its own ``Ledger`` (as a real worker would), waits at a barrier so that the
racing calls really overlap, and reports what the ledger told it through a queue.
"""

from __future__ import annotations

import time
from typing import Any

from twice.ledger import Ledger


def race(
    url: str,
    holder: str,
    fresh: list[str],
    expired: list[str],
    shared: str,
    attempts_each: int,
    barrier: Any,
    results: Any,
) -> None:
    """Race the other workers for fresh leases, expired leases and attempt numbers."""
    try:
        with Ledger.open(url) as ledger:
            for phase, uow_ids in (("fresh", fresh), ("expired", expired)):
                for uow_id in uow_ids:
                    barrier.wait(timeout=60)
                    got = ledger.acquire_lease(uow_id, holder, 60)
                    results.put(
                        (
                            phase,
                            uow_id,
                            holder,
                            got.acquired,
                            got.holder,
                            got.expires_at,
                            got.taken_over_from,
                        )
                    )
            barrier.wait(timeout=60)
            for _ in range(attempts_each):
                attempt = ledger.begin_attempt(shared, holder=holder)
                results.put(("attempt", shared, holder, attempt.number, None, None, None))
    except BaseException as exc:  # report instead of dying silently
        results.put(("crash", "", holder, repr(exc), None, None, None))
        raise


def use_pool(
    url: str,
    pool: str,
    capacity: int,
    slots: int,
    holder: str,
    seconds: float,
    barrier: Any,
    lock: Any,
    in_use: Any,
    peak: Any,
    results: Any,
) -> None:
    """Acquire, hold briefly and release pool slots for ``seconds``, tracking real overlap.

    ``in_use`` counts slots held across all processes (incremented only after the ledger
    granted them, decremented before releasing), so it can only under-count what the ledger
    granted: if it ever exceeds the capacity, the ledger over-granted.
    """
    granted = refused = overfull = 0
    try:
        with Ledger.open(url) as ledger:  # the workers migrate the empty database together
            barrier.wait(timeout=60)
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                if not ledger.acquire_pool_slots(pool, capacity, slots, holder, 30):
                    refused += 1
                    time.sleep(0.001)
                    continue
                granted += 1
                with lock:
                    in_use.value += slots
                    peak.value = max(peak.value, in_use.value)
                if sum(h.slots for h in ledger.pool_holdings(pool)) > capacity:
                    overfull += 1
                time.sleep(0.005)
                with lock:
                    in_use.value -= slots
                ledger.release_pool_slots(pool, holder)
        results.put((holder, slots, granted, refused, overfull, None))
    except BaseException as exc:
        results.put((holder, slots, granted, refused, overfull, repr(exc)))
        raise


def acquire_tokens(
    url: str, holder: str, uow_ids: list[str], rounds: int, barrier: Any, results: Any
) -> None:
    """Acquire, release and re-acquire leases on many units, reporting every token granted.

    Each worker walks the units in its own order; a unit held by another worker is skipped.
    Every acquisition that is not a renewal must get a token larger than any the worker saw
    before (its own earlier acquisitions happened before, so their tokens are smaller).
    """
    granted: list[tuple[str, int]] = []
    try:
        with Ledger.open(url) as ledger:
            barrier.wait(timeout=60)
            for _ in range(rounds):
                for uow_id in uow_ids:
                    got = ledger.acquire_lease(uow_id, holder, 60)
                    if got.acquired:
                        granted.append((uow_id, got.token))
                        ledger.release_lease(uow_id, holder)
        results.put((holder, granted, None))
    except BaseException as exc:
        results.put((holder, granted, repr(exc)))
        raise
