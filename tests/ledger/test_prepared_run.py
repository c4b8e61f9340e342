"""``twice.ledger.prepared.run``: a statement built once runs as its compiled SQL string on the
transaction's driver cursor, and reads, writes and fails exactly as ``Connection.execute``
would, on SQLite and PostgreSQL (issue 23: the bookkeeping hot path).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from tests.ledger.ledger_helpers import FakeClock

from twice.core.unit import UnitOfWork
from twice.ledger import Ledger, prepared
from twice.ledger.engine import begin
from twice.ledger.faults import classify
from twice.ledger.prepared import inserting, rows_where, run, update_where
from twice.ledger.schema import decisions, events, leases, observations, units


def _engine(ledger: Ledger) -> Engine:
    return ledger._session.engine


@contextmanager
def _transaction(ledger: Ledger) -> Iterator[Connection]:
    """A write transaction begun as the ledger begins them (``BEGIN IMMEDIATE`` on SQLite,
    whose driver connection is in autocommit otherwise), rolled back at the end."""
    with _engine(ledger).connect() as conn:
        transaction = begin(conn, read_only=False)
        try:
            yield conn
        finally:
            transaction.rollback()


def _plain(conn: Any, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(row) for row in conn.execute(statement, params).mappings()]


def test_rows_read_on_the_cursor_equal_sqlalchemy_s(ledger: Ledger, uow: UnitOfWork,
                                                    clock: FakeClock) -> None:
    """Times come back aware UTC, booleans as bool, NULLs as None: the column types'
    processors run on the cursor path too."""
    ledger.record_decision(uow.uow_id, "retry-eligible", reason="r", not_started=True,
                           attempt=1)
    ledger.record_decision(uow.uow_id, "wait-backoff", reason="w")
    ledger.record_observation(uow.uow_id, "succeeded", source="probe")
    assert ledger.acquire_lease(uow.uow_id, "h", 60).acquired
    with _engine(ledger).begin() as conn:
        for table in (decisions, observations, leases, units):
            statement = rows_where(table, "uow_id")
            lean = run(conn, statement, {"uow_id": uow.uow_id}).all()
            assert lean, table.name
            assert lean == _plain(conn, statement, {"uow_id": uow.uow_id}), table.name
    flags = [row["not_started"] for row in lean_decisions(ledger, uow)]
    assert flags == [True, False] and all(type(flag) is bool for flag in flags)
    lease = ledger.lease(uow.uow_id)
    assert lease is not None and lease.expires_at.tzinfo is not None
    assert lease.expires_at.utcoffset() == timedelta(0)


def lean_decisions(ledger: Ledger, uow: UnitOfWork) -> list[dict[str, Any]]:
    with _engine(ledger).begin() as conn:
        return run(conn, rows_where(decisions, "uow_id", order=("seq",)),
                   {"uow_id": uow.uow_id}).all()


def test_an_insert_fills_scalar_defaults_and_returns_its_key(ledger: Ledger) -> None:
    """``twice_events.data`` defaults to ``{}``; the key is the row's ``seq`` on both engines
    (``lastrowid`` on SQLite, ``RETURNING`` on PostgreSQL); a time in another zone is stored
    as the same instant in UTC."""
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=-5)))
    values = {"kind": "observation", "at": at, "recorded_at": at, "summary": "s"}
    with _engine(ledger).begin() as conn:
        statement = (inserting(events) if ledger.dialect == "sqlite"
                     else prepared.inserting_returning(events))
        keys = [run(conn, statement, values).inserted_key for _ in range(2)]
        stored = _plain(conn, select(events).where(events.c.seq.in_(keys)), {})
    assert keys[1] == keys[0] + 1
    assert [row["seq"] for row in stored] == keys
    assert {row["data"] for row in stored} == {"{}"}
    assert {row["at"] for row in stored} == {at.astimezone(UTC)}


def test_an_update_sets_the_parameters_that_name_columns(ledger: Ledger,
                                                         uow: UnitOfWork) -> None:
    assert ledger.acquire_lease(uow.uow_id, "h", 60).acquired
    released = datetime(2026, 11, 5, 12, tzinfo=UTC)
    with _engine(ledger).begin() as conn:
        other = update_where(conn, leases, {"uow_id": uow.uow_id, "holder": "someone"},
                             {"released_at": released}, null=("released_at",))
        mine = update_where(conn, leases, {"uow_id": uow.uow_id, "holder": "h"},
                            {"released_at": released}, null=("released_at",))
    assert (other.rowcount, mine.rowcount) == (0, 1)
    lease = ledger.lease(uow.uow_id)
    assert lease is not None and lease.released_at == released


def test_a_driver_error_is_wrapped_and_classified_as_sqlalchemy_s(ledger: Ledger,
                                                                  uow: UnitOfWork) -> None:
    """A duplicate key fails with SQLAlchemy's IntegrityError (what callers catch), and the
    transaction is still usable to roll back."""
    row = {"uow_id": uow.uow_id, "holder": "h", "token": 1,
           "acquired_at": datetime.now(UTC), "renewed_at": datetime.now(UTC),
           "expires_at": datetime.now(UTC), "released_at": None}
    with _transaction(ledger) as conn:
        run(conn, inserting(leases), row)
        with pytest.raises(IntegrityError) as raised:
            run(conn, inserting(leases), row)
        assert classify(raised.value) is None  # a constraint is neither transient nor storage
    assert ledger.lease(uow.uow_id) is None


def test_one_cursor_serves_a_driver_connection_and_a_failed_one_is_replaced(
        ledger: Ledger, uow: UnitOfWork) -> None:
    """Statements on one driver connection share its cursor (made once); after a driver
    error it is dropped and closed, and the next statement gets a working new one."""
    row = {"uow_id": uow.uow_id, "holder": "h", "token": 1,
           "acquired_at": datetime.now(UTC), "renewed_at": datetime.now(UTC),
           "expires_at": datetime.now(UTC), "released_at": None}
    read = rows_where(leases, "uow_id")
    with _transaction(ledger) as conn:
        run(conn, inserting(leases), row)
        first = prepared._cursor(conn)
        assert run(conn, read, {"uow_id": uow.uow_id}).all()
        assert prepared._cursor(conn) is first
        with pytest.raises(IntegrityError):
            run(conn, inserting(leases), row)
        assert prepared._cursor(conn) is not first
    with _transaction(ledger) as conn:  # the connection back from the pool: rows read again
        run(conn, inserting(leases), row)
        assert [r["holder"] for r in run(conn, read, {"uow_id": uow.uow_id}).all()] == ["h"]


def test_listeners_see_every_statement_and_ad_hoc_ones_are_not_cached(
        ledger: Ledger, uow: UnitOfWork) -> None:
    """With a statement listener on the engine the statement goes through SQLAlchemy's
    events; a statement built per call runs through ``Connection.execute`` and is not kept."""
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    engine = _engine(ledger)
    event.listen(engine, "before_cursor_execute", listen)
    try:
        with engine.begin() as conn:
            found = run(conn, rows_where(units, "uow_id"), {"uow_id": uow.uow_id}).all()
    finally:
        event.remove(engine, "before_cursor_execute", listen)
    assert [row["uow_id"] for row in found] == [uow.uow_id]
    assert any("twice_units_of_work" in statement for statement in seen)
    cached = len(prepared._STATEMENTS)
    with engine.begin() as conn:
        for _ in range(3):
            ad_hoc = select(units).where(units.c.uow_id == uow.uow_id)
            assert run(conn, ad_hoc).first() is not None
    assert len(prepared._STATEMENTS) == cached
