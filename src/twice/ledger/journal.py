"""The append-only event journal.

Every recording method appends one ``twice_events`` row (its ``seq`` is the recording order)
in the same transaction as its detail row, so the journal and the detail tables never disagree
and a timeline is one ordered query.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

from sqlalchemy import Column, Table, bindparam, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from twice.ledger import inserted
from twice.ledger.engine import insert_ignore
from twice.ledger.prepared import (
    WHERE_PREFIX,
    Ahead,
    inserting,
    inserting_returning,
    prepare,
    rows_where,
    run,
    run_one,
    update_where,
    updating,
)
from twice.ledger.records import EventKind, ObservationRecord
from twice.ledger.rows import OBSERVATION, RowMapper, encode_detail
from twice.ledger.schema import events, observations

R = TypeVar("R")


def append_event(
    conn: Connection,
    *,
    kind: EventKind,
    at: datetime,
    recorded_at: datetime,
    summary: str,
    uow_id: str | None = None,
    attempt: int | None = None,
    data: Mapping[str, Any] | None = None,
) -> int:
    """Append one journal entry and return its ``seq``."""
    return inserted_key(conn, events, event_row(
        kind=kind, at=at, recorded_at=recorded_at, summary=summary, uow_id=uow_id,
        attempt=attempt, data=data))


def event_row(
    *, kind: EventKind, recorded_at: datetime, summary: str, at: datetime | None = None,
    uow_id: str | None = None, attempt: int | None = None,
    data: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``twice_events`` row of one journal entry (its ``seq`` is given on insert); the
    event happened ``at`` (default: when recorded)."""
    return {"kind": kind, "uow_id": uow_id, "attempt": attempt,
            "at": recorded_at if at is None else at, "recorded_at": recorded_at,
            "summary": summary, "data": encode_detail(data)}


# -- an event and its detail row in one statement (PostgreSQL) -----------------------------------
#
# On PostgreSQL every statement is a round trip to the server, and a unit's bookkeeping is
# bound by them (issue 23). Journaling an event and writing the detail row that carries its
# ``seq`` is therefore one statement there: a data-modifying CTE inserts the event, and the
# INSERT or UPDATE of the detail row takes the ``seq`` it returned. SQLite runs the two
# statements, which cost no round trip. Either way both are in the caller's transaction.

_EVENT_PREFIX = "event_"
_EVENT_KEYS = ("kind", "uow_id", "attempt", "at", "recorded_at", "summary", "data")


def _event_cte() -> Any:
    values = {key: bindparam(_EVENT_PREFIX + key, type_=events.c[key].type)
              for key in _EVENT_KEYS}
    return insert(events).values(values).returning(events.c.seq).cte("journal_event")


@cache
def _insert_after_event(table: Table, seq_column: str, keys: tuple[str, ...],
                        also: Any = None) -> Any:
    """``WITH journal_event AS (INSERT INTO twice_events ... RETURNING seq) INSERT INTO table
    (seq_column, keys...) SELECT seq, :key... FROM journal_event RETURNING seq_column[,
    also]``."""
    event = _event_cte()
    chosen = select(event.c.seq, *(bindparam(key, type_=table.c[key].type) for key in keys))
    statement = insert(table).from_select([seq_column, *keys], chosen)
    returned = (table.c[seq_column],) if also is None else (table.c[seq_column], also)
    return prepare(statement.returning(*returned))


@cache
def _update_after_event(table: Table, seq_column: str | None, where: tuple[str, ...],
                        keys: tuple[str, ...], null: tuple[str, ...]) -> Any:
    """``WITH journal_event AS (INSERT ...) UPDATE table SET keys..., seq_column = (SELECT seq
    FROM journal_event) WHERE where... AND null... IS NULL``."""
    event = _event_cte()
    values: dict[str, Any] = {key: bindparam(key, type_=table.c[key].type) for key in keys}
    if seq_column is not None:
        values[seq_column] = select(event.c.seq).scalar_subquery()
    return prepare(updating(table, *where, null=null).values(values).add_cte(event))


@cache
def _insert_new_then_event(table: Table, keys: tuple[str, ...]) -> Any:
    """``WITH new_row AS (INSERT INTO table ... ON CONFLICT DO NOTHING RETURNING uow_id)
    INSERT INTO twice_events ... SELECT ..., new_row.uow_id, ... FROM new_row RETURNING seq``:
    the event is journaled only when the row was inserted."""
    new_row = (
        pg_insert(table)
        .values({key: bindparam(key, type_=table.c[key].type) for key in keys})
        .on_conflict_do_nothing()
        .returning(table.c.uow_id)
        .cte("new_row")
    )
    chosen = select(*(
        new_row.c.uow_id if key == "uow_id"
        else bindparam(_EVENT_PREFIX + key, type_=events.c[key].type)
        for key in _EVENT_KEYS
    ))
    return prepare(insert(events).from_select(list(_EVENT_KEYS), chosen)
                   .returning(events.c.seq))


def insert_new_then_event(conn: Connection, table: Table, values: Mapping[str, Any],
                          event: Mapping[str, Any]) -> int | None:
    """Insert ``values`` into ``table`` unless its key exists and, only if it was inserted,
    journal ``event`` about the row's ``uow_id``; the event's ``seq``, or None when the row
    existed. On PostgreSQL a concurrent uncommitted insert of the same key makes this wait
    for that transaction (``engine.insert_ignore``)."""
    if conn.dialect.name != "postgresql":
        return inserted_key(conn, events, event) if insert_ignore(conn, table, values) else None
    statement = _insert_new_then_event(table, tuple(values))
    params = {**{key: value for key, value in _event_params(event).items()
                 if key != _EVENT_PREFIX + "uow_id"}, **values}
    found = run(conn, statement, params).first()
    return None if found is None else int(found["seq"])


def _event_params(event: Mapping[str, Any]) -> dict[str, Any]:
    return {_EVENT_PREFIX + key: event[key] for key in _EVENT_KEYS}


def insert_after_event(conn: Connection, event: Mapping[str, Any], table: Table,
                       values: Mapping[str, Any], *, seq_column: str = "seq") -> int:
    """Journal ``event`` (:func:`event_row`) and insert ``values`` into ``table`` with the
    event's ``seq`` in ``seq_column``; returns the ``seq``."""
    if conn.dialect.name != "postgresql":
        seq = inserted_key(conn, events, event)
        run(conn, inserting(table), {seq_column: seq, **values})
        return seq
    statement = _insert_after_event(table, seq_column, tuple(values))
    return run(conn, statement, {**_event_params(event), **values}).inserted_key


def insert_after_event_also(conn: Connection, event: Mapping[str, Any], table: Table,
                            values: Mapping[str, Any], also: Any, *, seq_column: str
                            ) -> tuple[int, Any]:
    """:func:`insert_after_event`, evaluating the SQL expression ``also`` (a labelled module
    constant, e.g. a sequence's ``nextval``) in the same statement (PostgreSQL only): the
    ``seq`` and the expression's value, one round trip."""
    statement = _insert_after_event(table, seq_column, tuple(values), also)
    row = run(conn, statement, {**_event_params(event), **values}).first()
    assert row is not None
    return int(row[seq_column]), row[also.name]


def update_after_event(conn: Connection, event: Mapping[str, Any], table: Table,
                       where: Mapping[str, Any], values: Mapping[str, Any], *,
                       seq_column: str | None = None, null: tuple[str, ...] = ()) -> int:
    """Journal ``event`` and set ``values`` (and the event's ``seq`` in ``seq_column``) in
    the rows of ``table`` whose columns equal ``where`` and whose ``null`` columns are NULL;
    returns the number of rows updated."""
    if conn.dialect.name != "postgresql":
        seq = inserted_key(conn, events, event)
        extra = {} if seq_column is None else {seq_column: seq}
        return update_where(conn, table, where, {**values, **extra}, null=null).rowcount
    statement = _update_after_event(table, seq_column, tuple(where), tuple(values), null)
    params = {**_event_params(event), **values,
              **{WHERE_PREFIX + name: value for name, value in where.items()}}
    return run(conn, statement, params).rowcount


def inserted_key(conn: Connection, table: Table, values: Mapping[str, Any]) -> int:
    """Insert one row and return its generated integer key."""
    statement = inserting(table) if conn.dialect.name == "sqlite" else inserting_returning(table)
    return run(conn, statement, values).inserted_key


def append_entry(
    conn: Connection,
    table: Table,
    values: Mapping[str, Any],
    *,
    kind: EventKind,
    summary: str,
    data: Mapping[str, Any],
    at: datetime | None = None,
) -> dict[str, Any]:
    """Journal an event, then write its detail row under the event's ``seq``; returns the row.

    ``values`` holds ``recorded_at`` and, where the table has them, ``uow_id`` and ``attempt``;
    the event happened ``at`` (default: when recorded).
    """
    recorded_at = values["recorded_at"]
    event = event_row(
        kind=kind, at=at, recorded_at=recorded_at,
        summary=summary, uow_id=values.get("uow_id"), attempt=values.get("attempt"), data=data,
    )
    row = {"seq": insert_after_event(conn, event, table, values), **values}
    inserted.wrote(conn, table.name, values.get("uow_id"), row)  # times are UTC (checks.aware)
    return row


def insert_observation(
    conn: Connection,
    *,
    uow_id: str,
    state: str,
    source: str,
    observed_at: datetime,
    recorded_at: datetime,
    attempt: int | None = None,
    detail: Mapping[str, Any] | None = None,
    kind: EventKind = "observation",
    summary: str | None = None,
) -> ObservationRecord:
    """Write an observation and its journal entry (callers have validated the times)."""
    if summary is None:
        summary = f"observed {state} via {source}"
        if attempt is not None:
            summary += f" (attempt {attempt})"
    row = append_entry(
        conn, observations,
        {"uow_id": uow_id, "attempt": attempt, "state": state, "source": source,
         "observed_at": observed_at, "recorded_at": recorded_at, "detail": encode_detail(detail)},
        kind=kind, at=observed_at, summary=summary, data={"state": state, "source": source},
    )
    return OBSERVATION(row)


def unit_entries(
    conn: Connection, table: Table, build: RowMapper[R], uow_id: str, *order: Column[Any]
) -> list[R]:
    """The rows of ``table`` about one unit of work, in recording order unless ``order``."""
    names = tuple(column.name for column in order) or ("seq",)
    known = known_entries(conn, table, build, uow_id, names)
    if known is not None:
        return known
    found: list[R] = run_one(conn, entries_ahead(table, build, uow_id, names))
    return found


def known_entries(conn: Connection, table: Table, build: RowMapper[R], uow_id: str,
                  names: tuple[str, ...]) -> list[R] | None:
    """:func:`unit_entries` ordered by the columns ``names``, when this transaction knows them
    without a read (``twice.ledger.inserted``); None: read them (``entries_ahead``)."""
    known = inserted.known_rows(conn, table.name, uow_id)
    if known is None:
        return None
    return [build(row) for row in sorted(known, key=lambda row: [row[n] for n in names])]


def entries_ahead(table: Table, build: RowMapper[R], uow_id: str, names: tuple[str, ...]
                  ) -> Ahead:
    """:func:`unit_entries`' read, ordered by the columns ``names``, to run alone or with
    others (``prepared.run_ahead``); its callback returns the records."""
    return (rows_where(table, "uow_id", order=names), {"uow_id": uow_id},
            lambda ran: [build(row) for row in ran.all()])
