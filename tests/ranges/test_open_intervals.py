"""Issue 19, item 1: intervals that have not ended are refused unless explicitly allowed, and
then recorded as run on an open interval (every driver, the CLI and the Python API)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.ranges.conftest import today, tomorrow
from twice.cli import cli
from twice.define.load import load_pipeline
from twice.define.schedule import OpenIntervalError
from twice.errors import InputError
from twice.ledger import Ledger

RUN_STARTED = "run-started"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def units(url: str) -> list[object]:
    with Ledger.open(url) as ledger:
        return list(ledger.units())


def open_runs(url: str) -> list[dict[str, object]]:
    """The ``open_interval`` detail of every run-started observation in the ledger."""
    found = []
    with Ledger.open(url) as ledger:
        for unit in ledger.units():
            for obs in ledger.observations(unit.uow_id):
                if obs.state == RUN_STARTED and "open_interval" in (obs.detail or {}):
                    found.append(obs.detail["open_interval"])
    return found


def command(kind: str, path: Path, url: str, start: str, end: str) -> list[str]:
    if kind == "backfill":
        return ["backfill", str(path), "--start", start, "--end", end, "--ledger", url]
    extra = ["--once"] if kind == "worker" else []
    return [kind, str(path), "--start", start, "--end", end, "--ledger", url, *extra]


@pytest.mark.parametrize("kind", ["run", "backfill", "worker"])
def test_cli_refuses_an_interval_that_has_not_ended(kind: str, daily_file: Path,
                                                    ledger_url: str) -> None:
    start, end = today(), tomorrow() + timedelta(days=1)  # today and tomorrow: both open
    result = invoke(*command(kind, daily_file, ledger_url, start.isoformat(), end.isoformat()))
    assert result.exit_code == 2, result.output
    assert "--allow-open-intervals" in result.output
    assert f"{start.isoformat()}T00:00:00+00:00/" in result.output  # names the first one
    assert "has not ended" in result.output and "1 later interval" in result.output
    assert units(ledger_url) == []  # nothing recorded


@pytest.mark.parametrize("kind", ["run", "backfill", "worker"])
def test_cli_allows_open_intervals_and_records_them_as_open(kind: str, daily_file: Path,
                                                             ledger_url: str) -> None:
    start, end = today() - timedelta(days=1), tomorrow()  # yesterday (closed), today (open)
    args = command(kind, daily_file, ledger_url, start.isoformat(), end.isoformat())
    result = invoke(*args, "--allow-open-intervals")
    assert result.exit_code == 0, result.output
    recorded = open_runs(ledger_url)
    assert len(recorded) == 2  # extract and load of today; yesterday was closed
    assert all(str(detail["ends"]).startswith(tomorrow().isoformat()) for detail in recorded)


def test_closed_intervals_need_no_flag(daily_file: Path, ledger_url: str) -> None:
    day = today() - timedelta(days=2)
    result = invoke("run", str(daily_file), "--interval", day.isoformat(), "--ledger", ledger_url)
    assert result.exit_code == 0, result.output
    assert open_runs(ledger_url) == []


def test_python_api_refuses_open_intervals_unless_allowed(daily_file: Path,
                                                          ledger_url: str) -> None:
    from twice.drivers.backfill import run_backfill
    from twice.drivers.worker import Worker
    from twice.engine.executor import Executor

    pipeline = load_pipeline(str(daily_file))
    open_day = pipeline.schedule.interval_for(today())
    with Ledger.open(ledger_url) as ledger:
        with pytest.raises(OpenIntervalError) as refused:
            Executor(pipeline, ledger).run(open_day)
        assert isinstance(refused.value, InputError)
        assert open_day.label in str(refused.value) and "allow_open=True" in str(refused.value)
        with pytest.raises(OpenIntervalError):
            run_backfill(pipeline, ledger, [open_day])
        with pytest.raises(OpenIntervalError):
            Worker(pipeline, ledger, [open_day], once=True)
        assert list(ledger.units()) == []
        result = Executor(pipeline, ledger, allow_open=True).run(open_day)
        assert result.ok
        assert all(any("partial interval" in note for note in unit.notes)
                   for unit in result.units)
    assert len(open_runs(ledger_url)) == 2
