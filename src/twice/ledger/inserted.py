"""What a transaction knows about a unit of work it has just inserted.

Every row about a unit references the unit's row (a foreign key, enforced on SQLite and
PostgreSQL), and no other transaction can reference a row that is not committed yet. So from
the moment a transaction inserts a unit until it ends, the unit's attempts, lease,
observations, decisions, errors and job generations are exactly the rows that transaction
writes: until it writes one of those tables, reading it would return nothing. A backfill's
claim of a new unit reads four of them before writing any; those reads are skipped.

The rule holds only if every insert of a row about a unit into a ``TRACKED`` table tells
:func:`wrote`. The inserts that do: ``journal.append_entry`` (observations, errors, non-fatal
errors, decisions), ``attempts.AttemptStore.begin``, ``generations`` and ``lease._acquire``.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from twice.ledger.session import transaction_memo

#: Tables whose inserts all report to :func:`wrote` (asking about another one is a bug).
TRACKED = frozenset({
    "twice_attempts", "twice_leases", "twice_observations", "twice_decisions",
    "twice_errors", "twice_nonfatal_errors", "twice_job_generations",
})


def _written(conn: Connection) -> dict[str, set[str]]:
    """Units inserted in this transaction -> the tracked tables written about them since."""
    written: dict[str, set[str]] = transaction_memo(conn, "twice_inserted_units", dict)
    return written


def unit_inserted(conn: Connection, uow_id: str) -> None:
    """This transaction inserted the unit's row."""
    _written(conn)[uow_id] = set()


def wrote(conn: Connection, table: str, uow_id: str | None) -> None:
    """This transaction inserted a row of ``table`` about ``uow_id``."""
    written = _written(conn).get(uow_id) if uow_id is not None else None
    if written is not None:
        written.add(table)


def known_empty(conn: Connection, table: str, uow_id: str) -> bool:
    """Whether ``table`` holds no row about ``uow_id`` in this transaction, known without
    reading it (False: read it)."""
    if table not in TRACKED:
        raise AssertionError(f"{table} is not tracked by twice.ledger.inserted")
    written = _written(conn).get(uow_id)
    return written is not None and table not in written
