"""The catalog of materialized intermediates: which version is stored where, and its history.

``twice.engine.intermediates`` decides (reuse, refuse, recompute, expire); these functions record
the
outcome inside a write transaction supplied by the ``Ledger``. Writers of one stored slice
(``location`` + ``partition``) are serialised, so the rule "at most one active version per
slice" holds across processes: writing a version supersedes whatever was active there, because
its rows were just replaced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, insert, not_, select, update
from sqlalchemy.engine import Connection, RowMapping

from twice.ledger.engine import lock_key
from twice.ledger.errors import LedgerError
from twice.ledger.journal import decode_detail, encode_detail
from twice.ledger.records import (
    INTERMEDIATE_STATUSES,
    IntermediateAction,
    IntermediateEvent,
    IntermediateRecord,
    IntermediateStatus,
)
from twice.ledger.schema import intermediate_events, intermediates

_MAX_NAME = 200


def _name(value: object, field: str, limit: int = _MAX_NAME) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LedgerError(f"intermediate {field} must be a non-empty string, got {value!r}")
    if len(value) > limit:
        raise LedgerError(f"intermediate {field} is longer than {limit} characters")
    return value


def _non_negative_int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LedgerError(f"{field} must be an integer >= 0, got {value!r}")
    return value


def _seconds(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LedgerError(f"{field} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise LedgerError(f"{field} must be finite and >= 0, got {value!r}")
    return float(value)


def record_from_row(row: RowMapping) -> IntermediateRecord:
    return IntermediateRecord(
        name=row["name"],
        version=row["version"],
        uow_id=row["uow_id"],
        owner=row["owner"],
        retention=timedelta(seconds=row["retention_seconds"]),
        location=row["location"],
        partition=row["partition"],
        identity=decode_detail(row["identity"]),
        columns=tuple(decode_detail(row["columns"])["columns"]),
        algorithm=row["algorithm"],
        row_count=row["row_count"],
        checksum=row["checksum"],
        bytes_stored=row["bytes_stored"],
        compute_seconds=float(row["compute_seconds"]),
        bytes_scanned=row["bytes_scanned"],
        verify_seconds=float(row["verify_seconds"]),
        materializations=row["materializations"],
        reuse_count=row["reuse_count"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        last_reused_at=row["last_reused_at"],
        status=row["status"],
        status_reason=row["status_reason"],
        status_at=row["status_at"],
    )


def event_from_row(row: RowMapping) -> IntermediateEvent:
    return IntermediateEvent(
        seq=row["seq"],
        name=row["name"],
        version=row["version"],
        action=row["action"],
        reason=row["reason"],
        at=row["at"],
        detail=decode_detail(row["detail"]),
    )


def get_entry(
    conn: Connection, name: str, version: str, *, for_update: bool = False
) -> IntermediateRecord | None:
    query = select(intermediates).where(
        intermediates.c.name == name, intermediates.c.version == version
    )
    if for_update:
        query = query.with_for_update(key_share=True)
    row = conn.execute(query).mappings().first()
    return None if row is None else record_from_row(row)


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
    return [record_from_row(row) for row in conn.execute(query).mappings()]


def list_events(conn: Connection, name: str, version: str | None = None
                ) -> list[IntermediateEvent]:
    query = select(intermediate_events).where(intermediate_events.c.name == name)
    if version is not None:
        query = query.where(intermediate_events.c.version == version)
    query = query.order_by(intermediate_events.c.seq)
    return [event_from_row(row) for row in conn.execute(query).mappings()]


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
    result = conn.execute(
        insert(intermediate_events).values(
            name=name, version=version, action=action, reason=_name(reason, "reason", 10_000),
            at=at, detail=encode_detail(detail),
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def record_materialization(
    conn: Connection,
    *,
    now: datetime,
    name: str,
    version: str,
    uow_id: str,
    owner: str,
    retention_seconds: int,
    location: str,
    partition: str,
    identity: Mapping[str, str],
    columns: Sequence[str],
    algorithm: str,
    row_count: int,
    checksum: str,
    bytes_stored: int,
    compute_seconds: float,
    bytes_scanned: int | None,
    reason: str,
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
    row_count = _non_negative_int(row_count, "row_count")
    bytes_stored = _non_negative_int(bytes_stored, "bytes_stored")
    compute_seconds = _seconds(compute_seconds, "compute_seconds")
    if bytes_scanned is not None:
        bytes_scanned = _non_negative_int(bytes_scanned, "bytes_scanned")
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
        "columns": encode_detail({"columns": column_names}),
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
        conn.execute(
            update(intermediates)
            .where(intermediates.c.name == name, intermediates.c.version == version)
            .values(materializations=intermediates.c.materializations + 1, **values)
        )
    _supersede_others(conn, now=now, name=name, version=version, location=location,
                      partition=partition)
    event_detail = {"location": location, "partition": partition, "row_count": row_count,
                    "checksum": checksum, "bytes_stored": bytes_stored,
                    "compute_seconds": compute_seconds, "bytes_scanned": bytes_scanned,
                    **dict(detail or {})}
    append_event(conn, name=name, version=version, action=action, reason=reason, at=now,
                 detail=event_detail)
    record = get_entry(conn, name, version)
    assert record is not None
    return record


def _supersede_others(conn: Connection, *, now: datetime, name: str, version: str,
                      location: str, partition: str) -> None:
    others = conn.execute(
        select(intermediates.c.name, intermediates.c.version).where(
            intermediates.c.location == location,
            intermediates.c.partition == partition,
            intermediates.c.status == "active",
            not_(and_(intermediates.c.name == name, intermediates.c.version == version)),
        )
    ).all()
    reason = f"its slice was overwritten by {name} version {version}"
    for other_name, other_version in others:
        conn.execute(
            update(intermediates)
            .where(intermediates.c.name == other_name, intermediates.c.version == other_version)
            .values(status="superseded", status_reason=reason, status_at=now)
        )
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
    verify = _seconds(verify_seconds, "verify_seconds")
    entry = _require_active(conn, name, version, "a reuse")
    if entry.expired(now):
        raise LedgerError(
            f"cannot record a reuse of {name} version {version}: its retention ended at "
            f"{entry.expires_at.isoformat()}"
        )
    conn.execute(
        update(intermediates)
        .where(intermediates.c.name == name, intermediates.c.version == version)
        .values(reuse_count=intermediates.c.reuse_count + 1, last_reused_at=now,
                verify_seconds=intermediates.c.verify_seconds + verify)
    )
    append_event(conn, name=name, version=version, action="reused", reason=reason, at=now,
                 detail={"verify_seconds": verify, **dict(detail or {})})
    record = get_entry(conn, name, version)
    assert record is not None
    return record


def record_refusal(
    conn: Connection, *, now: datetime, name: str, version: str, verify_seconds: float,
    reason: str, detail: Mapping[str, Any] | None = None,
) -> IntermediateEvent:
    """Record that a stored version was not reused, and why (e.g. its fingerprint changed)."""
    verify = _seconds(verify_seconds, "verify_seconds")
    entry = get_entry(conn, name, version, for_update=True)
    if entry is None:
        raise LedgerError(f"no intermediate {name!r} version {version!r} in the catalog")
    conn.execute(
        update(intermediates)
        .where(intermediates.c.name == name, intermediates.c.version == version)
        .values(verify_seconds=intermediates.c.verify_seconds + verify)
    )
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
    conn.execute(
        update(intermediates)
        .where(intermediates.c.name == name, intermediates.c.version == version)
        .values(status="expired", status_reason=reason, status_at=now)
    )
    append_event(conn, name=name, version=version, action="expired", reason=reason, at=now,
                 detail=detail)
    record = get_entry(conn, name, version)
    assert record is not None
    return record
