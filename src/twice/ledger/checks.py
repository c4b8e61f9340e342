"""Checks on what callers hand the ledger: it refuses invalid evidence instead of storing it."""

from __future__ import annotations

from datetime import UTC, datetime

from twice.ledger.errors import LedgerError


def text(value: object, name: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not allow_empty):
        raise LedgerError(f"{name} must be a non-empty string, got {value!r}")
    return value


def count(value: object, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LedgerError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def aware(value: object, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise LedgerError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise LedgerError(f"{name} {value.isoformat()} must be timezone-aware")
    return value.astimezone(UTC)


def past(value: datetime | None, name: str, now: datetime) -> datetime:
    """A caller-supplied event time: defaults to now; the future is invalid input."""
    if value is None:
        return now
    instant = aware(value, name)
    if instant > now:
        raise LedgerError(
            f"{name} {instant.isoformat()} is after now ({now.isoformat()}): "
            "evidence cannot come from the future"
        )
    return instant
