"""The append-only event journal.

Every recording method appends one ``twice_events`` row (its ``seq`` is the recording order)
in the same transaction as its detail row, so the journal and the detail tables never disagree
and a timeline is one ordered query.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Column, Table
from sqlalchemy.engine import Connection

from twice.ledger import inserted
from twice.ledger.prepared import inserting, inserting_returning, rows_where, run
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
    return inserted_key(conn, events, {
        "kind": kind, "uow_id": uow_id, "attempt": attempt, "at": at,
        "recorded_at": recorded_at, "summary": summary, "data": encode_detail(data),
    })


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
    seq = append_event(
        conn, kind=kind, at=recorded_at if at is None else at, recorded_at=recorded_at,
        summary=summary, uow_id=values.get("uow_id"), attempt=values.get("attempt"), data=data,
    )
    row = {"seq": seq, **values}
    run(conn, inserting(table), row)
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
    known = inserted.known_rows(conn, table.name, uow_id)
    if known is not None:
        return [build(row) for row in sorted(known, key=lambda row: [row[n] for n in names])]
    query = rows_where(table, "uow_id", order=names)
    return [build(row) for row in run(conn, query, {"uow_id": uow_id}).all()]
