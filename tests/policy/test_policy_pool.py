"""Weighted slot pools with real threads: capacity, first-come-first-served, ledger adapter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twice.engine.pool import (
    LedgerPool,
    Pool,
    PoolError,
    PoolRegistry,
    PoolTimeout,
    SlotPool,
)


@dataclass
class Usage:
    """Slots in use as the tasks themselves see them, measured independently of the pool."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    now: int = 0
    peak: int = 0
    ran: int = 0

    @contextmanager
    def occupy(self, slots: int) -> Iterator[None]:
        with self.lock:
            self.now += slots
            self.peak = max(self.peak, self.now)
        try:
            yield
        finally:
            with self.lock:
                self.now -= slots
                self.ran += 1


def run_tasks(pool: SlotPool, weights: list[int], workers: int, hold: float = 0.005) -> Usage:
    usage = Usage()

    def task(slots: int) -> None:
        with pool.acquire(slots, timeout=10), usage.occupy(slots):
            time.sleep(hold)

    with ThreadPoolExecutor(max_workers=workers) as executor:
        for future in [executor.submit(task, w) for w in weights]:
            future.result()
    return usage


def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    ends = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < ends, "condition not reached in time"
        time.sleep(0.002)


# -- capacity -----------------------------------------------------------------------------------


def test_free_workers_never_create_slots() -> None:
    """Sixteen workers, a 2-slot pool: never more than 2 slots in use at once."""
    pool = Pool("positions-db", 2)
    usage = run_tasks(pool, [1, 2, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1], workers=16)
    assert usage.ran == 12
    assert usage.peak <= 2
    assert usage.peak == 2, "two light tasks should have shared the pool at some point"
    assert pool.in_use == 0 and pool.waiting == 0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4).flatmap(
    lambda capacity: st.tuples(st.just(capacity),
                               st.lists(st.integers(1, capacity), min_size=1, max_size=12))))
def test_random_weights_never_exceed_capacity(case: tuple[int, list[int]]) -> None:
    capacity, weights = case
    pool = Pool("api", capacity)
    usage = run_tasks(pool, weights, workers=8, hold=0.001)
    assert usage.ran == len(weights)
    assert usage.peak <= capacity
    assert pool.in_use == 0


def test_slots_beyond_capacity_are_refused_clearly() -> None:
    pool = Pool("positions-db", 2)
    with pytest.raises(PoolError, match=r"'positions-db' has 2 slot\(s\) but the task asks for 3"):
        with pool.acquire(3):
            pass
    for bad in (0, -1, 1.5, True):
        with pytest.raises(PoolError, match="slots must be an integer >= 1"):
            with pool.acquire(bad):  # type: ignore[arg-type]
                pass


@pytest.mark.parametrize("capacity", [0, -2, 1.0, True])
def test_capacity_must_be_a_positive_integer(capacity: int) -> None:
    with pytest.raises(PoolError, match="capacity must be an integer >= 1"):
        Pool("db", capacity)


# -- heavy tasks and fairness -------------------------------------------------------------------


def test_heavy_task_holding_both_slots_blocks_light_tasks() -> None:
    pool = Pool("positions-db", 2)
    with pool.acquire(2):
        with pytest.raises(PoolTimeout, match=r"not granted within 0\.05 s"):
            with pool.acquire(1, timeout=0.05):
                pass
    with pool.acquire(1, timeout=0.05):  # and gets in once the heavy task is done
        assert pool.in_use == 1


def test_first_come_first_served_no_light_task_overtakes_a_waiting_heavy_one() -> None:
    pool = Pool("positions-db", 2)
    order: list[str] = []
    release_a, release_heavy = threading.Event(), threading.Event()

    def light_a() -> None:
        with pool.acquire(1):
            order.append("a")
            release_a.wait(5)

    def heavy() -> None:
        with pool.acquire(2):
            order.append("heavy")
            release_heavy.wait(5)

    def light_b() -> None:
        with pool.acquire(1):
            order.append("b")

    threads = [threading.Thread(target=light_a)]
    threads[0].start()
    wait_until(lambda: order == ["a"])
    threads.append(threading.Thread(target=heavy))
    threads[1].start()
    wait_until(lambda: pool.waiting == 1)
    threads.append(threading.Thread(target=light_b))
    threads[2].start()
    wait_until(lambda: pool.waiting == 2)
    time.sleep(0.05)
    assert order == ["a"], "b must not take the free slot ahead of the waiting heavy task"
    release_a.set()
    wait_until(lambda: order == ["a", "heavy"])
    time.sleep(0.05)
    assert order == ["a", "heavy"] and pool.in_use == 2
    release_heavy.set()
    for thread in threads:
        thread.join(5)
    assert order == ["a", "heavy", "b"]


def test_heavy_task_is_not_starved_by_a_stream_of_light_tasks() -> None:
    pool = Pool("api", 2)
    stop = threading.Event()

    def light_stream() -> None:
        while not stop.is_set():
            with pool.acquire(1):
                time.sleep(0.002)

    streams = [threading.Thread(target=light_stream) for _ in range(4)]
    for thread in streams:
        thread.start()
    try:
        time.sleep(0.05)
        started = time.monotonic()
        with pool.acquire(2, timeout=2.0):
            waited = time.monotonic() - started
            assert pool.in_use == 2
    finally:
        stop.set()
        for thread in streams:
            thread.join(5)
    assert waited < 0.5


def test_a_request_that_times_out_leaves_the_queue_and_unblocks_those_behind() -> None:
    pool = Pool("db", 2)
    got_light = threading.Event()
    with pool.acquire(1):
        def light() -> None:
            with pool.acquire(1, timeout=2):
                got_light.set()

        heavy_gave_up = threading.Event()

        def heavy() -> None:
            with pytest.raises(PoolTimeout):
                with pool.acquire(2, timeout=0.1):
                    pass
            heavy_gave_up.set()

        heavy_thread = threading.Thread(target=heavy)
        heavy_thread.start()
        wait_until(lambda: pool.waiting == 1)
        light_thread = threading.Thread(target=light)
        light_thread.start()
        assert heavy_gave_up.wait(2)
        assert got_light.wait(2), "the light task behind the abandoned heavy one must proceed"
        heavy_thread.join(2)
        light_thread.join(2)
    assert pool.waiting == 0 and pool.in_use == 0


def test_slots_are_released_when_the_task_raises() -> None:
    pool = Pool("db", 1)
    with pytest.raises(RuntimeError):
        with pool.acquire(1):
            raise RuntimeError("task failed")
    assert pool.in_use == 0


# -- registry -----------------------------------------------------------------------------------


def test_registry_shares_pools_by_name_and_refuses_conflicts() -> None:
    registry = PoolRegistry()
    db = registry.ensure("positions-db", 2)
    assert registry.ensure("positions-db", 2) is db
    assert registry.get("positions-db") is db and "positions-db" in registry
    with pytest.raises(PoolError, match="already has capacity 2, not 3"):
        registry.ensure("positions-db", 3)
    with pytest.raises(PoolError, match=r"unknown pool 'api' \(known: positions-db\)"):
        registry.get("api")
    with pytest.raises(PoolError, match="already registered"):
        registry.add(Pool("positions-db", 2))
    with registry.acquire("positions-db", 2, holder="extract") as lease:
        assert (lease.pool, lease.slots, lease.holder) == ("positions-db", 2, "extract")
        assert db.in_use == 2


# -- ledger-backed pool -------------------------------------------------------------------------


class FakeLedger:
    """In-memory stand-in obeying the ledger's pool contract (atomic, TTL, re-acquire extends)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holdings: dict[tuple[str, str], tuple[int, float]] = {}
        self.now = time.monotonic
        self.calls = 0

    def _active(self, pool: str) -> dict[str, int]:
        now = self.now()
        return {h: s for (p, h), (s, exp) in self.holdings.items() if p == pool and exp > now}

    def acquire_pool_slots(self, pool: str, capacity: int, slots: int, holder: str,
                           ttl_seconds: float) -> bool:
        with self.lock:
            self.calls += 1
            active = self._active(pool)
            others = sum(s for h, s in active.items() if h != holder)
            if others + slots > capacity:
                return False
            self.holdings[(pool, holder)] = (slots, self.now() + ttl_seconds)
            return True

    def release_pool_slots(self, pool: str, holder: str) -> int:
        with self.lock:
            slots = self._active(pool).get(holder, 0)
            self.holdings.pop((pool, holder), None)
            return slots

    def in_use(self, pool: str) -> int:
        with self.lock:
            return sum(self._active(pool).values())


def test_ledger_pools_in_several_processes_share_one_capacity() -> None:
    """Three LedgerPools (three 'processes') on one ledger: at most 2 slots, ever."""
    ledger = FakeLedger()
    pools = [LedgerPool("positions-db", 2, ledger, poll_interval=0.002) for _ in range(3)]
    usage = Usage()

    def task(index: int, slots: int) -> None:
        with pools[index % 3].acquire(slots, timeout=10), usage.occupy(slots):
            time.sleep(0.005)

    weights = [1, 2, 1, 1, 2, 1, 1, 2, 1]
    with ThreadPoolExecutor(max_workers=9) as executor:
        for future in [executor.submit(task, i, w) for i, w in enumerate(weights)]:
            future.result()
    assert usage.ran == len(weights) and usage.peak <= 2
    assert ledger.in_use("positions-db") == 0


def test_ledger_pool_times_out_while_another_process_holds_the_slots() -> None:
    ledger = FakeLedger()
    assert ledger.acquire_pool_slots("db", 2, 2, "other-host:42", 60)
    pool = LedgerPool("db", 2, ledger, poll_interval=0.01)
    with pytest.raises(PoolTimeout, match="ledger did not grant 1 slot"):
        with pool.acquire(1, timeout=0.05):
            pass
    assert ledger.calls > 2, "it should have polled the ledger, not given up at once"
    ledger.release_pool_slots("db", "other-host:42")
    with pool.acquire(1, timeout=1) as lease:
        assert ledger.in_use("db") == 1 and lease.holder != "other-host:42"


def test_ledger_pool_releases_on_error_and_renews_a_long_hold() -> None:
    ledger = FakeLedger()
    pool = LedgerPool("db", 1, ledger, ttl=0.06, poll_interval=0.005)
    with pytest.raises(RuntimeError):
        with pool.acquire(1):
            raise RuntimeError("task failed")
    assert ledger.in_use("db") == 0
    with pool.acquire(1) as lease:
        time.sleep(0.2)  # several TTLs: without renewal the holding would have expired
        assert ledger.in_use("db") == 1
        assert not ledger.acquire_pool_slots("db", 1, 1, "intruder", 60)
        assert not lease.lost.is_set()
    assert ledger.in_use("db") == 0


def test_a_crashed_holder_loses_its_slots_after_the_ttl() -> None:
    ledger = FakeLedger()
    assert ledger.acquire_pool_slots("db", 1, 1, "crashed-worker", 0.05)  # never released
    pool = LedgerPool("db", 1, ledger, poll_interval=0.005)
    started = time.monotonic()
    with pool.acquire(1, timeout=2):
        assert 0.03 <= time.monotonic() - started < 1.0


def test_lost_renewal_is_flagged() -> None:
    ledger = FakeLedger()
    pool = LedgerPool("db", 1, ledger, ttl=0.03, poll_interval=0.005)
    with pool.acquire(1) as lease:
        ledger.holdings.clear()  # the ledger forgot us (expired) and someone else got in
        assert ledger.acquire_pool_slots("db", 1, 1, "someone-else", 60)
        assert lease.lost.wait(1)


def test_both_pool_kinds_satisfy_the_slot_pool_protocol() -> None:
    assert isinstance(Pool("db", 1), SlotPool)
    assert isinstance(LedgerPool("db", 1, FakeLedger()), SlotPool)
    with pytest.raises(PoolError, match="ttl must be > 0"):
        LedgerPool("db", 1, FakeLedger(), ttl=0)


def test_ledger_pool_against_the_real_ledger(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The adapter against ``twice.ledger.Ledger`` itself (SQLite), if it is installed."""
    ledger_module = pytest.importorskip("twice.ledger")
    ledger = ledger_module.Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        pools = [LedgerPool("positions-db", 2, ledger, poll_interval=0.005) for _ in range(2)]
        usage = run_tasks_on(pools, [2, 1, 1, 2, 1])
        assert usage.peak <= 2 and usage.ran == 5
        assert ledger.pool_holdings("positions-db") == []
    finally:
        close = getattr(ledger, "close", None)
        if close is not None:
            close()


def run_tasks_on(pools: list[LedgerPool], weights: list[int]) -> Usage:
    usage = Usage()

    def task(index: int, slots: int) -> None:
        with pools[index % len(pools)].acquire(slots, timeout=20), usage.occupy(slots):
            time.sleep(0.01)

    with ThreadPoolExecutor(max_workers=len(weights)) as executor:
        for future in [executor.submit(task, i, w) for i, w in enumerate(weights)]:
            future.result()
    return usage
