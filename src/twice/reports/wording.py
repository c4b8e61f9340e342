"""How reports write times, spans and intervals for people.

One place, so the HTML page, the status update and the runbook say "05:34:00Z" and "4 min" the
same way, and an operator comparing two of them is never misled by formatting.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from twice.core.interval import Interval
from twice.core.resolution import CLAIMS, ResolutionOutcome


def instant(value: datetime) -> str:
    """``2026-12-02 05:34:00Z``: UTC, to the second (the ledger keeps microseconds)."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def clock_time(value: datetime) -> str:
    """``05:34:00Z`` for axis ticks and the short update, where the date is stated once."""
    return value.astimezone(UTC).strftime("%H:%M:%SZ")


def span(value: timedelta) -> str:
    """``4 min 10 s``, ``2 h 5 min``, ``3 d 4 h``: two units at most, largest first."""
    seconds = value.total_seconds()
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        text = f"{seconds:.1f}".rstrip("0").rstrip(".")
        return f"{sign}{text} s"
    whole = round(seconds)
    units = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        count, whole = divmod(whole, size)
        if count or parts:
            parts.append(f"{count} {name}")
        if len(parts) == 2:
            break
    while len(parts) > 1 and parts[-1].startswith("0 "):
        parts.pop()
    return sign + " ".join(parts)


def interval(value: Interval) -> str:
    """A calendar day as ``2026-12-01``; anything else as ``start -> end`` in UTC."""
    start, end = value.start, value.end
    midnight = start.hour == start.minute == start.second == start.microsecond == 0
    if midnight and end - start == timedelta(days=1):
        return start.date().isoformat()
    return f"{instant(start)} -> {instant(end)}"


#: How reports name an outcome an operator resolved by hand (``twice resolve``): what a person
#: said, not what twice or a service saw.
ASSERTED_BY_OPERATOR = "asserted by an operator"


def asserted_by(operator: str, note: str | None = None, said: str | None = None) -> str:
    """``asserted by an operator (alice): checked the table``: the one label of a resolution;
    ``said`` (from :func:`resolution_said`) adds what the operator asserted when the attempt's
    outcome does not say it."""
    text = f"{ASSERTED_BY_OPERATOR} ({operator})"
    if said:
        text += f", {said}"
    if note:
        text += f": {' '.join(note.split())}"
    return text


def resolution_said(asserted: ResolutionOutcome, outcome: str) -> str | None:
    """``--as failed (its effect did not happen)``: which resolution an operator gave, when the
    attempt's recorded ``outcome`` does not tell (both failures close it failed-transient,
    and only the assertion says whether the next run executes it); None when it does."""
    if asserted == outcome:
        return None
    return f"--as {asserted} ({CLAIMS[asserted]})"
