"""The two time scales the planner accepts: teaching-clock seconds and real ISO-8601 instants.

The decision engine only adds and compares numbers on one clock. Real instants and durations are
turned into integer microseconds since the epoch so that the arithmetic stays exact (a finish that
lands exactly on the deadline is still inside it) and turned back for output.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from twice.errors import InputError

MICROS = 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DURATION = re.compile(
    r"P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:[.,]\d{1,6})?)S)?)?"
)


class TimeValueError(InputError):
    """A time value that cannot be read; the caller adds where it was."""


def nonnegative_seconds(value: object, name: str,
                        error: type[Exception] = ValueError) -> float:
    """``value`` as a float number of seconds >= 0, else ``error`` naming ``name`` (a bool,
    a non-number, NaN or infinity is refused too)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise error(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def parse_instant(text: str) -> datetime:
    """ISO-8601 instant with an offset (``Z`` allowed); naive times are refused, not guessed."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise TimeValueError(f"{text!r} is not an ISO-8601 instant") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise TimeValueError(f"{text!r} has no UTC offset (write e.g. 2026-12-01T05:30:00Z)")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise TimeValueError(f"{text!r} is outside the years 1-9999 in UTC") from None
    return value


def parse_duration(text: str) -> timedelta:
    """ISO-8601 duration in weeks, days, hours, minutes and seconds (``PT1H30M``, ``P1D``)."""
    match = _DURATION.fullmatch(text)
    if match is None or text in ("P", "PT") or text.endswith("T"):
        raise TimeValueError(f"{text!r} is not an ISO-8601 duration like PT10M or P1DT2H")
    parts = {key: value for key, value in match.groupdict().items() if value is not None}
    seconds = float(parts.get("s", "0").replace(",", "."))
    try:
        return timedelta(
            weeks=int(parts.get("w", 0)), days=int(parts.get("d", 0)),
            hours=int(parts.get("h", 0)), minutes=int(parts.get("m", 0)), seconds=seconds,
        )
    except OverflowError:
        raise TimeValueError(f"{text!r} is longer than any duration this clock can hold") from None


def instant_to_micros(value: datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * MICROS + delta.microseconds


def duration_to_micros(value: timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * MICROS + value.microseconds


def micros_to_instant(micros: int | float) -> datetime:
    return _EPOCH + timedelta(microseconds=round(micros))


def format_instant(micros: int | float) -> str:
    """UTC, ``Z`` suffix, fractional seconds only when present."""
    value = micros_to_instant(micros)
    spec = "%Y-%m-%dT%H:%M:%S.%fZ" if value.microsecond else "%Y-%m-%dT%H:%M:%SZ"
    return value.strftime(spec)


def format_duration(micros: int | float) -> str:
    """ISO-8601 duration, largest units first (``PT1H2M3S``; ``PT0S`` for zero)."""
    total = round(micros)
    sign = "-" if total < 0 else ""
    whole, fraction = divmod(abs(total), MICROS)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    text = "P" + (f"{days}D" if days else "")
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or fraction or not (days or clock):
        clock += f"{seconds}.{fraction:06d}".rstrip("0").rstrip(".") + "S" if fraction else (
            f"{seconds}S")
    return sign + text + ("T" + clock if clock else "")


@dataclass(frozen=True)
class Clock:
    """How one fixture writes time: ``teaching`` (plain seconds) or ``iso`` (real instants)."""

    kind: str

    @property
    def iso(self) -> bool:
        return self.kind == "iso"

    def when(self, value: int | float) -> str:
        return format_instant(value) if self.iso else _seconds(value)

    def span(self, value: int | float) -> str:
        if self.iso:
            return format_duration(value)
        return f"{_seconds(value)} s"


def _seconds(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
