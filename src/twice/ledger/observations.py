"""Evidence about a unit of work: observed states, errors, and non-fatal problems.

Each is a journal entry plus its detail row, written in one transaction (``append_entry``);
the record returned is built from the values written, exactly as a later read builds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection

from twice.core.outcomes import ERROR_CLASSIFICATIONS, ErrorClassification
from twice.core.secrets import redact
from twice.ledger import units
from twice.ledger.checks import count, past, text
from twice.ledger.errors import LedgerError
from twice.ledger.journal import append_entry, insert_observation, unit_entries
from twice.ledger.records import ErrorRecord, EventKind, NonfatalErrorRecord, ObservationRecord
from twice.ledger.rows import ERROR, NONFATAL, OBSERVATION, encode_detail, first
from twice.ledger.schema import errors, nonfatal_errors, observations
from twice.ledger.session import Session


class ObservationStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def record(
        self, uow_id: str, state: str, *, source: str, observed_at: datetime | None,
        attempt: int | None, detail: Mapping[str, Any] | None, summary: str | None = None,
    ) -> ObservationRecord:
        state = text(state, "state")
        if summary is not None:
            summary = text(summary, "summary")
        source = text(source, "source")
        with self._session.write() as conn:
            now = self._session.now()
            observed = past(observed_at, "observed_at", now)
            units.require(conn, uow_id, attempt=attempt)
            return insert_observation(
                conn, uow_id=uow_id, state=state, source=source, observed_at=observed,
                recorded_at=now, attempt=attempt, detail=detail, summary=summary,
            )

    def all(self, uow_id: str) -> list[ObservationRecord]:
        with self._session.read() as conn:
            return unit_entries(conn, observations, OBSERVATION, uow_id,
                                observations.c.observed_at, observations.c.seq)

    def latest(self, uow_id: str, *, source: str | None) -> ObservationRecord | None:
        query = select(observations).where(observations.c.uow_id == uow_id)
        if source is not None:
            query = query.where(observations.c.source == source)
        query = query.order_by(observations.c.observed_at.desc(), observations.c.seq.desc())
        with self._session.read() as conn:
            return first(conn, query.limit(1), OBSERVATION)

    def record_error(
        self, uow_id: str, *, error_class: str, message: str,
        classification: ErrorClassification, attempt: int | None,
        detail: Mapping[str, Any] | None,
    ) -> ErrorRecord:
        error_class = text(error_class, "error_class")
        # a driver's or a task's error may echo a connection string: never stored in clear
        message = redact(text(message, "message", allow_empty=True))
        if classification not in ERROR_CLASSIFICATIONS:
            raise LedgerError(
                f"classification must be one of {', '.join(ERROR_CLASSIFICATIONS)}, "
                f"got {classification!r}"
            )
        values = {"uow_id": uow_id, "attempt": attempt, "error_class": error_class,
                  "message": message, "classification": classification,
                  "detail": encode_detail(detail)}
        with self._session.write() as conn:
            row = self._entry(
                conn, errors, values, kind="error",
                summary=f"{classification} error {error_class}: {message}",
                data={"error_class": error_class, "classification": classification},
            )
        return ERROR(row)

    def errors(self, uow_id: str) -> list[ErrorRecord]:
        with self._session.read() as conn:
            return unit_entries(conn, errors, ERROR, uow_id)

    def record_nonfatal(
        self, uow_id: str, message: str, *, count: int, attempt: int | None,
        detail: Mapping[str, Any] | None,
    ) -> NonfatalErrorRecord:
        message = redact(text(message, "message"))
        number = _count(count)
        values = {"uow_id": uow_id, "attempt": attempt, "message": message, "count": number,
                  "detail": encode_detail(detail)}
        with self._session.write() as conn:
            row = self._entry(conn, nonfatal_errors, values, kind="nonfatal-error",
                              summary=f"non-fatal: {message} (x{number})",
                              data={"count": number})
        return NONFATAL(row)

    def nonfatal_errors(self, uow_id: str) -> list[NonfatalErrorRecord]:
        with self._session.read() as conn:
            return unit_entries(conn, nonfatal_errors, NONFATAL, uow_id)

    def _entry(
        self, conn: Connection, table: Table, values: dict[str, Any], *, kind: EventKind,
        summary: str, data: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Journal a problem of an existing unit (and attempt) now."""
        now = self._session.now()
        units.require(conn, values["uow_id"], attempt=values["attempt"])
        return append_entry(conn, table, {**values, "recorded_at": now}, kind=kind,
                            summary=summary, data=data)


def _count(value: object) -> int:
    return count(value, "count", minimum=1)
