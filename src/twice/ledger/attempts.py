"""Attempts: numbered executions of a unit of work, started and finished in the journal."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy import bindparam, func, select
from sqlalchemy.engine import Connection

from twice.core.outcomes import FINISH_OUTCOMES, AttemptOutcome
from twice.ledger import inserted, units
from twice.ledger import lease as leasing
from twice.ledger.checks import count, past, text
from twice.ledger.engine import is_postgres
from twice.ledger.errors import LedgerError
from twice.ledger.journal import (
    event_row,
    insert_after_event,
    insert_after_event_also,
    update_after_event,
)
from twice.ledger.prepared import Ahead, Ran, prepare, rows_where, run, run_one
from twice.ledger.records import AttemptRecord
from twice.ledger.rows import ATTEMPT, first
from twice.ledger.schema import attempts, job_generations
from twice.ledger.session import Session, transaction_memo

_TERMINAL_OUTCOMES = frozenset({"succeeded", "failed-transient", "failed-permanent"})


class AttemptStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def begin(
        self, uow_id: str, *, holder: str, generation: int | None, job_id: str | None,
        started_at: datetime | None,
    ) -> AttemptRecord:
        return self.begin_fenced(uow_id, holder=holder, generation=generation, job_id=job_id,
                                 started_at=started_at, fenced=False)[0]

    def begin_fenced(
        self, uow_id: str, *, holder: str, generation: int | None, job_id: str | None,
        started_at: datetime | None, fenced: bool = True,
    ) -> tuple[AttemptRecord, int | None]:
        """Begin the attempt and, ``fenced``, take the next fencing token in the same
        transaction (``lease.next_fencing_token``; on PostgreSQL in the attempt's INSERT)."""
        holder = text(holder, "holder")
        with self._session.write() as conn:
            now = self._session.now()
            unit = units.require(conn, uow_id, lock=True)
            taken_here = leasing.holder_in_transaction(conn, uow_id) == holder
            current = None if taken_here else leasing.get_lease(conn, uow_id)
            if current is not None and leasing.in_force(current, now) and current.holder != holder:
                raise LedgerError(
                    f"unit of work {uow_id} is leased by {current.holder} until "
                    f"{current.expires_at.isoformat()}; {holder} may not start an attempt"
                )
            if generation is not None:
                count(generation, "generation", minimum=1)
                if job_id is None:
                    recorded = conn.execute(
                        select(job_generations.c.job_id).where(
                            job_generations.c.uow_id == uow_id,
                            job_generations.c.generation == generation,
                        )
                    ).scalar()
                    job_id = recorded or unit.to_unit_of_work().job_id(generation)
            if job_id is not None:
                text(job_id, "job_id")
            started = past(started_at, "started_at", now)
            number = max_number(conn, uow_id) + 1
            summary = f"attempt {number} started by {holder}"
            if generation is not None or job_id is not None:
                summary += f" (generation {generation}, job {job_id})"
            event = event_row(
                kind="attempt-started",
                at=started,
                recorded_at=now,
                summary=summary,
                uow_id=uow_id,
                attempt=number,
                data={"holder": holder, "generation": generation, "job_id": job_id},
            )
            row = {"uow_id": uow_id, "number": number, "holder": holder,
                   "generation": generation, "job_id": job_id, "started_at": started,
                   "finished_at": None, "outcome": "running"}
            token = None
            if fenced and is_postgres(conn):
                _, token = insert_after_event_also(conn, event, attempts, row,
                                                   leasing.NEXT_TOKEN_VALUE,
                                                   seq_column="started_seq")
            else:
                if fenced:
                    token = leasing.next_fencing_token(conn)
                insert_after_event(conn, event, attempts, row, seq_column="started_seq")
            inserted.wrote(conn, attempts.name, uow_id)
            changed(conn, uow_id)
            units.attempt_seen(conn, uow_id, number)
        return ATTEMPT(row), None if token is None else int(token)

    def finish(
        self, uow_id: str, number: int, outcome: AttemptOutcome, finished_at: datetime | None
    ) -> AttemptRecord:
        if outcome not in FINISH_OUTCOMES:
            raise LedgerError(
                f"outcome must be one of {', '.join(FINISH_OUTCOMES)}, got {outcome!r}"
            )
        with self._session.write() as conn:
            now = self._session.now()
            current = locked(conn, uow_id, number)
            if current.outcome == outcome and current.finished_at is not None:
                return current
            if current.outcome in _TERMINAL_OUTCOMES:
                raise LedgerError(
                    f"attempt {number} of {uow_id} already finished as {current.outcome}; "
                    f"refusing to change it to {outcome}"
                )
            finished = past(finished_at, "finished_at", now)
            if finished < current.started_at:
                raise LedgerError(
                    f"finished_at {finished.isoformat()} is before attempt {number} started "
                    f"({current.started_at.isoformat()})"
                )
            return close(conn, current, outcome, finished=finished, recorded_at=now,
                         summary=f"attempt {number} finished: {outcome}")

    def all(self, uow_id: str) -> list[AttemptRecord]:
        with self._session.read() as conn:
            return list(all_of(conn, uow_id))

    def get(self, uow_id: str, number: int) -> AttemptRecord | None:
        with self._session.read() as conn:
            return first(conn, rows_where(attempts, "uow_id", "number"), ATTEMPT,
                         params={"uow_id": uow_id, "number": number})

    def latest(self, uow_id: str) -> AttemptRecord | None:
        with self._session.read() as conn:
            return first(conn, rows_where(attempts, "uow_id", order=("-number",), limit=1),
                         ATTEMPT, params={"uow_id": uow_id})


_MAX_NUMBER = prepare(
    select(func.max(attempts.c.number)).where(attempts.c.uow_id == bindparam("uow_id")))
_ALL = rows_where(attempts, "uow_id", order=("number",))


def all_of(conn: Connection, uow_id: str) -> tuple[AttemptRecord, ...]:
    """The unit's attempts in number order, read once per transaction: every write to them
    (``begin``, ``close``, a lease takeover) forgets what was read (``changed``)."""
    ahead = all_ahead(conn, uow_id)
    if ahead is None:
        return _read_in_transaction(conn)[uow_id]
    found: tuple[AttemptRecord, ...] = run_one(conn, ahead)
    return found


def all_ahead(conn: Connection, uow_id: str) -> Ahead | None:
    """:func:`all_of`'s read, to run alone or with others (``prepared.run_ahead``): its
    callback keeps the attempts until this transaction writes them, and returns them. None
    when this transaction knows them without a read."""
    read = _read_in_transaction(conn)
    if uow_id not in read and inserted.known_empty(conn, attempts.name, uow_id):
        read[uow_id] = ()
    if uow_id in read:
        return None

    def keep(ran: Ran) -> tuple[AttemptRecord, ...]:
        found = read[uow_id] = tuple(ATTEMPT(row) for row in ran.all())
        return found

    return _ALL, {"uow_id": uow_id}, keep


def changed(conn: Connection, uow_id: str) -> None:
    """The unit's attempts were written in this transaction: read them again next time."""
    _read_in_transaction(conn).pop(uow_id, None)
    held = _locked_in_transaction(conn)
    for key in [key for key in held if key[0] == uow_id]:
        del held[key]


def _read_in_transaction(conn: Connection) -> dict[str, tuple[AttemptRecord, ...]]:
    read: dict[str, tuple[AttemptRecord, ...]] = transaction_memo(conn, "twice_attempt_lists",
                                                                  dict)
    return read


def max_number(conn: Connection, uow_id: str) -> int:
    read = _read_in_transaction(conn).get(uow_id)
    if read is not None:
        return read[-1].number if read else 0
    if inserted.known_empty(conn, attempts.name, uow_id):
        return 0
    value = run(conn, _MAX_NUMBER, {"uow_id": uow_id}).scalar()
    return int(value or 0)


def locked(conn: Connection, uow_id: str, number: int) -> AttemptRecord:
    """Attempt ``number`` of ``uow_id``, its row locked for the rest of the transaction: read
    once while this transaction does not write it (no other can while the lock is held; on
    SQLite the transaction excludes every other writer)."""
    ahead = locked_ahead(conn, uow_id, number)
    found: AttemptRecord | None = (_locked_in_transaction(conn)[(uow_id, number)]
                                   if ahead is None else run_one(conn, ahead))
    if found is None:
        raise LedgerError(f"unit of work {uow_id} has no attempt {number}")
    return found


def locked_ahead(conn: Connection, uow_id: str, number: int) -> Ahead | None:
    """:func:`locked`'s read, to run alone or with others (``prepared.run_ahead``): its
    callback keeps the attempt as held and returns it (None: no such attempt). None: already
    held."""
    held = _locked_in_transaction(conn)
    if (uow_id, number) in held:
        return None

    def keep(ran: Ran) -> AttemptRecord | None:
        row = ran.first()
        if row is None:
            return None
        units.attempt_seen(conn, uow_id, number)
        found = held[(uow_id, number)] = ATTEMPT(row)
        return found

    return _LOCKED, {"uow_id": uow_id, "number": number}, keep


_LOCKED = rows_where(attempts, "uow_id", "number", lock=True)


def _locked_in_transaction(conn: Connection) -> dict[tuple[str, int], AttemptRecord]:
    held: dict[tuple[str, int], AttemptRecord] = transaction_memo(conn, "twice_attempts_locked",
                                                                  dict)
    return held


def close(
    conn: Connection, current: AttemptRecord, outcome: AttemptOutcome, *, finished: datetime,
    recorded_at: datetime, summary: str, **data: object,
) -> AttemptRecord:
    """Journal and store how attempt ``current`` ended; ``data`` adds to the event's data."""
    event = event_row(
        kind="attempt-finished",
        at=finished,
        recorded_at=recorded_at,
        summary=summary,
        uow_id=current.uow_id,
        attempt=current.number,
        data={"outcome": outcome, "previous_outcome": current.outcome, **data},
    )
    update_after_event(conn, event, attempts,
                       {"uow_id": current.uow_id, "number": current.number},
                       {"outcome": outcome, "finished_at": finished}, seq_column="finished_seq")
    changed(conn, current.uow_id)
    return replace(current, outcome=outcome, finished_at=finished)
