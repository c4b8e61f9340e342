"""Real processes racing on one ledger, on SQLite and on PostgreSQL.

Each worker is a separate ``spawn``-ed interpreter with its own engine and connections, as
production workers are; a barrier makes the racing calls overlap.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from tests.ledger import ledger_workers
from tests.ledger.ledger_helpers import make_uow

from twice.ledger import LEASE_TAKEOVER_STATE, Ledger

WORKERS = 4
CTX = multiprocessing.get_context("spawn")


def _collect(processes: list[Any], results: Any, expected: int, timeout: float = 90) -> list[Any]:
    """Read every result before joining (a child blocks until its queue is drained)."""
    items: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(items) < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"workers sent {len(items)} of {expected} results: {items}")
            try:
                item = results.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if not any(process.is_alive() for process in processes):
                    pytest.fail(f"workers exited after {len(items)} of {expected}: {items}")
                continue
            if item[0] == "crash" or (len(item) == 6 and item[5] is not None):
                pytest.fail(f"worker crashed: {item}")
            items.append(item)
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
    assert all(process.exitcode == 0 for process in processes)
    return items


def test_real_processes_race_for_leases_and_attempt_numbers(engine_url: str) -> None:
    fresh = [make_uow(day, task="fresh") for day in (1, 2, 3)]
    expired = [make_uow(day, task="expired") for day in (1, 2, 3)]
    shared = make_uow(9, task="shared")
    with Ledger.open(engine_url) as ledger:
        for uow in [*fresh, *expired, shared]:
            ledger.record_unit(uow)
        for uow in expired:  # a worker that took the lease, started, and vanished
            assert ledger.acquire_lease(uow.uow_id, "ghost", 0.05).acquired
            ledger.begin_attempt(uow.uow_id, holder="ghost")
    time.sleep(0.1)

    attempts_each = 3
    barrier = CTX.Barrier(WORKERS)
    results = CTX.Queue()
    processes = [
        CTX.Process(
            target=ledger_workers.race,
            args=(
                engine_url,
                f"worker-{index}",
                [uow.uow_id for uow in fresh],
                [uow.uow_id for uow in expired],
                shared.uow_id,
                attempts_each,
                barrier,
                results,
            ),
        )
        for index in range(WORKERS)
    ]
    for process in processes:
        process.start()
    expected = WORKERS * (len(fresh) + len(expired) + attempts_each)
    items = _collect(processes, results, expected)

    by_uow: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    numbers = []
    for phase, uow_id, holder, acquired, told, expires_at, taken_from in items:
        if phase == "attempt":
            numbers.append(acquired)
        else:
            by_uow[uow_id].append((phase, holder, acquired, told, expires_at, taken_from))

    with Ledger.open(engine_url) as ledger:
        for uow in [*fresh, *expired]:
            answers = by_uow[uow.uow_id]
            assert len(answers) == WORKERS
            winners = [answer for answer in answers if answer[2]]
            assert len(winners) == 1, f"{uow.uow_id}: {answers}"
            _, winner, _, _, winner_expiry, taken_from = winners[0]
            for _, _, acquired, told, expires_at, _ in answers:
                if not acquired:  # the losers are told who holds it and until when
                    assert (told, expires_at) == (winner, winner_expiry), answers
            stored = ledger.lease(uow.uow_id)
            assert stored is not None and stored.holder == winner
            takeovers = [
                o for o in ledger.observations(uow.uow_id) if o.state == LEASE_TAKEOVER_STATE
            ]
            if uow in expired:
                assert taken_from == "ghost"
                assert len(takeovers) == 1 and takeovers[0].detail["new_holder"] == winner
                assert [a.outcome for a in ledger.attempts(uow.uow_id)] == ["unknown"]
            else:
                assert taken_from is None and takeovers == []
        assert sorted(numbers) == list(range(1, WORKERS * attempts_each + 1))
        assert [a.number for a in ledger.attempts(shared.uow_id)] == sorted(numbers)


def test_real_processes_never_overfill_a_pool(engine_url: str) -> None:
    pool, capacity = "warehouse", 2
    demands = {"heavy": 2, "light-1": 1, "light-2": 1, "light-3": 1}
    barrier = CTX.Barrier(len(demands))
    lock = CTX.Lock()
    in_use = CTX.Value("i", 0, lock=False)
    peak = CTX.Value("i", 0, lock=False)
    results = CTX.Queue()
    processes = [
        CTX.Process(
            target=ledger_workers.use_pool,
            args=(
                engine_url,
                pool,
                capacity,
                slots,
                holder,
                # The pool promises capacity, not fairness: 1-slot workers retrying every
                # millisecond can starve the 2-slot one, so it outlives them to be sure of a turn.
                1.7 if slots == 2 else 1.2,
                barrier,
                lock,
                in_use,
                peak,
                results,
            ),
        )
        for holder, slots in demands.items()
    ]
    for process in processes:
        process.start()
    items = _collect(processes, results, len(demands))

    granted = {holder: count for holder, _, count, _, _, _ in items}
    assert all(overfull == 0 for _, _, _, _, overfull, _ in items), items
    assert peak.value <= capacity
    assert granted["heavy"] >= 1 and sum(granted.values()) > granted["heavy"], granted
    assert sum(refused for _, _, _, refused, _, _ in items) > 0  # there was contention

    # The ledger's own history: at no instant did released holdings overlap beyond capacity.
    with Ledger.open(engine_url) as ledger:
        history = ledger.pool_holdings(pool, active_only=False)
    assert Counter(h.holder for h in history) == Counter(granted)
    changes = sorted(
        [(h.acquired_at, 1, h.slots) for h in history]
        + [(h.released_at, 0, -h.slots) for h in history if h.released_at is not None]
    )
    held = 0
    for _, _, delta in changes:  # releases (0) sort before acquisitions (1) at equal times
        held += delta
        assert held <= capacity
