"""The half-open data interval ``[start, end)`` a run covers.

Runs are keyed by interval, never by "now" or "latest partition": a rerun of the same interval
selects the same input and replaces the same output slice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone
from functools import cached_property

from twice.errors import InputError

_FIXED_ZONES: dict[timedelta, timezone] = {}
_FIXED_ZONES_KEPT = 512


def fixed_zone(offset: timedelta) -> timezone:
    """``timezone(offset)``, one shared instance per offset: a bound already pinned to it needs
    no conversion (a schedule makes its intervals' bounds with it)."""
    zone = _FIXED_ZONES.get(offset)
    if zone is None:
        zone = timezone(offset)
        if len(_FIXED_ZONES) < _FIXED_ZONES_KEPT:  # real offsets are few; odd ones not kept
            zone = _FIXED_ZONES.setdefault(offset, zone)
    return zone


class IntervalError(InputError):
    """An interval is malformed; the message says which bound and why."""


@dataclass(frozen=True, order=True)
class Interval:
    """A timezone-aware, non-empty, half-open span of data time."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if not isinstance(value, datetime):
                raise IntervalError(
                    f"interval {name} must be a datetime, got {type(value).__name__}"
                )
            if value.tzinfo is None or value.utcoffset() is None:
                raise IntervalError(
                    f"interval {name} must be timezone-aware, got {value.isoformat()}"
                )
            # Pin each bound to its fixed UTC offset: two datetimes sharing one ZoneInfo compare
            # and subtract by wall clock, which gets DST days (23 h / 25 h) and the repeated
            # fall-back hour wrong.
            offset = value.utcoffset()
            assert offset is not None
            zone = fixed_zone(offset)
            if value.tzinfo is not zone:
                object.__setattr__(self, name, value.astimezone(zone))
        if self.end == self.start:
            raise IntervalError(
                f"zero-width interval at {self.start.isoformat()}: start == end would select "
                "no data (Airflow 3 gives this for a bare cron/preset schedule; pin a "
                "data-interval timetable)"
            )
        if self.end < self.start:
            raise IntervalError(
                f"interval end {self.end.isoformat()} is before start {self.start.isoformat()}"
            )

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    def contains(self, instant: datetime) -> bool:
        """Half-open membership: start <= instant < end."""
        return self.start <= instant < self.end

    @cached_property
    def label(self) -> str:
        """Stable, human-readable key: ``2026-11-30T00:00:00+00:00/2026-12-01T00:00:00+00:00``
        (made once: the bounds are frozen, and plans and ledgers key by it)."""
        return f"{self.start.isoformat()}/{self.end.isoformat()}"

    @property
    def short(self) -> str:
        """How a table names the interval, unambiguous across DST: its local date when it is
        one whole local day (``2026-10-25``, also the 25-hour one), else its local start to
        the minute with its offset (``2026-11-01T01:00-04:00`` and ``...-05:00``, the two
        passes of a repeated hour)."""
        start, end = self.start, self.end
        if (start.time() == end.time() == time(0)
                and (end.date() - start.date()).days == 1):
            return start.date().isoformat()
        return start.isoformat(timespec="minutes")

    @classmethod
    def parse(cls, text: str) -> Interval:
        """Parse ``START/END`` (ISO-8601 instants with offsets), the inverse of ``label``."""
        start_text, sep, end_text = text.partition("/")
        if not sep:
            raise IntervalError(f"interval {text!r} must look like START/END")
        try:
            start, end = datetime.fromisoformat(start_text), datetime.fromisoformat(end_text)
        except ValueError as exc:
            raise IntervalError(f"interval {text!r}: {exc}") from None
        return cls(start, end)

    def __str__(self) -> str:
        return self.label
