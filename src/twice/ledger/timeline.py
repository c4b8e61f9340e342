"""A unit of work's timeline: its journal entries, each with the record it refers to.

The journal gives the order (time, then recording order); the detail tables give each entry's
record in its current state, looked up by the key the entry names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection

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
    UNIT,
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
from twice.ledger.schema import units as unit_rows
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
        return self.of_many([uow_id])[uow_id]

    def of_many(self, uow_ids: Sequence[str]) -> dict[str, list[TimelineEvent]]:
        """Timelines of many units, read in one transaction a chunk of units per query (a
        report over a large ledger makes a few queries per chunk, not nine per unit)."""
        found: dict[str, list[TimelineEvent]] = {uow_id: [] for uow_id in uow_ids}
        ids = list(found)  # each unit once
        with self._session.read() as conn:
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start:start + CHUNK]
                rows = conn.execute(
                    select(events).where(events.c.uow_id.in_(chunk))
                    .order_by(events.c.at, events.c.seq)
                ).mappings().all()
                if not rows:
                    continue
                lookup = _records(conn, chunk)
                for row in rows:
                    uow_id = row["uow_id"]
                    found[uow_id].append(TIMELINE_EVENT(row, record=_record(lookup, row)))
        return found


#: Units per query: well under SQLite's 32,766 bound parameters, and PostgreSQL's 65,535.
CHUNK = 500


def _record(lookup: dict[str, dict[Any, object]], row: Any) -> object:
    """The record the journal entry ``row`` names, as it is now."""
    kind, uow_id = row["kind"], row["uow_id"]
    if kind in ("attempt-started", "attempt-finished"):
        return lookup["attempt"].get((uow_id, row["attempt"]))
    if kind in ("job-generation", "generation-marked"):
        return lookup["generation"].get((uow_id, decode_detail(row["data"]).get("generation")))
    if kind == "unit-recorded":
        return lookup["unit"].get(uow_id)
    return lookup[kind].get((uow_id, row["seq"]))


def _records(conn: Connection, uow_ids: list[str]) -> dict[str, dict[Any, object]]:
    """The detail records of ``uow_ids``, by kind, keyed ``(uow_id, key)`` (unit: uow_id)."""
    recorded = conn.execute(select(unit_rows).where(unit_rows.c.uow_id.in_(uow_ids)))
    found: dict[str, dict[Any, object]] = {
        "unit": {row["uow_id"]: UNIT(row) for row in recorded.mappings()}}
    for name, (table, build, key) in _RECORDS.items():
        query = select(table).where(table.c.uow_id.in_(uow_ids))
        found[name] = {(row["uow_id"], row[key]): build(row)
                       for row in conn.execute(query).mappings()}
    found["lease-takeover"] = found["observation"]
    return found
