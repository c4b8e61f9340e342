"""How tables name an interval (``Interval.short``): unambiguous in a DST time zone. The
probe found ``status`` showing UTC starts without a ``Z`` for local days, ``backfill``
naming 25 hourly intervals by one date, and ``run`` printing the two passes of a repeated
hour alike."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from twice.cli import cli
from twice.define.schedule import Schedule


def test_a_local_day_is_its_date_and_an_hour_its_local_start_with_offset() -> None:
    daily = Schedule.daily("Europe/Amsterdam").intervals(date(2026, 10, 24), date(2026, 10, 27))
    assert [i.short for i in daily] == ["2026-10-24", "2026-10-25", "2026-10-26"]
    assert daily[1].duration == timedelta(hours=25)
    hourly = Schedule.hourly("America/New_York").intervals(
        datetime.fromisoformat("2026-11-01T00:00:00-04:00"),
        datetime.fromisoformat("2026-11-01T03:00:00-05:00"))
    labels = [i.short for i in hourly]
    assert labels[1:3] == ["2026-11-01T01:00-04:00", "2026-11-01T01:00-05:00"]
    assert len(set(labels)) == len(labels) == 4
    utc = Schedule.daily("UTC").intervals(date(2026, 11, 30), date(2026, 12, 1))
    assert [i.short for i in utc] == ["2026-11-30"]


def test_twice_run_and_status_name_the_repeated_hour_apart(tmp_path: Path) -> None:
    source = tmp_path / "hours.py"
    source.write_text(
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('hours', schedule=Schedule.hourly('America/New_York'))\n"
        "@pipeline.task(safe_repeat=True)\n"
        "def tick(ctx):\n"
        "    return None\n"
    )
    ledger = str(tmp_path / "l.db")
    ran = CliRunner().invoke(cli, [
        "run", str(source), "--start", "2026-11-01T01:00:00-04:00",
        "--end", "2026-11-01T02:00:00-05:00", "--ledger", ledger, "--deadline", "none"],
        env={"COLUMNS": "250"})
    assert ran.exit_code == 0, ran.output
    shown = CliRunner().invoke(cli, ["status", "--ledger", ledger], env={"COLUMNS": "250"})
    for output in (ran.output, shown.output):
        assert "2026-11-01T01:00-04:00" in output and "2026-11-01T01:00-05:00" in output, output
