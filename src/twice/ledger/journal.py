"""The append-only event journal and the JSON ``detail`` encoding.

Every recording method appends one ``twice_events`` row (its ``seq`` is the recording order)
in the same transaction as its detail row, so the journal and the detail tables never disagree
and a timeline is one ordered query.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from pathlib import PurePath
from typing import Any

from sqlalchemy import insert
from sqlalchemy.engine import Connection, RowMapping

from twice.ledger.errors import LedgerError
from twice.ledger.records import EventKind, ObservationRecord
from twice.ledger.schema import events, observations


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal | PurePath):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def encode_detail(detail: Mapping[str, Any] | None) -> str:
    """Deterministic JSON text; anything that is not JSON data is refused, not stringified."""
    if detail is None:
        return "{}"
    if not isinstance(detail, Mapping):
        raise LedgerError(f"detail must be a mapping, got {type(detail).__name__}")
    try:
        return json.dumps(dict(detail), sort_keys=True, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise LedgerError(f"detail is not JSON data: {exc}") from None


def decode_detail(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


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
    result = conn.execute(
        insert(events).values(
            kind=kind,
            uow_id=uow_id,
            attempt=attempt,
            at=at,
            recorded_at=recorded_at,
            summary=summary,
            data=encode_detail(data),
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


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
    detail_text = encode_detail(detail)
    if summary is None:
        summary = f"observed {state} via {source}"
        if attempt is not None:
            summary += f" (attempt {attempt})"
    seq = append_event(
        conn,
        kind=kind,
        at=observed_at,
        recorded_at=recorded_at,
        summary=summary,
        uow_id=uow_id,
        attempt=attempt,
        data={"state": state, "source": source},
    )
    conn.execute(
        insert(observations).values(
            seq=seq,
            uow_id=uow_id,
            attempt=attempt,
            state=state,
            source=source,
            observed_at=observed_at,
            recorded_at=recorded_at,
            detail=detail_text,
        )
    )
    return ObservationRecord(
        seq=seq,
        uow_id=uow_id,
        state=state,
        source=source,
        observed_at=observed_at,
        recorded_at=recorded_at,
        attempt=attempt,
        detail=decode_detail(detail_text),
    )


def observation_from_row(row: RowMapping) -> ObservationRecord:
    return ObservationRecord(
        seq=row["seq"],
        uow_id=row["uow_id"],
        state=row["state"],
        source=row["source"],
        observed_at=row["observed_at"],
        recorded_at=row["recorded_at"],
        attempt=row["attempt"],
        detail=decode_detail(row["detail"]),
    )
