"""What a transaction knows about a unit of work it has just inserted.

Every row about a unit references the unit's row (a foreign key, enforced on SQLite and
PostgreSQL), and no other transaction can reference a row that is not committed yet. So from
the moment a transaction inserts a unit until it ends, the unit's attempts, lease,
observations, decisions, errors and job generations are exactly the rows that transaction
writes. A backfill's claim of a new unit reads four of them before writing any, and its
observations after writing one; those reads are skipped.

The rule holds only if every insert of a row about a unit into a ``TRACKED`` table tells
:func:`wrote`. The inserts that do: ``journal.append_entry`` (observations, errors, non-fatal
errors, decisions: append-only, never updated, so it passes the row and later reads are
answered from it), ``attempts.AttemptStore.begin``, ``generations`` and ``lease._acquire``
(whose rows are updated later: it passes none, and the table is read again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import Connection

from twice.ledger.session import transaction_memo

#: Tables whose inserts all report to :func:`wrote` (asking about another one is a bug).
TRACKED = frozenset({
    "twice_attempts", "twice_leases", "twice_observations", "twice_decisions",
    "twice_errors", "twice_nonfatal_errors", "twice_job_generations",
})


#: Rows written about a unit since it was inserted, per table; None: rows this module does not
#: keep were written (the table must be read).
Written = dict[str, list[dict[str, Any]] | None]


def _written(conn: Connection) -> dict[str, Written]:
    """Units inserted in this transaction -> the tracked tables written about them since."""
    written: dict[str, Written] = transaction_memo(conn, "twice_inserted_units", dict)
    return written


def unit_inserted(conn: Connection, uow_id: str) -> None:
    """This transaction inserted the unit's row."""
    _written(conn)[uow_id] = {}


def wrote(conn: Connection, table: str, uow_id: str | None,
          row: Mapping[str, Any] | None = None) -> None:
    """This transaction inserted a row of ``table`` about ``uow_id``: ``row`` as a read would
    return it (times in UTC) when the table is append-only, else None."""
    written = _written(conn).get(uow_id) if uow_id is not None else None
    if written is None:
        return
    if row is None:
        written[table] = None
        return
    kept = written.setdefault(table, [])
    if kept is not None:
        kept.append(dict(row))


def known_empty(conn: Connection, table: str, uow_id: str) -> bool:
    """Whether ``table`` holds no row about ``uow_id`` in this transaction, known without
    reading it (False: read it)."""
    return known_rows(conn, table, uow_id) == []


def known_rows(conn: Connection, table: str, uow_id: str) -> list[dict[str, Any]] | None:
    """The rows of ``table`` about ``uow_id`` in this transaction, in insertion order, known
    without reading it; None: read it."""
    if table not in TRACKED:
        raise AssertionError(f"{table} is not tracked by twice.ledger.inserted")
    written = _written(conn).get(uow_id)
    rows = None if written is None else written.get(table, [])
    return None if rows is None else list(rows)
