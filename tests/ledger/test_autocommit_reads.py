"""On PostgreSQL a ledger read outside any transaction runs in autocommit (issue 38): under READ
COMMITTED, the server's default, each statement takes its own snapshot whether or not a
transaction wraps it, so the transaction only cost a BEGIN and a COMMIT round trip. What must
hold: the connection goes back to the pool as it came (the next write is one transaction that
a failure rolls back whole), ``snapshot()`` still reads one REPEATABLE READ view, a server whose
default isolation is stricter keeps its read transactions, and a worker's read of the units
ahead of it is one statement.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text
from tests.ledger.ledger_helpers import make_uow

from twice.ledger import Ledger

pytestmark = pytest.mark.postgres


def _driver(conn: Any) -> psycopg.Connection[Any]:
    return conn.connection.dbapi_connection  # type: ignore[no-any-return]


def test_reads_autocommit_and_writes_stay_transactions(postgres_url: str) -> None:
    with Ledger.open(postgres_url) as ledger:
        session = ledger._session
        uow = make_uow(1)
        ledger.record_unit(uow)
        with session.read() as conn:
            assert _driver(conn).autocommit
            assert ledger.unit(uow.uow_id) is not None
        with ledger.snapshot(), session.read() as conn:
            assert not _driver(conn).autocommit
            assert conn.execute(text("SHOW transaction_isolation")).scalar() == "repeatable read"
        for _ in range(3):  # the pool hands back the connection the reads used
            with session.write() as conn:
                assert not _driver(conn).autocommit
        other = make_uow(2)

        def half(led: Ledger) -> None:
            led.record_unit(other)
            led.record_observation(other.uow_id, "running", source="test")
            raise RuntimeError("stop between the writes")

        with pytest.raises(RuntimeError):
            ledger.atomic(half)
        assert ledger.unit(other.uow_id) is None  # rolled back whole


def test_a_stricter_server_default_keeps_read_transactions(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        name = admin.info.dbname
        admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_isolation '
                      "= 'repeatable read'")
    try:
        with Ledger.open(postgres_url) as ledger, ledger._session.read() as conn:
            assert not _driver(conn).autocommit
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_isolation')


def test_a_workers_read_ahead_is_one_statement(postgres_url: str) -> None:
    with Ledger.open(postgres_url) as ledger:
        units = [make_uow(day) for day in (1, 2, 3)]
        ledger.record_unit(units[0])
        ledger.acquire_lease(units[0].uow_id, "w1", 60)
        sent: list[tuple[str, bool]] = []

        def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            sent.append((statement, _driver(conn).autocommit))

        engine = ledger._session.engine
        event.listen(engine, "before_cursor_execute", seen)
        try:
            states = ledger.claim_states([unit.uow_id for unit in units])
        finally:
            event.remove(engine, "before_cursor_execute", seen)
        assert len(sent) == 1 and sent[0][1], sent  # one statement, no transaction around it
        lease = states[units[0].uow_id].lease
        assert states[units[0].uow_id].recorded and lease is not None and lease.holder == "w1"
        assert not states[units[1].uow_id].recorded
