"""The catalog of materialized intermediates: which version is stored where, and its history.

``twice.engine.intermediates`` decides (reuse, refuse, recompute, expire); these functions
record the outcome inside a write transaction supplied by the ``Ledger``. Writers of one stored
slice (``location`` + ``partition``) are serialised, so the rule "at most one active version
per slice" holds across processes: writing a version supersedes whatever was active there,
because its rows were just replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, and_, insert, not_, select, update
from sqlalchemy.engine import Connection

from twice.core.timescale import nonnegative_seconds
from twice.core.unit import UnitOfWork
from twice.ledger.checks import count
from twice.ledger.engine import lock_key
from twice.ledger.errors import LedgerError
from twice.ledger.journal import inserted_key
from twice.ledger.records import (
    INTERMEDIATE_STATUSES,
    IntermediateAction,
    IntermediateEvent,
    IntermediateRecord,
    IntermediateStatus,
)
from twice.ledger.rows import (
    INTERMEDIATE,
    INTERMEDIATE_EVENT,
    decode_detail,
    encode_detail,
    encode_names,
    first,
)
from twice.ledger.schema import intermediate_events, intermediates
from twice.ledger.session import Session
from twice.ledger.units import UnitStore, unit_of_work

T = TypeVar("T")

_MAX_NAME = 200


def _name(value: object, field: str, limit: int = _MAX_NAME) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LedgerError(f"intermediate {field} must be a non-empty string, got {value!r}")
    if len(value) > limit:
        raise LedgerError(f"intermediate {field} is longer than {limit} characters")
    return value


def _size(value: object, field: str) -> int:
    return count(value, field, minimum=0)


def get_entry(
    conn: Connection, name: str, version: str, *, for_update: bool = False
) -> IntermediateRecord | None:
    query = select(intermediates).where(*_key(name, version))
    return first(conn, query, INTERMEDIATE, lock=for_update)


def list_entries(
    conn: Connection, *, name: str | None = None, status: IntermediateStatus | None = None
) -> list[IntermediateRecord]:
    query = select(intermediates)
    if name is not None:
        query = query.where(intermediates.c.name == name)
    if status is not None:
        if status not in INTERMEDIATE_STATUSES:
            raise LedgerError(
                f"status must be one of {', '.join(INTERMEDIATE_STATUSES)}, got {status!r}"
            )
        query = query.where(intermediates.c.status == status)
    query = query.order_by(intermediates.c.name, intermediates.c.created_at,
                           intermediates.c.version)
    return [INTERMEDIATE(row) for row in conn.execute(query).mappings()]


def list_events(conn: Connection, name: str, version: str | None = None
                ) -> list[IntermediateEvent]:
    query = select(intermediate_events).where(intermediate_events.c.name == name)
    if version is not None:
        query = query.where(intermediate_events.c.version == version)
    query = query.order_by(intermediate_events.c.seq)
    return [INTERMEDIATE_EVENT(row) for row in conn.execute(query).mappings()]


def append_event(
    conn: Connection,
    *,
    name: str,
    version: str,
    action: IntermediateAction,
    reason: str,
    at: datetime,
    detail: Mapping[str, Any] | None = None,
) -> int:
    return inserted_key(conn, intermediate_events, {
        "name": name, "version": version, "action": action,
        "reason": _name(reason, "reason", 10_000), "at": at, "detail": encode_detail(detail),
    })


def record_materialization(
    conn: Connection, *, now: datetime, name: str, version: str, uow_id: str, owner: str,
    retention_seconds: int, location: str, partition: str, identity: Mapping[str, str],
    columns: Sequence[str], algorithm: str, row_count: int, checksum: str, bytes_stored: int,
    compute_seconds: float, bytes_scanned: int | None, reason: str,
    detail: Mapping[str, Any] | None = None,
) -> IntermediateRecord:
    """Store (or re-store) one version as the active occupant of its slice.

    A first write of the version is ``materialized``; writing it again (after tampering or
    expiry) is ``recomputed`` and keeps its reuse history. Other active versions of the same
    slice become ``superseded``.
    """
    name = _name(name, "name")
    version = _name(version, "version", 64)
    owner = _name(owner, "owner")
    if isinstance(retention_seconds, bool) or not isinstance(retention_seconds, int) \
            or retention_seconds < 1:
        raise LedgerError(f"retention must be at least one whole second, got {retention_seconds!r}")
    location = _name(location, "location", 10_000)
    partition = _name(partition, "partition", 10_000)
    if isinstance(columns, str) or not columns:
        raise LedgerError("fingerprint columns must be a non-empty sequence of names")
    column_names = [_name(c, "column name") for c in columns]
    row_count = _size(row_count, "row_count")
    bytes_stored = _size(bytes_stored, "bytes_stored")
    compute_seconds = nonnegative_seconds(compute_seconds, "compute_seconds", LedgerError)
    if bytes_scanned is not None:
        bytes_scanned = _size(bytes_scanned, "bytes_scanned")
    checksum = _name(checksum, "checksum", 64)
    reason = _name(reason, "reason", 10_000)

    lock_key(conn, "intermediate-slice", f"{location}\x1f{partition}")
    existing = get_entry(conn, name, version, for_update=True)
    values: dict[str, Any] = {
        "uow_id": uow_id,
        "owner": owner,
        "retention_seconds": retention_seconds,
        "location": location,
        "partition": partition,
        "identity": encode_detail(identity),
        "columns": encode_names(column_names),
        "algorithm": _name(algorithm, "algorithm", 64),
        "row_count": row_count,
        "checksum": checksum,
        "bytes_stored": bytes_stored,
        "compute_seconds": compute_seconds,
        "bytes_scanned": bytes_scanned,
        "created_at": now,
        "expires_at": now + timedelta(seconds=retention_seconds),
        "status": "active",
        "status_reason": reason,
        "status_at": now,
    }
    action: IntermediateAction
    if existing is None:
        action = "materialized"
        conn.execute(insert(intermediates).values(
            name=name, version=version, verify_seconds=0.0, materializations=1, reuse_count=0,
            last_reused_at=None, **values,
        ))
    else:
        action = "recomputed"
        _update(conn, name, version, materializations=intermediates.c.materializations + 1,
                **values)
    _supersede_others(conn, now=now, name=name, version=version, location=location,
                      partition=partition)
    event_detail = {"location": location, "partition": partition, "row_count": row_count,
                    "checksum": checksum, "bytes_stored": bytes_stored,
                    "compute_seconds": compute_seconds, "bytes_scanned": bytes_scanned,
                    **dict(detail or {})}
    return _logged(conn, now=now, name=name, version=version, action=action, reason=reason,
                   detail=event_detail)


def _supersede_others(conn: Connection, *, now: datetime, name: str, version: str,
                      location: str, partition: str) -> None:
    others = conn.execute(
        select(intermediates.c.name, intermediates.c.version).where(
            intermediates.c.location == location,
            intermediates.c.partition == partition,
            intermediates.c.status == "active",
            not_(and_(*_key(name, version))),
        )
    ).all()
    reason = f"its slice was overwritten by {name} version {version}"
    for other_name, other_version in others:
        _update(conn, other_name, other_version, status="superseded", status_reason=reason,
                status_at=now)
        append_event(conn, name=other_name, version=other_version, action="superseded",
                     reason=reason, at=now, detail={"by": {"name": name, "version": version}})


def _require_active(conn: Connection, name: str, version: str, doing: str
                    ) -> IntermediateRecord:
    entry = get_entry(conn, name, version, for_update=True)
    if entry is None:
        raise LedgerError(f"no intermediate {name!r} version {version!r} in the catalog")
    if entry.status != "active":
        raise LedgerError(
            f"cannot record {doing} of {name} version {version}: it is {entry.status} "
            f"({entry.status_reason})"
        )
    return entry


def record_reuse(
    conn: Connection, *, now: datetime, name: str, version: str, verify_seconds: float,
    reason: str, detail: Mapping[str, Any] | None = None,
) -> IntermediateRecord:
    """Count one reuse (its integrity check's time included); refused past retention."""
    verify = nonnegative_seconds(verify_seconds, "verify_seconds", LedgerError)
    entry = _require_active(conn, name, version, "a reuse")
    if entry.expired(now):
        raise LedgerError(
            f"cannot record a reuse of {name} version {version}: its retention ended at "
            f"{entry.expires_at.isoformat()}"
        )
    _update(conn, name, version, reuse_count=intermediates.c.reuse_count + 1,
            last_reused_at=now, verify_seconds=intermediates.c.verify_seconds + verify)
    return _logged(conn, now=now, name=name, version=version, action="reused", reason=reason,
                   detail={"verify_seconds": verify, **dict(detail or {})})


def record_refusal(
    conn: Connection, *, now: datetime, name: str, version: str, verify_seconds: float,
    reason: str, detail: Mapping[str, Any] | None = None,
) -> IntermediateEvent:
    """Record that a stored version was not reused, and why (e.g. its fingerprint changed)."""
    verify = nonnegative_seconds(verify_seconds, "verify_seconds", LedgerError)
    entry = get_entry(conn, name, version, for_update=True)
    if entry is None:
        raise LedgerError(f"no intermediate {name!r} version {version!r} in the catalog")
    _update(conn, name, version, verify_seconds=intermediates.c.verify_seconds + verify)
    evidence = decode_detail(encode_detail({"verify_seconds": verify, **dict(detail or {})}))
    seq = append_event(conn, name=name, version=version, action="refused", reason=reason,
                       at=now, detail=evidence)
    return IntermediateEvent(seq, name, version, "refused", reason, now, evidence)


def record_expiry(
    conn: Connection, *, now: datetime, name: str, version: str, reason: str,
    detail: Mapping[str, Any] | None = None,
) -> IntermediateRecord:
    """Mark an active version expired (its data was garbage-collected); only past retention."""
    entry = _require_active(conn, name, version, "the expiry")
    if not entry.expired(now):
        raise LedgerError(
            f"{name} version {version} is kept until {entry.expires_at.isoformat()} "
            f"(owner {entry.owner}); it cannot expire at {now.isoformat()}"
        )
    _update(conn, name, version, status="expired", status_reason=reason, status_at=now)
    return _logged(conn, now=now, name=name, version=version, action="expired", reason=reason,
                   detail=detail)


def _update(conn: Connection, name: str, version: str, **values: Any) -> None:
    conn.execute(update(intermediates).where(*_key(name, version)).values(**values))


def _key(name: str, version: str) -> tuple[ColumnElement[bool], ...]:
    return intermediates.c.name == name, intermediates.c.version == version


def _logged(
    conn: Connection, *, now: datetime, name: str, version: str, action: IntermediateAction,
    reason: str, detail: Mapping[str, Any] | None,
) -> IntermediateRecord:
    """Record ``action`` in the entry's history; returns the entry as it is now stored."""
    append_event(conn, name=name, version=version, action=action, reason=reason, at=now,
                 detail=detail)
    record = get_entry(conn, name, version)
    assert record is not None
    return record


class CatalogStore:
    """The catalog as the ``Ledger`` uses it: each call one transaction (or the caller's)."""

    def __init__(self, session: Session, units: UnitStore) -> None:
        self._session = session
        self._units = units

    def record(self, unit: UnitOfWork, **entry: Any) -> IntermediateRecord:
        """Catalog a materialization and, in the same transaction, its producing unit."""
        unit = unit_of_work(unit)
        with self._session.transaction(), self._session.write() as conn:
            self._units.record_in(conn, unit)
            return record_materialization(conn, now=self._session.now(), uow_id=unit.uow_id,
                                          identity=unit.identity(), **entry)

    def write(self, record: Callable[..., T], **arguments: Any) -> T:
        """``record`` (``record_reuse``, ``record_refusal``, ``record_expiry``) now."""
        with self._session.write() as conn:
            return record(conn, now=self._session.now(), **arguments)

    def get(self, name: str, version: str) -> IntermediateRecord | None:
        with self._session.read() as conn:
            return get_entry(conn, name, version)

    def all(self, *, name: str | None, status: IntermediateStatus | None
             ) -> list[IntermediateRecord]:
        with self._session.read() as conn:
            return list_entries(conn, name=name, status=status)

    def events(self, name: str, version: str | None) -> list[IntermediateEvent]:
        with self._session.read() as conn:
            return list_events(conn, name, version)
