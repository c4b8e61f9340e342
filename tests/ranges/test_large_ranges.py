"""Issue 19, item 2: ranges of more than 10,000 units need confirmation, are counted without
listing them, and the backfill plan streams (a generator planning an interval when taken)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from twice.cli import cli
from twice.core.interval import Interval
from twice.define.load import load_pipeline
from twice.define.schedule import Schedule
from twice.ledger import Ledger


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("kind", ["run", "backfill", "worker"])
def test_a_century_of_hours_needs_yes(kind: str, hourly_file: Path, ledger_url: str) -> None:
    args = [kind, str(hourly_file), "--start", "1926-01-01", "--end", "2026-01-01",
            "--ledger", ledger_url]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    # 876,600 hourly intervals x 2 tasks, counted without listing them
    assert "1,753,200 units" in result.output and "876,600 interval(s) x 2 task(s)" in result.output
    assert "--yes" in result.output
    with Ledger.open(ledger_url) as ledger:
        assert list(ledger.units()) == []


@pytest.mark.parametrize("kind", ["run", "backfill"])
def test_yes_confirms_a_large_range(kind: str, daily_file: Path, ledger_url: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("twice.cli.options.LARGE_RANGE_UNITS", 5)
    args = [kind, str(daily_file), "--start", "2026-11-01", "--end", "2026-11-04",
            "--ledger", ledger_url]  # 3 days x 2 tasks = 6 units
    refused = invoke(*args)
    assert refused.exit_code == 2 and "6 units" in refused.output, refused.output
    accepted = invoke(*args, "--yes")
    assert accepted.exit_code == 0, accepted.output


def test_schedule_counts_without_listing_and_agrees_with_the_list() -> None:
    for schedule in (Schedule.hourly("Europe/Lisbon"), Schedule.hourly("America/St_Johns"),
                     Schedule.hourly("Australia/Lord_Howe"), Schedule.daily("Pacific/Apia"),
                     Schedule.every(timedelta(hours=6))):
        lo, hi = date(2009, 1, 1), date(2013, 1, 1)
        listed = schedule.intervals(lo, hi)
        assert schedule.count_intervals(lo, hi) == len(listed)
        lazy = schedule.iter_intervals(lo, hi)
        assert isinstance(lazy, Iterator) and list(lazy) == listed
        for interval in listed[::97]:
            assert schedule.canonical(interval) == interval
            assert schedule._containing(interval.start.astimezone(UTC)) == interval
    assert Schedule.hourly().count_intervals(date(1926, 1, 1), date(2026, 1, 1)) == 876_600


def test_the_plan_is_a_generator_planning_each_interval_when_taken(
    daily_file: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from twice.drivers import backfill

    pipeline = load_pipeline(str(daily_file))
    pulled: list[Interval] = []

    def days() -> Iterator[Interval]:
        for interval in pipeline.schedule.iter_intervals(date(2020, 1, 1), date(2030, 1, 1)):
            pulled.append(interval)
            yield interval

    with Ledger.open(ledger_url) as ledger:
        plan = backfill.iter_plan(pipeline, ledger, days())
        assert isinstance(plan, Iterator)
        assert pulled == []  # nothing planned yet
        first = next(plan)
        assert (first.task, first.interval.start.date()) == ("extract", date(2020, 1, 1))
        assert len(pulled) == 1  # one interval of 3,653 taken
        assert [item.task for item in plan][:1] == ["load"]  # the rest follows, in order


def test_run_backfill_plans_each_interval_just_before_running_it(
    daily_file: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import twice.engine.executor as engine
    from twice.drivers.backfill import plan_backfill, run_backfill

    pipeline = load_pipeline(str(daily_file))
    spans = pipeline.schedule.intervals(date(2026, 11, 1), date(2026, 11, 4))
    events: list[tuple[str, str]] = []
    identify = engine.identify_unit

    def counting(pipeline_: object, ledger: object, name: str, interval: Interval) -> object:
        events.append(("identify", interval.label))
        return identify(pipeline_, ledger, name, interval)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "identify_unit", counting)
    original = pipeline.get_task("extract").fn

    def extract(ctx):  # type: ignore[no-untyped-def]
        events.append(("ran", ctx.interval.label))
        return original(ctx)

    object.__setattr__(pipeline.get_task("extract"), "fn", extract)  # a frozen Task
    with Ledger.open(ledger_url) as ledger:
        result = run_backfill(pipeline, ledger, spans)
        assert result.ok, result.to_dict()
        first_run = events.index(("ran", spans[0].label))
        last_planned = events.index(("identify", spans[-1].label))
        assert first_run < last_planned  # the last interval was planned after the first ran
        # the result's plan is the whole plan, in order, as plan_backfill gives it
        assert [(i.interval, i.task) for i in result.plan.items] == [
            (s, t) for s in spans for t in ("extract", "load")]
        again = plan_backfill(pipeline, ledger, spans)
        assert {i.action for i in again.items} == {"skip"}


def test_dry_run_json_is_the_plan_document(daily_file: Path, ledger_url: str) -> None:
    from twice.drivers.backfill import plan_backfill

    args = ["backfill", str(daily_file), "--start", "2026-11-01", "--end", "2026-11-04",
            "--ledger", ledger_url, "--dry-run"]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    pipeline = load_pipeline(str(daily_file))
    with Ledger.open(ledger_url) as ledger:
        plan = plan_backfill(pipeline, ledger, pipeline.schedule.intervals(
            date(2026, 11, 1), date(2026, 11, 4)))
    expected = json.dumps({"dry_run": True, **plan.to_dict()}, sort_keys=True) + "\n"
    assert result.output == expected
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == 0 and "3 intervals x 2 tasks: 6 would run" in text.output


def test_a_long_dry_run_prints_the_first_interval_as_its_own_table(
    hourly_file: Path, ledger_url: str
) -> None:
    start = datetime(2020, 1, 1, tzinfo=UTC)
    end = start + timedelta(hours=300)  # 600 units: more than one table's worth
    result = invoke("backfill", str(hourly_file), "--start", start.isoformat(),
                    "--end", end.isoformat(), "--ledger", ledger_url, "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.count("backfill plan for ranges") == 1
    assert "300 intervals x 2 tasks: 600 would run, 0 would be skipped" in result.output
