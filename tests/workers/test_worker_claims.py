"""Workers on one PostgreSQL ledger choose units without serialising (issue 38): a worker skips a
unit another is claiming instead of waiting for that claim's transaction, comes back to it once
the claimer is gone, and workers racing over the same units run each exactly once, under
strictly increasing fencing tokens."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import date, timedelta

import pytest

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers.worker import Worker
from twice.engine.executor import identify_unit
from twice.ledger import Ledger
from twice.ledger.claims import ClaimIntents

pytestmark = pytest.mark.postgres

FIRST = date(2026, 11, 1)
#: How long a test waits for a worker thread before calling it stuck (a hang guard only:
#: nothing is timed; a worker that waits on another's claim never ends without help).
STUCK = 60.0


def _pipeline(executions: list[tuple[str, str]], lock: threading.Lock) -> Pipeline:
    pipeline = Pipeline("claims", schedule=Schedule.daily("UTC"))

    def record(ctx: TaskContext) -> None:
        with lock:
            executions.append((ctx.task_name, ctx.interval.label))

    @pipeline.task(safe_repeat=True)
    def extract(ctx: TaskContext) -> None:
        record(ctx)

    @pipeline.task(depends_on=[extract], safe_repeat=True)
    def load(ctx: TaskContext) -> None:
        record(ctx)

    return pipeline


def _days(pipeline: Pipeline, count: int) -> list:  # type: ignore[type-arg]
    return [pipeline.schedule.interval_for(FIRST + timedelta(days=n)) for n in range(count)]


def test_a_worker_skips_a_unit_another_is_claiming_instead_of_waiting(postgres_url: str
                                                                      ) -> None:
    executions: list[tuple[str, str]] = []
    pipeline = _pipeline(executions, threading.Lock())
    first, second = _days(pipeline, 2)
    with Ledger.open(postgres_url) as claimer, Ledger.open(postgres_url) as ledger:
        busy = identify_unit(pipeline, claimer, "extract", first)
        intents = claimer.claim_intents()
        worker = Worker(pipeline, ledger, [first, second], tasks=["extract"], name="w2",
                        once=True)
        reports: list = []  # type: ignore[type-arg]
        # Another worker mid-claim: its intent taken, its unit and lease rows written and
        # locked by a transaction that has not committed yet.
        with claimer.transaction():
            assert intents.take(busy.uow_id)
            claimer.record_unit(busy)
            assert claimer.acquire_lease(busy.uow_id, "w1", 60).acquired
            thread = threading.Thread(target=lambda: reports.append(worker.run()))
            thread.start()
            thread.join(STUCK)
            finished_during_the_claim = not thread.is_alive()
        thread.join(STUCK)
        intents.close()
    assert finished_during_the_claim, "the worker waited for another worker's claim"
    (report,) = reports
    by_day = {unit.interval: unit for unit in report.units}
    assert by_day[second].settlement == "ran" and by_day[second].ok
    assert by_day[first].settlement == "left"
    assert by_day[first].reason == "another worker was claiming it"
    assert report.lease_conflicts == 1
    assert report.to_dict()["lease_conflicts"] == 1
    assert executions == [("extract", second.label)]


def test_a_unit_whose_claimer_stopped_is_still_run_on_a_later_pass(postgres_url: str) -> None:
    """An intent is advisory: a process stopped while holding one (its lease, if any, ran
    out) does not keep its unit from the others, who hand it to the executor on a later pass
    and take the lease over as usual."""
    executions: list[tuple[str, str]] = []
    pipeline = _pipeline(executions, threading.Lock())
    days = _days(pipeline, 2)
    with Ledger.open(postgres_url) as stopped, Ledger.open(postgres_url) as ledger:
        held = identify_unit(pipeline, stopped, "extract", days[0])
        intents = stopped.claim_intents()
        assert intents.take(held.uow_id)
        worker = Worker(pipeline, ledger, days, tasks=["extract"], name="w2", poll=0.01)
        report = worker.run()
        intents.close()
    assert report.ok and report.stopped == "finished"
    assert [unit.settlement for unit in report.units] == ["ran", "ran"]
    assert report.lease_conflicts >= 1
    assert sorted(executions) == sorted(("extract", day.label) for day in days)


def test_workers_racing_over_the_same_units_run_each_once(postgres_url: str) -> None:
    executions: list[tuple[str, str]] = []
    lock = threading.Lock()
    pipeline = _pipeline(executions, lock)
    days = _days(pipeline, 10)
    ledgers = [Ledger.open(postgres_url) for _ in range(4)]
    try:
        workers = [Worker(pipeline, ledger, days, name=f"w{n}", poll=0.01)
                   for n, ledger in enumerate(ledgers)]
        reports: list = []  # type: ignore[type-arg]
        threads = [threading.Thread(target=lambda w=w: reports.append(w.run()))
                   for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(STUCK)
        assert not any(thread.is_alive() for thread in threads)
        expected = {(task, day.label) for day in days for task in ("extract", "load")}
        assert Counter(executions) == Counter(expected)  # every unit, none twice
        assert len(reports) == 4 and all(r.ok and r.stopped == "finished" for r in reports)
        ran = Counter((u.task, u.interval.label) for r in reports for u in r.units
                      if u.settlement == "ran")
        assert set(ran) == expected and set(ran.values()) == {1}
        ledger = ledgers[0]
        tokens = []
        for task, day in sorted(expected):
            interval = pipeline.schedule.interval_for(date.fromisoformat(day[:10]))
            uow = identify_unit(pipeline, ledger, task, interval)
            assert [a.outcome for a in ledger.attempts(uow.uow_id)] == ["succeeded"]
            lease = ledger.lease(uow.uow_id)
            assert lease is not None and lease.released_at is not None
            tokens.append(lease.token)
        assert len(set(tokens)) == len(tokens)  # one ledger-wide sequence: never reused
        # tokens strictly increase: one taken after all of these is above every one
        assert ledger.next_fencing_token() > max(tokens)
    finally:
        for ledger in ledgers:
            ledger.close()


def _leased_elsewhere(pipeline: Pipeline, other: Ledger, day: Interval) -> UnitOfWork:
    """The unit of ``extract`` for ``day``, recorded and leased by another worker (w1)."""
    busy = identify_unit(pipeline, other, "extract", day)
    other.record_unit(busy)
    assert other.acquire_lease(busy.uow_id, "w1", 600).acquired  # running elsewhere
    return busy


def test_a_worker_waiting_on_others_looks_again_sooner_then_every_poll(postgres_url: str
                                                                       ) -> None:
    """A unit another worker runs is settled within about a unit's time: a worker with nothing
    else to take looks again after 0.05 s, doubling while nothing changes, up to ``poll``;
    once the unit settles it is seen on the next pass, not up to a whole ``poll`` later."""
    executions: list[tuple[str, str]] = []
    pipeline = _pipeline(executions, threading.Lock())
    (day,) = _days(pipeline, 1)
    with Ledger.open(postgres_url) as holder, Ledger.open(postgres_url) as ledger:
        busy = _leased_elsewhere(pipeline, holder, day)
        worker = Worker(pipeline, ledger, [day], tasks=["extract"], name="w2", poll=0.5)
        waits: list[float] = []

        def wait(intents: object, seconds: float) -> bool:
            waits.append(seconds)
            if len(waits) == 7:  # the other worker's unit ends: released, nothing ran here
                holder.release_lease(busy.uow_id, "w1")
            if len(waits) > 12:
                worker.request_stop("stuck")
            return False

        worker._idle = wait  # type: ignore[method-assign]
        report = worker.run()
    assert waits[:7] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    assert len(waits) == 7, waits  # the next pass found the lease released and ran the unit
    assert report.stopped == "finished"
    assert executions == [("extract", day.label)]


def test_a_waiting_worker_is_woken_when_another_gives_its_unit_back(postgres_url: str) -> None:
    """On PostgreSQL a worker waiting on a unit another worker runs is told when that worker
    gives the unit back (``NOTIFY`` with its claim intent's release), and looks again at once
    instead of at the end of its doubled wait. Here its wait is 10 s (``poll``), the other
    worker's unit ends after its 4th: the next pass runs at once and finds it settled."""
    executions: list[tuple[str, str]] = []
    pipeline = _pipeline(executions, threading.Lock())
    (day,) = _days(pipeline, 1)
    with Ledger.open(postgres_url) as other, Ledger.open(postgres_url) as ledger:
        busy = _leased_elsewhere(pipeline, other, day)
        others = other.claim_intents()
        assert others.take(busy.uow_id)
        worker = Worker(pipeline, ledger, [day], tasks=["extract"], name="w2", poll=10)
        waits: list[tuple[float, bool]] = []
        idle = worker._idle

        def wait(intents: ClaimIntents, seconds: float) -> bool:
            if len(waits) == 4:  # the other worker's unit ends: settled elsewhere
                with other.transaction():
                    other.begin_attempt(busy.uow_id, holder="w1")
                    other.finish_attempt(busy.uow_id, 1, "succeeded")
                other.release_lease(busy.uow_id, "w1")
                others.give_back(busy.uow_id)
            began = time.monotonic()
            stopping = idle(intents, 10.0 if len(waits) >= 4 else seconds)
            waits.append((seconds, time.monotonic() - began < 5.0))
            if len(waits) > 8:
                worker.request_stop("stuck")
            return stopping

        worker._idle = wait  # type: ignore[method-assign]
        try:
            report = worker.run()
        finally:
            others.close()
    assert len(waits) == 5, waits  # the pass after the 5th wait saw the unit settled
    assert waits[4][1], waits  # woken long before its 10 s
    assert report.stopped == "finished"
    assert [u.settlement for u in report.units] == ["done-elsewhere"], report
    assert executions == []  # settled by the other worker: nothing ran here
