"""A unit of work's timeline: its journal entries, each with the record it refers to.

The journal gives the order (time, then recording order); the detail tables give each entry's
record in its current state, looked up by the key the entry names.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection

from twice.ledger import units
from twice.ledger.records import TimelineEvent
from twice.ledger.rows import (
    ATTEMPT,
    DECISION,
    ERROR,
    FINGERPRINT,
    GENERATION,
    NONFATAL,
    OBSERVATION,
    TIMELINE_EVENT,
    RowMapper,
    decode_detail,
)
from twice.ledger.schema import (
    attempts,
    decisions,
    errors,
    events,
    fingerprints,
    job_generations,
    nonfatal_errors,
    observations,
)
from twice.ledger.session import Session

#: Where the record of each kind of entry is, and the key naming it (default: the entry's seq).
_RECORDS: dict[str, tuple[Table, RowMapper[Any], str]] = {
    "attempt": (attempts, ATTEMPT, "number"),
    "generation": (job_generations, GENERATION, "generation"),
    "observation": (observations, OBSERVATION, "seq"),
    "error": (errors, ERROR, "seq"),
    "nonfatal-error": (nonfatal_errors, NONFATAL, "seq"),
    "fingerprint": (fingerprints, FINGERPRINT, "seq"),
    "decision": (decisions, DECISION, "seq"),
}


class TimelineStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def of(self, uow_id: str) -> list[TimelineEvent]:
        with self._session.read() as conn:
            rows = (
                conn.execute(
                    select(events)
                    .where(events.c.uow_id == uow_id)
                    .order_by(events.c.at, events.c.seq)
                )
                .mappings()
                .all()
            )
            if not rows:
                return []
            lookup = _records(conn, uow_id)
        timeline = []
        for row in rows:
            kind = row["kind"]
            if kind in ("attempt-started", "attempt-finished"):
                record = lookup["attempt"].get(row["attempt"])
            elif kind in ("job-generation", "generation-marked"):
                record = lookup["generation"].get(decode_detail(row["data"]).get("generation"))
            elif kind == "unit-recorded":
                record = lookup["unit"].get(uow_id)
            else:
                record = lookup[kind].get(row["seq"])
            timeline.append(TIMELINE_EVENT(row, record=record))
        return timeline


def _records(conn: Connection, uow_id: str) -> dict[str, dict[Any, object]]:
    found: dict[str, dict[Any, object]] = {"unit": {uow_id: units.find(conn, uow_id)}}
    for name, (table, build, key) in _RECORDS.items():
        query = select(table).where(table.c.uow_id == uow_id)
        found[name] = {row[key]: build(row) for row in conn.execute(query).mappings()}
    found["lease-takeover"] = found["observation"]
    return found
