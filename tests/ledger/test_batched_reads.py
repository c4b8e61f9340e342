"""Statements sent together (``twice.ledger.prepared.run_together``, issue 38).

``Ledger.history``: a unit's record, attempts, observations and decisions read together, the
planner's evidence. It must give exactly what the four reads give one by one, inside a
transaction that has read or written some of them as outside one; on PostgreSQL the reads it
must make go to the server in one round trip (psycopg's pipeline mode), and a failing one is
raised as the connection raises any statement's error. Recording a fingerprint sends the
partition's lock and its three reads together.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy.exc
from sqlalchemy import text
from tests.ledger.ledger_helpers import FakeClock, make_uow

from twice.ledger import Ledger, LedgerError, UnknownUnitError
from twice.ledger.prepared import prepare, run, run_together


def _one_by_one(ledger: Ledger, uow_id: str) -> Any:
    return (ledger.unit(uow_id), ledger.attempts(uow_id), ledger.observations(uow_id),
            ledger.decisions(uow_id))


def _record_some(ledger: Ledger, clock: FakeClock, uow_id: str, rng: random.Random) -> None:
    """A seeded mix of what a unit's history holds: attempts begun and finished, observations
    (some observed earlier than recorded, so their order is not the recording order), and
    decisions."""
    for _ in range(rng.randint(0, 4)):
        clock.advance(rng.randint(1, 30))
        step = rng.choice(["attempt", "observe", "decide"])
        if step == "attempt":
            ledger.acquire_lease(uow_id, "w1", 600)
            record = ledger.begin_attempt(uow_id, holder="w1")
            if rng.random() < 0.7:
                ledger.finish_attempt(uow_id, record.number,
                                      rng.choice(["succeeded", "failed-transient"]))
        elif step == "observe":
            ledger.record_observation(
                uow_id, rng.choice(["running", "succeeded", "failed"]), source="test",
                observed_at=clock() - timedelta(seconds=rng.randint(0, 50)))
        else:
            ledger.record_decision(uow_id, "retry-eligible", reason=f"r{rng.random()}")


@pytest.mark.parametrize("seed", range(6))
def test_history_is_the_four_reads(ledger: Ledger, clock: FakeClock, seed: int) -> None:
    rng = random.Random(seed)
    units = [make_uow(day) for day in (1, 2)]
    for uow in units:
        ledger.record_unit(uow)
        _record_some(ledger, clock, uow.uow_id, rng)
    for uow in units:
        assert ledger.history(uow.uow_id) == _one_by_one(ledger, uow.uow_id)
        with ledger.snapshot():
            assert ledger.history(uow.uow_id) == _one_by_one(ledger, uow.uow_id)

    new = make_uow(3)

    def inside(led: Ledger) -> list[Any]:
        """Reads after writes in one transaction: a unit inserted in it (its rows known
        without reading), and a unit read, then written, then read again."""
        seen = []
        led.record_unit(new)
        _record_some(led, clock, new.uow_id, rng)
        seen.append((led.history(new.uow_id), _one_by_one(led, new.uow_id)))
        first = units[0].uow_id
        seen.append((led.history(first), _one_by_one(led, first)))
        led.record_observation(first, "refreshed", source="test")
        led.record_decision(first, "retry-eligible", reason="after")
        seen.append((led.history(first), _one_by_one(led, first)))
        return seen

    for together, apart in ledger.atomic(inside):
        assert together == apart
    assert ledger.history("no such unit") == (None, [], [], [])


class RoundTrips:
    """Round trips the ledger's psycopg connections make: a statement outside a pipeline, or
    a whole pipeline."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.piped = 0
        self.pipelines = 0
        execute, pipeline = psycopg.Cursor.execute, psycopg.Connection.pipeline
        trips = self

        def counted_execute(cursor: Any, *args: Any, **kw: Any) -> Any:
            if not trips.piped:
                trips.count += 1
            return execute(cursor, *args, **kw)

        class Counted:
            def __init__(self, conn: Any) -> None:
                self.inner = pipeline(conn)

            def __enter__(self) -> Any:
                trips.count += 1
                trips.pipelines += 1
                trips.piped += 1
                return self.inner.__enter__()

            def __exit__(self, *exc: Any) -> Any:
                trips.piped -= 1
                return self.inner.__exit__(*exc)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)
        def counted_pipeline(conn: Any) -> Counted:
            return Counted(conn)

        monkeypatch.setattr(psycopg.Connection, "pipeline", counted_pipeline)


@pytest.mark.postgres
def test_postgres_reads_the_history_in_one_round_trip(
    postgres_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Ledger.open(postgres_url, clock=clock) as ledger:
        uow = make_uow(4)
        ledger.record_unit(uow)
        _record_some(ledger, clock, uow.uow_id, random.Random(7))
        ledger.record_observation(uow.uow_id, "running", source="test")
        trips = RoundTrips(monkeypatch)
        with ledger.snapshot():
            history = ledger.history(uow.uow_id)
        monkeypatch.undo()
        assert (trips.pipelines, trips.count) == (1, 1)  # one pipeline, nothing sent alone
        assert history == _one_by_one(ledger, uow.uow_id)
        assert history[2]  # the observations were read, not known


@pytest.mark.postgres
def test_a_failing_read_of_a_batch_raises_as_the_connection_would(postgres_url: str) -> None:
    with Ledger.open(postgres_url) as ledger:
        engine = ledger._session.engine
        good, bad = prepare(text("SELECT 1 AS one")), prepare(text("SELECT 1 / 0 AS never"))
        with engine.connect() as conn, conn.begin():
            assert [r.all() for r in run_together(conn, [(good, {}), (good, {})])] == [
                [{"one": 1}], [{"one": 1}]]
        with engine.connect() as conn:
            with pytest.raises(sqlalchemy.exc.DataError, match="division by zero"):
                with conn.begin():
                    run_together(conn, [(good, {}), (bad, {})])
            with conn.begin():  # the connection serves on, through its kept cursor too
                assert run(conn, good, {}).all() == [{"one": 1}]


@pytest.mark.postgres
def test_recording_a_fingerprint_is_two_round_trips(
    postgres_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Ledger.open(postgres_url, clock=clock) as ledger:
        uow = make_uow(6)
        ledger.record_unit(uow)
        ledger.acquire_lease(uow.uow_id, "w1", 600)
        attempt = ledger.begin_attempt(uow.uow_id, holder="w1")
        ledger.record_fingerprint("d", "p", 3, 11, uow_id=uow.uow_id, attempt=attempt.number)
        clock.advance(1)

        def record(led: Ledger) -> Any:
            trips = RoundTrips(monkeypatch)
            second = led.record_fingerprint("d", "p", 4, 12, uow_id=uow.uow_id,
                                            attempt=attempt.number)
            counted = trips.count
            monkeypatch.undo()
            return second, counted

        with ledger.transaction():
            ledger.unit("another")  # the transaction is open: count the record's own trips
            second, counted = record(ledger)
        # the lock, the unit, the attempt and the latest version together; the insert
        assert counted == 2
        assert second.version == 2
        latest = ledger.latest_fingerprint("d", "p")
        assert latest is not None and (latest.version, latest.row_count) == (2, 4)
        with pytest.raises(LedgerError, match="no attempt 9"):
            ledger.record_fingerprint("d", "p", 5, 13, uow_id=uow.uow_id, attempt=9)
        with pytest.raises(UnknownUnitError):
            ledger.record_fingerprint("d", "p", 5, 13, uow_id="nobody", attempt=1)
        assert ledger.latest_fingerprint("d", "p") == latest  # nothing recorded by either


def test_a_lease_given_back_with_the_history_read(
    ledger: Ledger, clock: FakeClock, engine_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``release_lease_and_read`` (the end of a unit that succeeded): the lease given back as
    ``release_lease`` gives it, and the history read after it; one round trip on PostgreSQL."""
    uow, other = make_uow(7), make_uow(8)
    for unit in (uow, other):
        ledger.record_unit(unit)
        ledger.acquire_lease(unit.uow_id, "w1", 600)
        _record_some(ledger, clock, unit.uow_id, random.Random(3))
    counted: list[int] = []

    def end(led: Ledger) -> Any:
        led.unit("warm")  # the transaction is open: count the call's own round trips
        trips = RoundTrips(monkeypatch) if engine_url.startswith("postgresql") else None
        history = led.release_lease_and_read(uow.uow_id, "w1")
        if trips is not None:
            counted.append(trips.count)
            monkeypatch.undo()
        return history

    history = ledger.atomic(end)
    assert history == _one_by_one(ledger, uow.uow_id)
    lease = ledger.lease(uow.uow_id)
    assert lease is not None and lease.released_at is not None
    assert ledger.release_lease_and_read(other.uow_id, "someone else") == _one_by_one(
        ledger, other.uow_id)
    kept = ledger.lease(other.uow_id)
    assert kept is not None and kept.released_at is None and kept.holder == "w1"
    if engine_url.startswith("postgresql"):
        assert counted == [1]
