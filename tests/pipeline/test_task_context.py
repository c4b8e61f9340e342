"""Units of work, deterministic job ids and the TaskContext handed to a task."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.define.pipeline import NonFatal, Pipeline, PipelineError, TaskContext
from twice.define.schedule import Schedule, ScheduleError

LISBON = Schedule.daily("Europe/Lisbon")


def noop(ctx: TaskContext) -> None:
    return None


def funds(transform_version: str = "v3") -> Pipeline:
    """Built afresh each call: ids must depend on the definition, not on object identity."""
    pipeline = Pipeline("funds_positions", schedule=LISBON)
    pipeline.task(name="extract", input_partition="positions/{start:%Y-%m-%d}")(noop)
    pipeline.task(
        name="load",
        depends_on="extract",
        destination="duckdb:///wh.duckdb#positions",
        transform_version=transform_version,
        input_partition=lambda interval: f"positions/{interval.start:%Y%m%d}",
        input_version=lambda interval: f"rows=10;sum={interval.start.day}",
    )(noop)
    return pipeline


NOV30 = LISBON.interval_for(date(2026, 11, 30))


def test_unit_of_work_fills_every_field() -> None:
    unit = funds().unit_of_work("load", NOV30)
    assert unit == UnitOfWork(
        pipeline="funds_positions",
        task="load",
        interval=NOV30,
        destination="duckdb:///wh.duckdb#positions",
        transform_version="v3",
        input_partition="positions/20261130",
        input_version="rows=10;sum=30",
    )
    assert funds().unit_of_work("extract", NOV30).input_partition == "positions/2026-11-30"


def test_same_inputs_give_the_same_ids_every_time() -> None:
    first, second = funds().unit_of_work("load", NOV30), funds().unit_of_work("load", NOV30)
    assert first.uow_id == second.uow_id
    assert first.job_id(1) == second.job_id(1)
    assert first.job_id(1) != first.job_id(2)


def test_other_spellings_of_the_same_interval_give_the_same_ids() -> None:
    summer = LISBON.interval_for(date(2026, 7, 1))
    as_utc = Interval(summer.start.astimezone(UTC), summer.end.astimezone(UTC))
    assert funds().unit_of_work("load", as_utc).uow_id == (
        funds().unit_of_work("load", summer).uow_id
    )
    assert funds().unit_of_work("load", as_utc).interval.label == summer.label


def test_different_interval_or_version_gives_a_different_unit() -> None:
    base = funds().unit_of_work("load", NOV30)
    dec1 = funds().unit_of_work("load", LISBON.interval_for(date(2026, 12, 1)))
    fixed = funds("v4").unit_of_work("load", NOV30)
    refreshed = funds().unit_of_work("load", NOV30, input_version="rows=11;sum=31")
    ids = {base.uow_id, dec1.uow_id, fixed.uow_id, refreshed.uow_id}
    assert len(ids) == 4


def test_unit_of_work_refuses_an_interval_off_the_schedule() -> None:
    two_days = Interval(NOV30.start, NOV30.end + timedelta(days=1))
    with pytest.raises(ScheduleError, match=r"is not an interval of the daily \(Europe/Lisbon\)"):
        funds().unit_of_work("load", two_days)
    with pytest.raises(PipelineError, match=r"no task 'lod'"):
        funds().unit_of_work("lod", NOV30)


def test_partition_and_version_functions_must_return_text() -> None:
    pipeline = Pipeline("p", schedule=LISBON)
    pipeline.task(name="a", input_partition=lambda interval: 5)(noop)  # type: ignore[arg-type,return-value]
    pipeline.task(name="b", input_version=lambda interval: None)(noop)  # type: ignore[arg-type,return-value]
    with pytest.raises(PipelineError, match=r"task 'a': input_partition returned int, not str"):
        pipeline.unit_of_work("a", NOV30)
    with pytest.raises(PipelineError, match=r"task 'b': input_version returned NoneType"):
        pipeline.unit_of_work("b", NOV30)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 3000), st.integers(0, 3000), st.integers(1, 5))
def test_ids_are_a_function_of_the_interval(day_a: int, day_b: int, generation: int) -> None:
    origin = date(2020, 1, 1)
    a = LISBON.interval_for(origin + timedelta(days=day_a))
    b = LISBON.interval_for(origin + timedelta(days=day_b))
    unit_a, unit_b = funds().unit_of_work("load", a), funds().unit_of_work("load", b)
    assert (unit_a.uow_id == unit_b.uow_id) == (day_a == day_b)
    job_id = unit_a.job_id(generation)
    assert job_id == funds().context("load", a, generation=generation).job_id
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,1024}", job_id)


# -- TaskContext ------------------------------------------------------------------------------


def test_context_exposes_the_run_not_the_clock() -> None:
    ctx = funds().context("load", NOV30, attempt=2, generation=3, params={"dry": True})
    assert ctx.interval == NOV30
    assert (ctx.pipeline_name, ctx.task_name) == ("funds_positions", "load")
    assert (ctx.attempt, ctx.generation) == (2, 3)
    assert ctx.job_id == ctx.unit.job_id(3)
    assert ctx.input_partition == "positions/20261130"
    assert ctx.destination == "duckdb:///wh.duckdb#positions"
    assert ctx.params["dry"] is True
    public = {name for name in dir(ctx) if not name.startswith("_")}
    assert not public & {"now", "today", "clock", "utcnow", "time", "current_time"}


def test_context_is_frozen_and_its_mappings_read_only() -> None:
    upstream = {"extract": 10}
    ctx = funds().context("load", NOV30, upstream=upstream)
    upstream["extract"] = 99  # the caller's dict is copied
    assert ctx.upstream == {"extract": 10}
    with pytest.raises(TypeError):
        ctx.upstream["extract"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        ctx.params["x"] = 1  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.attempt = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value"), [("attempt", 0), ("generation", 0), ("attempt", True), ("attempt", 1.0)]
)
def test_context_counts_from_one(field: str, value: object) -> None:
    unit = funds().unit_of_work("load", NOV30)
    with pytest.raises(ValueError, match=rf"{field} must be an integer >= 1"):
        TaskContext(unit=unit, **{field: value})  # type: ignore[arg-type]


def test_nonfatal_collects_by_default() -> None:
    ctx = funds().context("load", NOV30)
    ctx.nonfatal("3 rows had no ISIN and were skipped", count=3)
    ctx.nonfatal("price feed late")
    assert ctx.nonfatals == (
        NonFatal("3 rows had no ISIN and were skipped", 3),
        NonFatal("price feed late", 1),
    )


def test_nonfatal_goes_to_an_injected_recorder() -> None:
    recorded: list[NonFatal] = []
    ctx = funds().context("load", NOV30, recorder=recorded.append)
    ctx.nonfatal("skipped", count=2)
    assert recorded == [NonFatal("skipped", 2)]
    assert ctx.nonfatals == ()
    with pytest.raises(ValueError, match="non-empty"):
        ctx.nonfatal("  ")
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        ctx.nonfatal("x", count=0)


def test_context_reuses_a_given_unit_and_checks_it() -> None:
    pipeline = funds()
    unit = pipeline.unit_of_work("load", NOV30, input_version="fp-1")
    assert pipeline.context("load", NOV30, unit=unit).unit is unit
    with pytest.raises(PipelineError, match=r"unit belongs to funds_positions.load"):
        pipeline.context("extract", NOV30, unit=unit)


def test_hourly_fall_back_hours_get_distinct_units() -> None:
    pipeline = Pipeline("hourly", schedule=Schedule.hourly("Europe/Lisbon"))
    pipeline.task(name="load")(noop)
    repeated = [
        h
        for h in pipeline.schedule.intervals(date(2026, 10, 25), date(2026, 10, 26))
        if h.start.hour == 1
    ]
    ids = {pipeline.unit_of_work("load", h).uow_id for h in repeated}
    assert len(ids) == 2
    assert all(isinstance(h.start, datetime) for h in repeated)
