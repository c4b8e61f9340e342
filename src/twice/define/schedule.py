"""Schedules: which data intervals a pipeline covers, derived from a declared grid.

A run is keyed by its data interval, so the interval must come from a declared schedule, never
from "now" or from a trigger time (Airflow 3 gives a zero-width interval for a bare cron preset,
which silently empties or mislabels partitions). Three grids exist:

- ``Schedule.daily(tz)``: local calendar days, midnight to midnight in ``tz``. Across a DST change
  a day lasts 23 or 25 hours; a day the zone skipped entirely (Pacific/Apia, 2011-12-30) has no
  interval at all.
- ``Schedule.hourly(tz)``: every instant whose local wall clock reads hh:00 starts an interval,
  so a fall-back day has 25 one-hour intervals and a spring-forward day 23.
- ``Schedule.every(step, anchor=..., tz=...)``: fixed elapsed time, ``anchor + k * step``. It does
  not follow the wall clock: ``every(timedelta(hours=6))`` starts at 01:00 local in summer if its
  anchor was midnight in winter. Use ``daily``/``hourly`` when wall-clock alignment matters.

Interval bounds carry the fixed UTC offset in force at that instant (``+00:00``, ``+01:00``), not
the ``ZoneInfo``: Python compares and subtracts two datetimes sharing one ``tzinfo`` by wall clock,
which would make a 25-hour day measure 24 hours and equate the two 01:30s of a fall-back night.

Ranges are half-open ``[start, end)``, and their bounds must lie on the grid: a range that starts
mid-interval would silently cover a partial interval, so it is refused with the nearest bounds.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from itertools import pairwise, starmap
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from twice.core.interval import Interval, fixed_zone
from twice.errors import InputError

ScheduleKind = Literal["daily", "hourly", "every"]
KINDS: tuple[ScheduleKind, ...] = ("daily", "hourly", "every")

_UTC = UTC
_DAY = timedelta(days=1)
_HOUR = timedelta(hours=1)
_TICK = timedelta(microseconds=1)
# Every UTC offset ever used (local mean time included) lies well within this, so enumerating wall
# marks this far beyond a UTC range finds every boundary inside it.
_OFFSET_MARGIN = timedelta(hours=26)
# A range longer than this is almost certainly a units mistake (every(1 s) over a year).
MAX_INTERVALS = 1_000_000
# Daily and hourly grids are enumerated this many intervals at a time (see ``_points``).
_CHUNK = 720
_DEFAULT_ANCHOR = datetime(2000, 1, 1)
# Data intervals lie in these years. The bound is far from datetime's own limits (years 1 and
# 9999) so that the day and offset arithmetic around an interval can never overflow.
FIRST_YEAR, LAST_YEAR = 1000, 8999


class ScheduleError(InputError):
    """A schedule or an interval argument is invalid; the message names the field."""


class OpenIntervalError(ScheduleError):
    """Intervals that have not ended yet were asked for without allowing them.

    ``first`` is the earliest open one, ``count`` how many there are, ``as_of`` the "now" they
    were judged against; the message names the first, the count and how to allow them
    (``allow``: the option or parameter that permits them).
    """

    def __init__(self, first: Interval, count: int, as_of: datetime, allow: str) -> None:
        self.first = first
        self.count = count
        self.as_of = as_of
        self.allow = allow
        more = f" (and {count - 1} later interval(s))" if count > 1 else ""
        super().__init__(
            f"interval {first.label}{more} has not ended yet: it ends {first.end.isoformat()}, "
            f"now is {as_of.isoformat()}, so its output would cover a partial interval and be "
            f"recorded as if complete; pass {allow} to run it anyway (the run is then recorded "
            "as run on an open interval)"
        )

    def allowed_by(self, allow: str) -> OpenIntervalError:
        """The same refusal, naming another way to allow it (a CLI option)."""
        return OpenIntervalError(self.first, self.count, self.as_of, allow)


def open_intervals(intervals: Iterable[Interval], as_of: datetime) -> list[Interval]:
    """The intervals among ``intervals`` that have not ended at ``as_of`` (end after it)."""
    return [interval for interval in intervals if interval.end > as_of]


def refuse_open_intervals(intervals: Iterable[Interval], as_of: datetime, *, allow_open: bool,
                          allow: str = "allow_open=True") -> list[Interval]:
    """The open intervals among ``intervals`` (see ``open_intervals``); ``OpenIntervalError``
    naming them and ``allow`` (what permits them) unless ``allow_open``.

    Every driver (``twice run``, ``twice backfill``, ``twice worker``, the executor itself)
    calls this before anything is recorded: an interval that has not ended would otherwise be
    recorded succeeded over the part of its data that exists so far.
    """
    found = open_intervals(intervals, as_of)
    if found and not allow_open:
        raise OpenIntervalError(min(found), len(found), as_of, allow)
    return found


def _zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise ScheduleError(
            f"tz: expected an IANA time zone name such as 'Europe/Lisbon', got {tz!r}"
        )
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(
            f"tz: unknown time zone {tz!r} (use an IANA name such as 'Europe/Lisbon' or 'UTC'; "
            "names are case-sensitive)"
        ) from None


def _format_step(step: timedelta) -> str:
    seconds = int(step.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or str(step)


@dataclass(frozen=True)
class Schedule:
    """A grid of data intervals in one time zone; build it with ``daily``/``hourly``/``every``."""

    kind: ScheduleKind
    tz: str = "UTC"
    step: timedelta | None = None
    anchor: datetime | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ScheduleError(f"kind: must be one of {', '.join(KINDS)}, got {self.kind!r}")
        _zone(self.tz)
        if self.kind != "every":
            if self.step is not None or self.anchor is not None:
                raise ScheduleError(f"step/anchor: only Schedule.every takes them, not {self.kind}")
            return
        if not isinstance(self.step, timedelta):
            raise ScheduleError(f"step: expected a timedelta, got {type(self.step).__name__}")
        if self.step < timedelta(seconds=1):
            raise ScheduleError(f"step: must be at least 1 second, got {self.step}")
        if not isinstance(self.anchor, datetime) or self.anchor.utcoffset() is None:
            raise ScheduleError("anchor: expected a timezone-aware datetime (use Schedule.every)")
        # A fixed offset, not a ZoneInfo: aware arithmetic with a ZoneInfo is wall-clock arithmetic
        # and would drift by an hour across DST.
        object.__setattr__(self, "anchor", self._local(self.anchor.astimezone(_UTC)))

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def daily(cls, tz: str = "UTC") -> Schedule:
        """Local calendar days in ``tz`` (23 or 25 hours across a DST change)."""
        return cls("daily", tz)

    @classmethod
    def hourly(cls, tz: str = "UTC") -> Schedule:
        """Local clock hours in ``tz`` (wall clock at hh:00; both passes of a repeated hour)."""
        return cls("hourly", tz)

    @classmethod
    def every(
        cls, step: timedelta, anchor: date | datetime | None = None, tz: str = "UTC"
    ) -> Schedule:
        """Fixed elapsed-time intervals ``anchor + k * step``.

        ``anchor`` defaults to 2000-01-01T00:00 in ``tz``, so a step that divides a day lines up
        with local midnight (in standard time). A naive or date anchor is read in ``tz``.
        """
        if not isinstance(step, timedelta):
            raise ScheduleError(f"step: expected a timedelta, got {type(step).__name__}")
        probe = cls("daily", tz)
        value = _DEFAULT_ANCHOR if anchor is None else anchor
        instant = probe._instant(value, "anchor")
        return cls("every", tz, step, instant)

    # -- reading ------------------------------------------------------------------------------

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    @property
    def nominal_duration(self) -> timedelta:
        """The usual interval length; DST days and hours may differ (see ``Interval.duration``)."""
        if self.kind == "daily":
            return _DAY
        if self.kind == "hourly":
            return _HOUR
        assert self.step is not None
        return self.step

    def __str__(self) -> str:
        if self.kind == "every":
            assert self.step is not None and self.anchor is not None
            return f"every {_format_step(self.step)} from {self.anchor.isoformat()} ({self.tz})"
        return f"{self.kind} ({self.tz})"

    def interval_for(self, when: date | datetime) -> Interval:
        """The interval containing ``when`` (a date means the start of that local day).

        A naive datetime is read as wall time in the schedule's zone; an ambiguous or skipped
        wall time is refused, since guessing would pick the wrong partition.
        """
        return self._containing(self._instant(when, "when"))

    def intervals(self, start: date | datetime, end: date | datetime) -> list[Interval]:
        """The intervals tiling the half-open range ``[start, end)``, in order.

        Both bounds must be interval boundaries of this schedule (a date means the start of that
        local day), so the list covers the range exactly: no gap, no overlap, no partial interval.
        """
        lo, hi = self._range(start, end)
        return self._tiles(lo, hi)

    def span(self, start: date | datetime, end: date | datetime) -> Interval:
        """The range ``[start, end)`` as one interval (bounds checked as in ``intervals``)."""
        lo, hi = self._range(start, end)
        return Interval(self._local(lo), self._local(hi))

    def refuse_open(self, start: date | datetime, end: date | datetime, as_of: datetime, *,
                    allow_open: bool, allow: str = "allow_open=True") -> int:
        """How many intervals of ``[start, end)`` have not ended at ``as_of``, without listing
        the range; ``OpenIntervalError`` (naming the first and ``allow``) unless
        ``allow_open``. The open ones are the tail from the interval holding ``as_of``."""
        whole = self.span(start, end)
        if whole.end <= as_of:
            return 0
        tail = max(whole.start, self.interval_for(as_of).start)
        count = self.count_intervals(tail, whole.end)
        if count and not allow_open:
            first = next(self.iter_intervals(tail, whole.end))
            raise OpenIntervalError(first, count, as_of, allow)
        return count

    def iter_intervals(self, start: date | datetime, end: date | datetime) -> Iterator[Interval]:
        """``intervals(start, end)`` one at a time, computed as they are taken: the first is
        ready at once, however long the range. The bounds are checked now, not on first use."""
        lo, hi = self._range(start, end)
        self._check_size(lo, hi)
        return self._iter_tiles(lo, hi)

    def count_intervals(self, start: date | datetime, end: date | datetime) -> int:
        """``len(intervals(start, end))`` without building the intervals (constant time for
        ``every``; a day at a time for ``hourly``, by arithmetic while the UTC offset holds)."""
        lo, hi = self._range(start, end)
        return self._count(lo, hi)

    def parse_interval_arg(self, text: str) -> Interval:
        """Parse a CLI interval value into one span on this schedule's grid.

        - ``2026-11-30``: that local day; on a schedule whose intervals last longer than a day,
          the interval starting at that midnight.
        - ``2026-11-30T05:00`` (naive: schedule zone; or with an offset): the interval starting
          exactly there.
        - ``START/END``: each a date or datetime as above, the half-open range ``[START, END)``.

        The span may cover several intervals: ``intervals(span.start, span.end)`` lists them.
        """
        if not isinstance(text, str) or not text.strip():
            raise ScheduleError(
                "interval: empty value; expected 2026-11-30, 2026-11-30T05:00 or START/END"
            )
        text = text.strip()
        if "/" in text:
            start_text, _, end_text = text.partition("/")
            start = parse_point(start_text, "start")
            end = parse_point(end_text, "end")
            lo, hi = self._range(start, end)
            return Interval(self._local(lo), self._local(hi))
        point = parse_point(text, "interval")
        if isinstance(point, datetime):
            instant = self._instant(point, "interval")
            found = self._containing(instant)
            if found.start != instant:
                raise ScheduleError(
                    f"interval: {text} is not an interval start of the {self} schedule; the "
                    f"interval containing it is {found}"
                )
            return found
        day_start = self._day_start(point, "interval", strict=True)
        first = self._containing(day_start)
        if first.start != day_start:
            raise ScheduleError(
                f"interval: {text} does not start an interval of the {self} schedule; the interval "
                f"containing its midnight is {first}"
            )
        next_day = self._day_start(point + _DAY, "interval", strict=False)
        if first.end >= next_day:
            return first
        if not self.on_grid(next_day):
            raise ScheduleError(
                f"interval: the day {text} does not end on the {self} grid (no interval ends at "
                f"{self._local(next_day).isoformat()}); give START/END on the grid instead"
            )
        return Interval(first.start, self._local(next_day))

    def parse_intervals_arg(self, text: str) -> list[Interval]:
        """``parse_interval_arg`` then split the span into this schedule's intervals."""
        span = self.parse_interval_arg(text)
        return self._tiles(span.start.astimezone(_UTC), span.end.astimezone(_UTC))

    def on_grid(self, when: datetime) -> bool:
        """Whether the aware instant ``when`` is an interval boundary of this schedule."""
        instant = self._instant(when, "when")
        return self._containing(instant).start == instant

    def canonical(self, interval: Interval) -> Interval:
        """``interval`` as this schedule writes it, or ``ScheduleError`` if it is not one of ours.

        Two spellings of the same instants (``+00:00`` versus ``+01:00`` offsets) would hash to
        different units of work; normalising first keeps ids stable.
        """
        if not isinstance(interval, Interval):
            raise ScheduleError(f"interval: expected an Interval, got {type(interval).__name__}")
        return _canonical(self, interval)

    def _find_canonical(self, interval: Interval) -> Interval:
        quick = self._quick_canonical(interval)
        if quick is not None:
            return quick
        found = self._containing(interval.start.astimezone(_UTC))
        if found != interval:
            raise ScheduleError(
                f"interval: {interval} is not an interval of the {self} schedule (the one "
                f"containing its start is {found})"
            )
        return found

    def at_local(self, wall: datetime) -> datetime:
        """The first instant at or after the naive local wall time ``wall``.

        Lenient on purpose (used for deadlines such as 06:00 local): a wall time skipped by a DST
        change maps to the moment the clock jumps, a repeated one to its first occurrence.
        """
        if not isinstance(wall, datetime) or wall.tzinfo is not None:
            raise ScheduleError("wall: expected a naive datetime (local wall time)")
        return self._local(self._first_at_or_after(wall))

    # -- internals: instants are aware UTC datetimes ------------------------------------------

    def _local(self, instant: datetime) -> datetime:
        local = instant.astimezone(self.zone)
        offset = local.utcoffset()
        assert offset is not None
        return local.replace(tzinfo=fixed_zone(offset), fold=0)

    def _wall(self, instant: datetime) -> datetime:
        return instant.astimezone(self.zone).replace(tzinfo=None, fold=0)

    def _first_at_or_after(self, wall: datetime) -> datetime:
        zone = self.zone
        guess = wall.replace(tzinfo=zone, fold=0).astimezone(_UTC)
        if self._wall(guess) == wall:
            return guess  # exists; fold=0 is the first of two passes if it is repeated
        # Skipped by a DST change: bisect for the jump between the two offsets' readings.
        lo = wall.replace(tzinfo=zone, fold=1).astimezone(_UTC)
        lo, hi = min(lo, guess), max(lo, guess)
        while hi - lo > timedelta(seconds=1):
            mid = lo + (hi - lo) // 2
            mid = mid.replace(microsecond=0)
            if mid <= lo:
                break
            if self._wall(mid) >= wall:
                hi = mid
            else:
                lo = mid
        return hi

    def _instant(self, value: object, field: str) -> datetime:
        if isinstance(value, date):
            check_year(value, field)
        if isinstance(value, datetime):
            if value.tzinfo is not None and value.utcoffset() is not None:
                return value.astimezone(_UTC)
            return self._strict_wall(value, field)
        if isinstance(value, date):
            return self._day_start(value, field, strict=True)
        raise ScheduleError(f"{field}: expected a date or datetime, got {type(value).__name__}")

    def _strict_wall(self, wall: datetime, field: str) -> datetime:
        zone = self.zone
        first = wall.replace(tzinfo=zone, fold=0).astimezone(_UTC)
        second = wall.replace(tzinfo=zone, fold=1).astimezone(_UTC)
        text = wall.isoformat()
        if self._wall(first) != wall:
            raise ScheduleError(
                f"{field}: {text} does not exist in {self.tz} (the clock skips it at a DST "
                "change); give an offset or a nearby time"
            )
        if first != second:
            options = " or ".join(self._local(i).isoformat() for i in (first, second))
            raise ScheduleError(
                f"{field}: {text} is ambiguous in {self.tz} (the clock shows it twice); "
                f"give an offset: {options}"
            )
        return first

    def _day_start(self, day: date, field: str, *, strict: bool) -> datetime:
        midnight = datetime(day.year, day.month, day.day)
        start = self._first_at_or_after(midnight)
        if strict and start == self._first_at_or_after(midnight + _DAY):
            raise ScheduleError(f"{field}: {day.isoformat()} does not exist in {self.tz} (skipped)")
        return start

    def _range(self, start: object, end: object) -> tuple[datetime, datetime]:
        lo = self._instant(start, "start")
        hi = self._instant(end, "end")
        if hi <= lo:
            raise ScheduleError(
                f"end: {self._local(hi).isoformat()} must be after start "
                f"{self._local(lo).isoformat()} (ranges are half-open: [start, end))"
            )
        for field, instant in (("start", lo), ("end", hi)):
            found = self._containing(instant)
            if found.start.astimezone(_UTC) != instant:
                raise ScheduleError(
                    f"{field}: {self._local(instant).isoformat()} is not an interval boundary of "
                    f"the {self} schedule; the nearest boundaries are {found.start.isoformat()} "
                    f"and {found.end.isoformat()}"
                )
        return lo, hi

    def _containing(self, instant: datetime) -> Interval:
        if self.kind == "every":
            assert self.step is not None and self.anchor is not None
            anchor = self.anchor.astimezone(_UTC)
            start = anchor + ((instant - anchor) // self.step) * self.step
            return Interval(self._local(start), self._local(start + self.step))
        reach = 3 * self.nominal_duration
        bounds = self._calendar_boundaries(instant - reach, instant + reach)
        before = [b for b in bounds if b <= instant]
        after = [b for b in bounds if b > instant]
        if not before or not after:  # pragma: no cover - would need a 3-interval clock jump
            raise ScheduleError(f"when: no {self} interval found around {instant.isoformat()}")
        return Interval(self._local(before[-1]), self._local(after[0]))

    def _quick_canonical(self, interval: Interval) -> Interval | None:
        """``canonical`` without searching the grid, when the answer is plain: a UTC offset
        that holds over the whole interval, a start on a mark (and, daily, the first instant of
        that midnight) and the nominal length. None: not plain, search (``_containing``)."""
        start, end = interval.start.astimezone(_UTC), interval.end.astimezone(_UTC)
        if self.kind == "every":
            assert self.step is not None and self.anchor is not None
            if end - start != self.step or (start - self.anchor) % self.step:
                return None
        else:
            if end - start != self.nominal_duration:
                return None
            local_start, local_end = self._local(start), self._local(end)
            if local_start.utcoffset() != local_end.utcoffset():
                return None  # a DST change inside: the search knows the details
            wall = local_start.replace(tzinfo=None)
            if wall.minute or wall.second or wall.microsecond:
                return None
            if self.kind == "daily" and (wall.hour or self._first_at_or_after(wall) != start):
                return None
            return Interval(local_start, local_end)
        return Interval(self._local(start), self._local(end))

    def _check_size(self, lo: datetime, hi: datetime) -> None:
        if self.kind == "every":
            assert self.step is not None
            count = (hi - lo) // self.step
            if count > MAX_INTERVALS:
                raise ScheduleError(
                    f"end: the range holds {count} intervals of {self}; split it "
                    f"(max {MAX_INTERVALS})"
                )
        elif (hi - lo) // self.nominal_duration > MAX_INTERVALS:
            raise ScheduleError(f"end: the range is too long for {self}; split it")

    def _tiles(self, lo: datetime, hi: datetime) -> list[Interval]:
        self._check_size(lo, hi)
        return list(self._iter_tiles(lo, hi))

    def _iter_tiles(self, lo: datetime, hi: datetime) -> Iterator[Interval]:
        """The intervals between two grid instants, each remembered as its own canonical
        spelling (it is: both bounds are ``_local`` grid points, as ``canonical`` writes them)."""
        points = (self._local(point) for point in self._points(lo, hi))
        put = _CANONICAL.put
        return (put(self, tile, tile) for tile in starmap(Interval, pairwise(points)))

    def _points(self, lo: datetime, hi: datetime) -> Iterator[datetime]:
        """The grid's boundaries in ``[lo, hi]``, in order, computed a chunk at a time."""
        if self.kind == "every":
            assert self.step is not None
            for k in range((hi - lo) // self.step + 1):
                yield lo + k * self.step
            return
        offset = _fixed_offset(self.tz)
        if offset is not None:
            yield from self._fixed_points(lo, hi, offset)
            return
        yield from self._calendar_points(lo, hi)

    def _fixed_points(self, lo: datetime, hi: datetime, offset: timedelta
                      ) -> Iterator[datetime]:
        """:meth:`_calendar_points` of a zone whose offset never changes (UTC, ``Etc/GMT+5``):
        every local hh:00 (hourly) or midnight (daily), found by arithmetic, not by asking
        the zone about each mark."""
        step = self.nominal_duration
        # the local reading of ``lo`` (still an aware UTC datetime), its first mark, back to UTC
        point = _first_mark(lo + offset, step) - offset
        while point <= hi:
            yield point
            point += step

    def _calendar_points(self, lo: datetime, hi: datetime) -> Iterator[datetime]:
        """The daily or hourly grid's boundaries in ``[lo, hi]``, asking the zone about each
        local mark (DST changes), a chunk at a time."""
        chunk = _CHUNK * self.nominal_duration
        last: datetime | None = None
        a = lo
        while True:
            b = min(a + chunk, hi)
            for point in self._calendar_boundaries(a, b):
                if last is None or point > last:  # a chunk's end is the next one's start
                    yield point
                    last = point
            if b >= hi:
                return
            a = b

    def _count(self, lo: datetime, hi: datetime) -> int:
        if self.kind == "every":
            assert self.step is not None
            return (hi - lo) // self.step
        if self.kind == "daily":
            return sum(1 for _ in self._points(lo, hi)) - 1
        # Hourly: while the UTC offset holds, exactly one boundary per elapsed hour (the
        # instants whose wall clock reads hh:00); a day whose offset changes is walked, its
        # first instant included (a skipped mark starts an interval at the change itself).
        count = 0
        a = lo
        offset_a = self._local(a - _TICK).utcoffset()
        while a < hi:
            b = min(a + _DAY, hi)
            offset_b = self._local(b - _TICK).utcoffset()
            if offset_a == offset_b:
                assert offset_a is not None
                count += _marks_between(a + offset_a, b + offset_a)
            else:
                count += sum(1 for point in self._calendar_boundaries(a, b) if point < b)
            a, offset_a = b, offset_b
        return count

    def _calendar_boundaries(self, lo: datetime, hi: datetime) -> list[datetime]:
        """Sorted boundary instants b with lo <= b <= hi (daily and hourly grids)."""
        found: set[datetime] = set()
        for wall in self._marks(lo - _OFFSET_MARGIN, hi + _OFFSET_MARGIN):
            for instant in self._instants_for_mark(wall):
                if lo <= instant <= hi:
                    found.add(instant)
        return sorted(found)

    def _marks(self, lo: datetime, hi: datetime) -> Iterator[datetime]:
        """Naive wall-clock marks (midnights or hh:00) between two UTC instants read as naive."""
        unit = self.nominal_duration
        first = lo.replace(tzinfo=None, minute=0, second=0, microsecond=0)
        if self.kind == "daily":
            first = first.replace(hour=0)
        mark, last = first, hi.replace(tzinfo=None)
        while mark <= last:
            yield mark
            mark += unit

    def _instants_for_mark(self, wall: datetime) -> list[datetime]:
        first = self._first_at_or_after(wall)
        if self.kind == "daily":
            return [first]  # a day starts once, even if its midnight is repeated
        second = wall.replace(tzinfo=self.zone, fold=1).astimezone(_UTC)
        if second != first and self._wall(second) == wall:
            return [first, second]  # the repeated hour of a fall-back night
        return [first]


#: Zones whose UTC offset never changed (tzdata's ``Etc`` area and its aliases).
_FIXED_OFFSET_ZONE = re.compile(
    r"(?:Etc/)?(?:UTC|UCT|GMT|Universal|Zulu|Greenwich|GMT[+-]\d{1,2}|GMT0)")


@lru_cache(maxsize=64)
def _fixed_offset(tz: str) -> timedelta | None:
    """The one UTC offset of a zone that never changes it, else None (ask the zone)."""
    if _FIXED_OFFSET_ZONE.fullmatch(tz) is None:
        return None
    return ZoneInfo(tz).utcoffset(datetime(2000, 1, 1))


def _first_mark(wall: datetime, step: timedelta) -> datetime:
    """The first mark at or after the wall-clock reading ``wall``: hh:00:00, or midnight when
    ``step`` is a day."""
    first = wall.replace(minute=0, second=0, microsecond=0)
    if step == _DAY:
        first = first.replace(hour=0)
    return first if first >= wall else first + step


def _marks_between(lo: datetime, hi: datetime) -> int:
    """How many whole hours (hh:00:00) lie in ``[lo, hi)``."""
    first = _first_mark(lo, _HOUR)
    return 0 if first >= hi else -((first - hi) // _HOUR)


def check_year(value: date, field: str) -> None:
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        raise ScheduleError(
            f"{field}: {value.isoformat()} is outside the supported years "
            f"{FIRST_YEAR}-{LAST_YEAR}"
        )


#: The ISO-8601 forms accepted for a date or an instant: the extended calendar form, at most
#: microseconds. Python would also take ISO week dates (``2026-W45``: only its Monday), the
#: basic form (``20261102``) and nanoseconds (silently cut): each means something else here.
_ISO_POINT = re.compile(
    r"\d{4}-\d{2}-\d{2}"
    r"(?:[T ]\d{2}(?::\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?)?"
)


def parse_point(text: str, field: str) -> date | datetime:
    """A date or datetime in the ISO forms every ``--interval`` takes (``ScheduleError``
    naming ``field`` otherwise); naive stays naive, for the caller's zone."""
    text = text.strip()
    try:
        point: date | datetime
        if not _ISO_POINT.fullmatch(text):
            raise ValueError(text)
        if "T" not in text and " " not in text and len(text) <= 10:
            point = date.fromisoformat(text)
        else:
            point = datetime.fromisoformat(text)
    except ValueError:
        raise ScheduleError(
            f"{field}: {text!r} is not an ISO date or datetime (e.g. 2026-11-30, "
            "2026-11-30T05:00 or 2026-11-30T05:00+01:00)"
        ) from None
    check_year(point, field)
    return point


class _CanonicalMemo:
    """``Schedule.canonical``'s answers, the latest ``kept`` of them: a run asks it of the same
    interval several times (planning, identifying the unit, running it), equal intervals have
    one canonical spelling, and an interval the schedule made itself (``iter_intervals``) is
    its own answer, so a 100,000-interval plan never searches the grid (a refusal is not
    remembered)."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._found: dict[tuple[Schedule, Interval], Interval] = {}
        self._lock = threading.Lock()

    def get(self, schedule: Schedule, interval: Interval) -> Interval | None:
        return self._found.get((schedule, interval))

    def put(self, schedule: Schedule, interval: Interval, canonical: Interval) -> Interval:
        with self._lock:  # the oldest goes first (dicts keep insertion order)
            if len(self._found) >= self._kept:
                del self._found[next(iter(self._found))]
            self._found[(schedule, interval)] = canonical
        return canonical


_CANONICAL = _CanonicalMemo(4096)


def _canonical(schedule: Schedule, interval: Interval) -> Interval:
    """:meth:`Schedule.canonical` through the memo."""
    found = _CANONICAL.get(schedule, interval)
    if found is None:
        found = _CANONICAL.put(schedule, interval, schedule._find_canonical(interval))
    return found
