"""Rows to records, derived from the record dataclasses instead of written out per record;
and the JSON encoding of ``detail`` columns.

A record's fields are its table's columns, so one ``RowMapper`` per record builds it from a
row (or from the values just inserted, so a write returns exactly what a read would). Only
what the column type does not already give is converted, chosen by the field's type: JSON text
for ``detail`` mappings and column lists, seconds for a ``timedelta``, ISO text for a
``datetime`` kept as text (a unit's interval bounds). A field named differently from its column
says so in ``columns``.
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import PurePath
from typing import Any, Generic, TypeVar, Union, get_args, get_origin, get_type_hints

from sqlalchemy import Select
from sqlalchemy.engine import Connection

from twice.ledger.errors import LedgerError
from twice.ledger.prepared import locked, run
from twice.ledger.records import (
    AttemptRecord,
    DecisionRecord,
    ErrorRecord,
    FingerprintRecord,
    IntermediateEvent,
    IntermediateRecord,
    JobGenerationRecord,
    LeaseRecord,
    NonfatalErrorRecord,
    ObservationRecord,
    PoolHolding,
    TimelineEvent,
    UnitRecord,
)

R = TypeVar("R")
Convert = Callable[[Any], Any]


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


def encode_names(names: Sequence[str] | None) -> str | None:
    """A list of column names as stored: ``{"columns": [...]}``."""
    return None if names is None else encode_detail({"columns": list(names)})


def _instant(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


@functools.lru_cache(maxsize=256)
def _names(text: str) -> tuple[str, ...]:
    """Column names as stored (immutable, so decoded once per distinct text: every partition
    of a destination stores the same list)."""
    return tuple(decode_detail(text)["columns"])


def _seconds(value: Any) -> timedelta:
    return timedelta(seconds=value)


_BY_TYPE: dict[Any, Convert] = {
    bool: bool,
    float: float,
    datetime: _instant,
    timedelta: _seconds,
    tuple: _names,
    Mapping: decode_detail,
}


def _optional(convert: Convert) -> Convert:
    return lambda value: None if value is None else convert(value)


def converter_for(hint: Any) -> Convert | None:
    """How a column value becomes a field of type ``hint``; None when it is stored as is."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        present = [arg for arg in get_args(hint) if arg is not type(None)]
        inner = converter_for(present[0]) if len(present) == 1 else None
        return None if inner is None else _optional(inner)
    return _BY_TYPE.get(origin if origin is not None else hint)


class RowMapper(Generic[R]):
    """Builds record ``R`` from a row mapping; ``given`` fields are passed at call time."""

    def __init__(
        self, record: type[R], *, columns: Mapping[str, str] | None = None,
        given: tuple[str, ...] = (),
    ) -> None:
        hints = get_type_hints(record)
        renamed = dict(columns or {})
        self.record = record
        self.plan = [
            (spec.name, renamed.get(spec.name, spec.name), converter_for(hints[spec.name]))
            for spec in fields(record)  # type: ignore[arg-type]
            if spec.name not in given
        ]

    def __call__(self, row: Mapping[Any, Any], **given: Any) -> R:
        values = {
            name: row[column] if convert is None else convert(row[column])
            for name, column, convert in self.plan
        }
        return self.record(**values, **given)


def first(
    conn: Connection, query: Select[Any], build: RowMapper[R], *, lock: bool = False,
    params: Mapping[str, Any] | None = None,
) -> R | None:
    """The first row of ``query`` (run with ``params``: see ``twice.ledger.prepared``) as a
    record; ``lock`` locks it for the transaction (PostgreSQL; SQLite writers are serialised
    anyway)."""
    row = run(conn, locked(query) if lock else query, params).first()
    return None if row is None else build(row)


UNIT = RowMapper(UnitRecord)
ATTEMPT = RowMapper(AttemptRecord)
OBSERVATION = RowMapper(ObservationRecord)
ERROR = RowMapper(ErrorRecord)
NONFATAL = RowMapper(NonfatalErrorRecord)
DECISION = RowMapper(DecisionRecord)
GENERATION = RowMapper(JobGenerationRecord)
FINGERPRINT = RowMapper(FingerprintRecord, columns={"schema": "schema_signature"})
LEASE = RowMapper(LeaseRecord)
HOLDING = RowMapper(PoolHolding)
INTERMEDIATE = RowMapper(IntermediateRecord, columns={"retention": "retention_seconds"})
INTERMEDIATE_EVENT = RowMapper(IntermediateEvent)
TIMELINE_EVENT = RowMapper(TimelineEvent, columns={"detail": "data"}, given=("record",))
