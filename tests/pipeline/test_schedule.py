"""Schedules: DST-aware daily/hourly grids, fixed-step grids, ranges and CLI interval values."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from twice.core.interval import Interval
from twice.define.schedule import Schedule, ScheduleError

LISBON = "Europe/Lisbon"
WET = timezone(timedelta(0))
WEST = timezone(timedelta(hours=1))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


# -- daily ------------------------------------------------------------------------------------


def test_daily_interval_for_a_date_is_that_local_day() -> None:
    interval = Schedule.daily(LISBON).interval_for(date(2026, 11, 30))
    assert interval == Interval(at("2026-11-30T00:00+00:00"), at("2026-12-01T00:00+00:00"))
    assert interval.duration == timedelta(hours=24)


def test_daily_interval_for_an_instant_is_the_day_containing_it() -> None:
    schedule = Schedule.daily(LISBON)
    # 23:30 UTC on 30 June is 00:30 on 1 July in Lisbon (summer time, +01:00)
    assert schedule.interval_for(at("2026-06-30T23:30+00:00")).start == at("2026-07-01T00:00+01:00")
    assert schedule.interval_for(date(2026, 7, 1)).end == at("2026-07-02T00:00+01:00")


def test_daily_lisbon_spring_forward_day_lasts_23_hours() -> None:
    interval = Schedule.daily(LISBON).interval_for(date(2026, 3, 29))
    assert interval.start == at("2026-03-29T00:00+00:00")
    assert interval.end == at("2026-03-30T00:00+01:00")
    assert interval.duration == timedelta(hours=23)
    assert interval.label == "2026-03-29T00:00:00+00:00/2026-03-30T00:00:00+01:00"


def test_daily_lisbon_fall_back_day_lasts_25_hours() -> None:
    interval = Schedule.daily(LISBON).interval_for(date(2026, 10, 25))
    assert interval.start == at("2026-10-25T00:00+01:00")
    assert interval.end == at("2026-10-26T00:00+00:00")
    assert interval.duration == timedelta(hours=25)
    # both 01:30s of the fall-back night belong to that day
    assert interval.contains(at("2026-10-25T01:30+01:00"))
    assert interval.contains(at("2026-10-25T01:30+00:00"))


def test_interval_bounds_use_fixed_offsets_so_durations_are_real() -> None:
    # With ZoneInfo bounds Python would subtract wall clocks and report 24 h for a 25 h day.
    interval = Schedule.daily(LISBON).interval_for(date(2026, 10, 25))
    assert not isinstance(interval.start.tzinfo, ZoneInfo)
    assert interval.end.astimezone(UTC) - interval.start.astimezone(UTC) == timedelta(hours=25)


def test_daily_month_in_lisbon_across_dst_tiles_exactly() -> None:
    days = Schedule.daily(LISBON).intervals(date(2026, 3, 1), date(2026, 4, 1))
    assert len(days) == 31
    assert sum((d.duration for d in days), timedelta()) == timedelta(days=31, hours=-1)
    assert [d.duration for d in days].count(timedelta(hours=23)) == 1


def test_a_day_the_zone_skipped_has_no_interval() -> None:
    # Samoa moved across the date line: 2011-12-30 never happened in Pacific/Apia.
    schedule = Schedule.daily("Pacific/Apia")
    days = schedule.intervals(date(2011, 12, 28), date(2012, 1, 1))
    assert [d.start.date() for d in days] == [
        date(2011, 12, 28),
        date(2011, 12, 29),
        date(2011, 12, 31),
    ]
    assert days[1].duration == timedelta(hours=24)
    with pytest.raises(ScheduleError, match=r"when: 2011-12-30 does not exist in Pacific/Apia"):
        schedule.interval_for(date(2011, 12, 30))


def test_midnight_skipped_by_dst_starts_the_day_at_the_jump() -> None:
    # Chile springs forward at 00:00: the day starts at 01:00 local.
    interval = Schedule.daily("America/Santiago").interval_for(date(2026, 9, 6))
    assert interval.start == at("2026-09-06T01:00-03:00")
    assert interval.duration == timedelta(hours=23)


# -- hourly -----------------------------------------------------------------------------------


def test_hourly_fall_back_day_has_25_one_hour_intervals() -> None:
    hours = Schedule.hourly(LISBON).intervals(date(2026, 10, 25), date(2026, 10, 26))
    assert len(hours) == 25
    assert {h.duration for h in hours} == {timedelta(hours=1)}
    repeated = [h for h in hours if h.start.hour == 1]
    assert [h.start.utcoffset() for h in repeated] == [timedelta(hours=1), timedelta(0)]


def test_hourly_spring_forward_day_has_23_intervals() -> None:
    hours = Schedule.hourly(LISBON).intervals(date(2026, 3, 29), date(2026, 3, 30))
    assert len(hours) == 23
    assert hours[1].start == at("2026-03-29T02:00+01:00")


def test_hourly_follows_half_hour_offsets() -> None:
    interval = Schedule.hourly("Asia/Kolkata").interval_for(at("2026-05-01T10:07+00:00"))
    assert interval.start == at("2026-05-01T15:00+05:30")


def test_hourly_interval_for_naive_datetime_reads_schedule_zone() -> None:
    interval = Schedule.hourly(LISBON).interval_for(datetime(2026, 7, 1, 5, 20))
    assert interval.start == at("2026-07-01T05:00+01:00")


# -- every ------------------------------------------------------------------------------------


def test_every_is_elapsed_time_from_its_anchor() -> None:
    schedule = Schedule.every(timedelta(hours=6), anchor=datetime(2026, 1, 1), tz=LISBON)
    winter = schedule.interval_for(at("2026-01-10T07:00+00:00"))
    assert winter == Interval(at("2026-01-10T06:00+00:00"), at("2026-01-10T12:00+00:00"))
    # not wall-clock: in summer the grid sits at 01:00, 07:00, ... local time
    summer = schedule.interval_for(at("2026-07-10T08:00+01:00"))
    assert summer.start == at("2026-07-10T07:00+01:00")
    assert summer.duration == timedelta(hours=6)


def test_every_default_anchor_is_local_midnight() -> None:
    schedule = Schedule.every(timedelta(minutes=15), tz="Asia/Kolkata")
    interval = schedule.interval_for(at("2026-05-01T10:07+00:00"))
    assert interval.start == at("2026-05-01T15:30+05:30")
    assert interval.end == at("2026-05-01T15:45+05:30")


def test_every_before_the_anchor_works() -> None:
    schedule = Schedule.every(timedelta(minutes=7), anchor=at("2026-01-01T00:00+00:00"))
    interval = schedule.interval_for(at("2025-12-31T23:59+00:00"))
    assert interval == Interval(at("2025-12-31T23:53+00:00"), at("2026-01-01T00:00+00:00"))


def test_every_weekly_with_date_anchor() -> None:
    weeks = Schedule.every(timedelta(days=7), anchor=date(2026, 11, 2))  # a Monday
    assert weeks.interval_for(date(2026, 11, 4)).start == at("2026-11-02T00:00+00:00")
    assert len(weeks.intervals(date(2026, 11, 2), date(2026, 11, 30))) == 4


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Schedule.daily("Europe/Lisbo"), r"tz: unknown time zone 'Europe/Lisbo'"),
        (lambda: Schedule.daily("europe/lisbon"), r"tz: unknown time zone"),
        (lambda: Schedule.hourly(""), r"tz: expected an IANA time zone name"),
        (lambda: Schedule.every(timedelta(0)), r"step: must be at least 1 second"),
        (lambda: Schedule.every(timedelta(minutes=-5)), r"step: must be at least 1 second"),
        (lambda: Schedule.every(15), r"step: expected a timedelta, got int"),  # type: ignore[arg-type]
        (lambda: Schedule.every(timedelta(hours=1), anchor="x"), r"anchor: expected a date"),  # type: ignore[arg-type]
        (lambda: Schedule("weekly"), r"kind: must be one of"),  # type: ignore[arg-type]
    ],
)
def test_bad_schedules_name_the_field(build, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ScheduleError, match=message):
        build()


# -- ranges -----------------------------------------------------------------------------------


def test_intervals_are_half_open_and_end_exclusive() -> None:
    days = Schedule.daily().intervals(date(2026, 11, 1), date(2026, 12, 1))
    assert len(days) == 30
    assert days[0].start == at("2026-11-01T00:00+00:00")
    assert days[-1].end == at("2026-12-01T00:00+00:00")


def test_intervals_refuse_bounds_off_the_grid() -> None:
    schedule = Schedule.daily(LISBON)
    with pytest.raises(
        ScheduleError,
        match=r"start: 2026-11-30T05:00:00\+00:00 is not an interval "
        r"boundary of the daily \(Europe/Lisbon\) schedule",
    ):
        schedule.intervals(at("2026-11-30T05:00+00:00"), date(2026, 12, 2))
    with pytest.raises(ScheduleError, match=r"^end: .* nearest boundaries are "):
        schedule.intervals(date(2026, 11, 30), at("2026-12-01T12:00+00:00"))


def test_intervals_refuse_empty_or_reversed_ranges() -> None:
    with pytest.raises(ScheduleError, match=r"end: .* must be after start"):
        Schedule.daily().intervals(date(2026, 12, 1), date(2026, 12, 1))
    with pytest.raises(ScheduleError, match=r"end: .* must be after start"):
        Schedule.daily().intervals(date(2026, 12, 2), date(2026, 12, 1))


def test_intervals_refuse_bad_types_and_absurd_ranges() -> None:
    with pytest.raises(ScheduleError, match=r"start: expected a date or datetime, got str"):
        Schedule.daily().intervals("2026-11-01", date(2026, 12, 1))  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match=r"split it"):
        Schedule.every(timedelta(seconds=1)).intervals(date(2026, 1, 1), date(2026, 3, 1))


def test_ambiguous_and_skipped_wall_times_are_refused() -> None:
    schedule = Schedule.hourly(LISBON)
    with pytest.raises(
        ScheduleError,
        match=r"when: 2026-10-25T01:30:00 is ambiguous in "
        r"Europe/Lisbon .*\+01:00 or .*\+00:00",
    ):
        schedule.interval_for(datetime(2026, 10, 25, 1, 30))
    with pytest.raises(ScheduleError, match=r"when: 2026-03-29T01:30:00 does not exist"):
        schedule.interval_for(datetime(2026, 3, 29, 1, 30))


def test_on_grid_and_canonical() -> None:
    schedule = Schedule.daily(LISBON)
    assert schedule.on_grid(at("2026-07-01T00:00+01:00"))
    assert schedule.on_grid(at("2026-06-30T23:00+00:00"))  # same instant, other spelling
    assert not schedule.on_grid(at("2026-07-01T00:00+00:00"))
    utc_spelling = Interval(at("2026-06-30T23:00+00:00"), at("2026-07-01T23:00+00:00"))
    canonical = schedule.canonical(utc_spelling)
    assert canonical == utc_spelling
    assert canonical.label == "2026-07-01T00:00:00+01:00/2026-07-02T00:00:00+01:00"
    with pytest.raises(ScheduleError, match=r"interval: .* is not an interval of the daily"):
        schedule.canonical(Interval(at("2026-07-01T00:00+01:00"), at("2026-07-03T00:00+01:00")))


def test_at_local_is_lenient_for_deadlines() -> None:
    schedule = Schedule.daily(LISBON)
    assert schedule.at_local(datetime(2026, 3, 29, 1, 30)) == at("2026-03-29T02:00+01:00")
    assert schedule.at_local(datetime(2026, 10, 25, 1, 30)) == at("2026-10-25T01:30+01:00")
    with pytest.raises(ScheduleError, match="wall: expected a naive datetime"):
        schedule.at_local(at("2026-10-25T01:30+01:00"))


def test_schedule_str_names_the_grid() -> None:
    assert str(Schedule.daily(LISBON)) == "daily (Europe/Lisbon)"
    assert str(Schedule.every(timedelta(minutes=90))) == (
        "every 1h30m from 2000-01-01T00:00:00+00:00 (UTC)"
    )


# -- CLI values -------------------------------------------------------------------------------


def test_parse_a_date_on_daily() -> None:
    schedule = Schedule.daily(LISBON)
    assert schedule.parse_interval_arg("2026-11-30") == schedule.interval_for(date(2026, 11, 30))


def test_parse_a_date_on_hourly_is_the_whole_local_day() -> None:
    schedule = Schedule.hourly(LISBON)
    span = schedule.parse_interval_arg("2026-10-25")
    assert span == Interval(at("2026-10-25T00:00+01:00"), at("2026-10-26T00:00+00:00"))
    assert len(schedule.parse_intervals_arg("2026-10-25")) == 25


def test_parse_a_date_on_weekly_is_the_week_starting_there() -> None:
    weeks = Schedule.every(timedelta(days=7), anchor=date(2026, 11, 2))
    assert weeks.parse_interval_arg("2026-11-30").duration == timedelta(days=7)
    with pytest.raises(ScheduleError, match=r"interval: 2026-12-01 does not start an interval"):
        weeks.parse_interval_arg("2026-12-01")


def test_parse_a_date_whose_day_does_not_tile() -> None:
    every5h = Schedule.every(timedelta(hours=5), anchor=date(2026, 11, 30))
    with pytest.raises(ScheduleError, match=r"interval: the day 2026-11-30 does not end on the"):
        every5h.parse_interval_arg("2026-11-30")


def test_parse_a_datetime_names_one_interval() -> None:
    schedule = Schedule.hourly(LISBON)
    assert schedule.parse_interval_arg("2026-11-30T05:00") == Interval(
        at("2026-11-30T05:00+00:00"), at("2026-11-30T06:00+00:00")
    )
    assert schedule.parse_interval_arg("2026-10-25T01:00+00:00").start.utcoffset() == timedelta(0)
    with pytest.raises(
        ScheduleError,
        match=r"interval: 2026-11-30T05:00 is not an interval start "
        r"of the daily \(Europe/Lisbon\) schedule",
    ):
        Schedule.daily(LISBON).parse_interval_arg("2026-11-30T05:00")


def test_parse_a_range() -> None:
    schedule = Schedule.daily(LISBON)
    span = schedule.parse_interval_arg("2026-11-01/2026-12-01")
    assert span == Interval(at("2026-11-01T00:00+00:00"), at("2026-12-01T00:00+00:00"))
    assert len(schedule.parse_intervals_arg(" 2026-11-01/2026-12-01 ")) == 30
    label = schedule.interval_for(date(2026, 7, 1)).label
    assert schedule.parse_interval_arg(label) == schedule.interval_for(date(2026, 7, 1))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"^interval: empty value"),
        ("yesterday", r"^interval: 'yesterday' is not an ISO date or datetime"),
        ("2026-13-01", r"^interval: '2026-13-01' is not an ISO date"),
        ("2026-11-01/", r"^end: '' is not an ISO date"),
        ("nope/2026-11-01", r"^start: 'nope' is not an ISO date"),
        ("2026-12-01/2026-11-01", r"^end: .* must be after start"),
        ("2026-11-01/2026-11-01", r"^end: .* must be after start"),
        ("2026-11-01T03:00/2026-11-02", r"^start: .* is not an interval boundary"),
        ("2026-11-01/2026-11-02T03:00", r"^end: .* is not an interval boundary"),
        ("2026-10-25T01:30", r"^interval: 2026-10-25T01:30:00 is ambiguous"),
    ],
)
def test_parse_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        Schedule.daily(LISBON).parse_interval_arg(text)


# -- tiling property --------------------------------------------------------------------------

SCHEDULES = [
    Schedule.daily(),
    Schedule.daily(LISBON),
    Schedule.daily("America/New_York"),
    Schedule.daily("Australia/Lord_Howe"),
    Schedule.daily("Pacific/Apia"),
    Schedule.daily("America/Santiago"),
    Schedule.hourly(),
    Schedule.hourly(LISBON),
    Schedule.hourly("Asia/Kolkata"),
    Schedule.hourly("Australia/Lord_Howe"),
    Schedule.hourly("Pacific/Apia"),
    Schedule.every(timedelta(minutes=15), tz=LISBON),
    Schedule.every(timedelta(minutes=7), anchor=at("2026-01-01T00:03+00:00")),
    Schedule.every(timedelta(minutes=90), tz="America/New_York"),
    Schedule.every(timedelta(days=7), anchor=date(2026, 11, 2), tz=LISBON),
]

instants = st.datetimes(min_value=datetime(2010, 1, 1), max_value=datetime(2030, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC)
)


@settings(max_examples=150, deadline=None)
@given(
    schedule=st.sampled_from(SCHEDULES),
    when=instants,
    count=st.integers(1, 40),
    probe=st.floats(0, 1),
)
@example(schedule=SCHEDULES[4], when=at("2011-12-28T12:00+00:00"), count=5, probe=0.5)
@example(schedule=SCHEDULES[10], when=at("2011-12-29T20:00+00:00"), count=30, probe=0.5)
@example(schedule=SCHEDULES[7], when=at("2026-10-24T22:00+00:00"), count=6, probe=0.99)
@example(schedule=SCHEDULES[9], when=at("2026-10-03T14:00+00:00"), count=5, probe=0.1)
def test_intervals_tile_the_range_exactly(
    schedule: Schedule, when: datetime, count: int, probe: float
) -> None:
    start = schedule.interval_for(when).start
    end = schedule.interval_for(when + count * schedule.nominal_duration).end
    tiles = schedule.intervals(start, end)

    assert tiles[0].start == start
    assert tiles[-1].end == end
    for before, after in pairwise(tiles):
        assert before.end == after.start  # no gap, no overlap
    assert sum((t.duration for t in tiles), timedelta()) == end - start
    for tile in tiles:
        assert tile.duration > timedelta(0)
        assert schedule.interval_for(tile.start) == tile
        assert schedule.interval_for(tile.end - timedelta(microseconds=1)) == tile
    inside = start + (end - start) * probe
    if inside < end:
        assert sum(t.contains(inside) for t in tiles) == 1


@settings(max_examples=60, deadline=None)
@given(when=instants)
def test_daily_boundaries_are_local_midnights_in_lisbon(when: datetime) -> None:
    interval = Schedule.daily(LISBON).interval_for(when)
    for bound in (interval.start, interval.end):
        local = bound.astimezone(ZoneInfo(LISBON))
        assert (local.hour, local.minute, local.second) == (0, 0, 0)
    assert interval.duration in {timedelta(hours=h) for h in (23, 24, 25)}


def test_date_and_datetime_mix_in_ranges() -> None:
    schedule = Schedule.daily(LISBON)
    assert schedule.intervals(date(2026, 7, 1), at("2026-07-02T00:00+01:00")) == [
        schedule.interval_for(date(2026, 7, 1))
    ]
    assert schedule.interval_for(at("2026-07-01T00:00+01:00")).start.tzinfo == WEST
    assert schedule.interval_for(date(2026, 1, 1)).start.tzinfo == WET


@pytest.mark.parametrize("text", ["0001-01-01", "9999-12-31", "0001-01-01/9999-12-31",
                                  "2026-11-01/9999-12-31T00:00+00:00", "0999-12-31"])
def test_dates_near_datetimes_limits_are_refused_not_overflowed(text: str) -> None:
    """Day and offset arithmetic at year 1 or 9999 used to raise OverflowError (a traceback)."""
    with pytest.raises(ScheduleError, match="outside the supported years 1000-8999"):
        Schedule.daily("Pacific/Kiritimati").parse_intervals_arg(text)
    with pytest.raises(ScheduleError, match="supported years"):
        Schedule.hourly("UTC").interval_for(date(9999, 12, 31))


def test_the_supported_years_edges_still_work() -> None:
    daily = Schedule.daily("America/Los_Angeles")
    assert daily.parse_intervals_arg("1000-01-01")[0].start.year == 1000
    assert daily.parse_intervals_arg("8999-12-31")[0].end.year == 9000


@pytest.mark.parametrize("text", ["2026-W45", "2026-W45-1", "20261102",
                                  "2026-11-01T00:00:00.000000001Z", "2026-11-01T00:00:00.1234567"])
def test_forms_python_would_read_as_something_else_are_refused(text: str) -> None:
    """Found by a probe: ``--interval 2026-W45`` (an ISO week) silently ran its Monday
    only, and nanoseconds were cut without a word."""
    with pytest.raises(ScheduleError, match="is not an ISO date or datetime"):
        Schedule.daily("UTC").parse_interval_arg(text)


@settings(max_examples=150, deadline=None)
@given(schedule=st.sampled_from(SCHEDULES), when=instants, count=st.integers(1, 40))
def test_every_interval_a_schedule_makes_is_its_own_canonical_spelling(
    schedule: Schedule, when: datetime, count: int
) -> None:
    """``iter_intervals`` remembers each interval it makes as its own canonical answer, so a
    long plan never searches the grid: the search must give the same spelling."""
    start = schedule.interval_for(when).start
    end = schedule.interval_for(when + count * schedule.nominal_duration).end
    for tile in schedule.iter_intervals(start, end):
        found = schedule._find_canonical(tile)
        assert (found.start.isoformat(), found.end.isoformat()) == (
            tile.start.isoformat(), tile.end.isoformat())


def test_a_remembered_interval_still_answers_other_spellings_canonically() -> None:
    schedule = Schedule.daily(LISBON)
    made = next(schedule.iter_intervals(date(2026, 7, 1), date(2026, 7, 2)))
    respelled = Interval(made.start.astimezone(UTC), made.end.astimezone(UTC))
    assert respelled.start.isoformat() != made.start.isoformat()
    assert schedule.canonical(respelled).start.isoformat() == "2026-07-01T00:00:00+01:00"


FIXED_ZONES = ["UTC", "Etc/UTC", "GMT", "Etc/GMT+5", "Etc/GMT-14", "Zulu"]


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(["daily", "hourly"]), tz=st.sampled_from(FIXED_ZONES),
       lo=instants, span=st.integers(0, 24 * 90 * 60), tick=st.integers(0, 59))
def test_fixed_offset_zones_find_the_same_boundaries_by_arithmetic(
    kind: str, tz: str, lo: datetime, span: int, tick: int
) -> None:
    """A zone that never changes its offset gets its grid by arithmetic (fast path); it must
    be exactly the grid asking the zone about each mark gives."""
    schedule = Schedule.daily(tz) if kind == "daily" else Schedule.hourly(tz)
    lo = lo.replace(minute=tick) if tick % 3 else lo.replace(minute=0, second=0, microsecond=0)
    hi = lo + timedelta(minutes=span)
    offset = schedule.zone.utcoffset(lo)
    assert offset is not None
    fast = list(schedule._fixed_points(lo, hi, offset))
    slow = list(schedule._calendar_points(lo, hi))
    assert fast == slow
