"""Units of work: recorded once, by identity, and required by everything recorded about them."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.engine import Connection

from twice.core.unit import UnitOfWork
from twice.ledger import inserted as inserted_here
from twice.ledger.checks import aware, count, text
from twice.ledger.engine import is_postgres
from twice.ledger.errors import LedgerError, UnknownUnitError
from twice.ledger.journal import event_row, insert_new_then_event
from twice.ledger.prepared import Ahead, Ran, rows_where, run, run_one
from twice.ledger.records import UnitRecord
from twice.ledger.rows import UNIT
from twice.ledger.schema import attempts, units
from twice.ledger.session import Session, transaction_memo


class UnitStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def record(self, uow: UnitOfWork) -> UnitRecord:
        uow = unit_of_work(uow)
        with self._session.write() as conn:
            return self.record_in(conn, uow)

    def record_in(self, conn: Connection, uow: UnitOfWork) -> UnitRecord:
        """Record ``uow`` in the caller's transaction (idempotent)."""
        identity = uow.identity()
        uow_id = uow.uow_id
        now = self._session.now()
        values = {
            "uow_id": uow_id,
            **identity,
            "interval_start_utc": uow.interval.start,
            "interval_end_utc": uow.interval.end,
            "created_at": now,
        }
        event = event_row(
            kind="unit-recorded",
            recorded_at=now,
            summary=f"unit of work recorded: {uow.pipeline}.{uow.task} {uow.interval}",
            uow_id=uow_id,
            data=identity,
        )
        if insert_new_then_event(conn, units, values, event) is not None:
            # what a read would return (times as UTC), without reading it back
            inserted = UNIT({**values, "created_at": now.astimezone(UTC)})
            _known_in_transaction(conn)[uow_id] = inserted
            _locked_in_transaction(conn).add(uow_id)  # a new row is ours until commit
            inserted_here.unit_inserted(conn, uow_id)
            return inserted
        record = find(conn, uow_id)
        assert record is not None
        stored = record.to_unit_of_work().identity()
        if stored != identity:
            raise LedgerError(f"unit of work {uow_id} is stored with another identity: {stored}")
        return record

    def get(self, uow_id: str) -> UnitRecord | None:
        with self._session.read() as conn:
            return find(conn, uow_id)

    def all(self, *, pipeline: str | None, task: str | None,
            starting: datetime | None = None) -> list[UnitRecord]:
        given = {"interval_start_utc": None if starting is None else aware(starting, "starting"),
                 "pipeline": pipeline, "task": task}
        where = {column: value for column, value in given.items() if value is not None}
        query = rows_where(units, *where, order=_IN_INTERVAL_ORDER)
        with self._session.read() as conn:
            return [UNIT(row) for row in run(conn, query, where).all()]


_IN_INTERVAL_ORDER = ("interval_start_utc", "pipeline", "task", "uow_id")


def unit_of_work(uow: object) -> UnitOfWork:
    if not isinstance(uow, UnitOfWork):
        raise LedgerError(f"record_unit needs a UnitOfWork, got {type(uow).__name__}")
    return uow


def find(conn: Connection, uow_id: str, *, lock: bool = False) -> UnitRecord | None:
    """The unit's record; read once per transaction (a unit never changes once recorded)
    unless ``lock`` asks for its row lock on PostgreSQL and this transaction does not hold it
    yet (SQLite's writers are serialised by the transaction itself)."""
    ahead = find_ahead(conn, uow_id, lock=lock)
    if ahead is None:
        return _known_in_transaction(conn)[uow_id]
    found: UnitRecord | None = run_one(conn, ahead)
    return found


def find_ahead(conn: Connection, uow_id: str, *, lock: bool = False) -> Ahead | None:
    """:func:`find`'s read, to run alone or with others (``prepared.run_ahead``): its callback
    keeps the record as :func:`find` does and returns it (None: no such unit). None when
    there is nothing to read: the unit is known in this transaction (and locked if ``lock``
    asks)."""
    known = _known_in_transaction(conn)
    locking = lock and is_postgres(conn)
    if uow_id in known and not (locking and uow_id not in _locked_in_transaction(conn)):
        return None

    def keep(ran: Ran) -> UnitRecord | None:
        row = ran.first()
        if row is None:
            return None
        record = known[uow_id] = UNIT(row)
        if locking:
            _locked_in_transaction(conn).add(uow_id)
        return record

    return rows_where(units, "uow_id", lock=lock), {"uow_id": uow_id}, keep


def _known_in_transaction(conn: Connection) -> dict[str, UnitRecord]:
    """The units this connection's current transaction has read or recorded."""
    known: dict[str, UnitRecord] = transaction_memo(conn, "twice_units", dict)
    return known


def _locked_in_transaction(conn: Connection) -> set[str]:
    """The units whose rows this transaction has locked, or inserted (held until it ends)."""
    locked: set[str] = transaction_memo(conn, "twice_units_locked", set)
    return locked


def attempt_seen(conn: Connection, uow_id: str, number: int) -> None:
    """Attempt ``number`` of ``uow_id`` exists (just begun, read or locked in this
    transaction): ``require`` need not look for it again (attempts are never deleted)."""
    _attempts_seen(conn).add((uow_id, number))


def _attempts_seen(conn: Connection) -> set[tuple[str, int]]:
    seen: set[tuple[str, int]] = transaction_memo(conn, "twice_attempts", set)
    return seen


def require(
    conn: Connection, uow_id: str, *, attempt: int | None = None, lock: bool = False
) -> UnitRecord:
    """The unit (and its attempt ``attempt`` when given), locked on PostgreSQL when ``lock``
    (serialises per-unit numbering)."""
    record = find(conn, text(uow_id, "uow_id"), lock=lock)
    if record is None:
        raise UnknownUnitError(f"unknown unit of work {uow_id!r}: record_unit() it first")
    if attempt is not None:
        count(attempt, "attempt", minimum=1)
        if (uow_id, attempt) in _attempts_seen(conn):
            return record
        found = run(
            conn, rows_where(attempts, "uow_id", "number"), {"uow_id": uow_id, "number": attempt}
        ).first()
        if found is None:
            raise LedgerError(f"unit of work {uow_id} has no attempt {attempt}")
        attempt_seen(conn, uow_id, attempt)
    return record
