"""Issue 38, a year of hourly units: planning and resuming read the ledger in batches and
never measure a verified partition unless asked.

A restart or rerun over a long range once read every verified unit one query at a time and
fingerprinted its partition before reaching new work. These tests count the ledger's
statements (a SQLAlchemy ``before_cursor_execute`` listener) and the destination's
measurements: both must not grow with the number of verified units. Drift of an untouched
partition is still found on request (``verify_untouched``, ``--verify-untouched``) and by
``twice verify``. No timed assertions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from sqlalchemy import event

from twice.cli import cli
from twice.core.interval import Interval
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers import backfill
from twice.drivers.backfill import plan_backfill, run_backfill
from twice.ledger import Ledger

START = datetime(2025, 1, 1, tzinfo=UTC)

PIPELINE_FILE = """\
import pyarrow as pa
from twice import Pipeline, Schedule, TaskContext

SPEC = "sqlite:///{warehouse}?partition_column=hour"
pipeline = Pipeline("scale", schedule=Schedule.hourly("UTC"))

@pipeline.task(destination=SPEC + "#a", write="replace", safe_repeat=True, timeout=30)
def a(ctx: TaskContext) -> pa.Table:
    return pa.table({{"hour": [ctx.interval.start], "v": [ctx.interval.start.hour]}})

@pipeline.task(destination=SPEC + "#b", write="replace", safe_repeat=True, timeout=30,
               depends_on=a)
def b(ctx: TaskContext) -> pa.Table:
    rows = ctx.read_upstream("a").num_rows
    return pa.table({{"hour": [ctx.interval.start], "n": [rows]}})
"""


def hourly(warehouse: Path, calls: list[str] | None = None) -> Pipeline:
    """Two hourly owned writes: ``a`` and ``b``, which reads ``a``'s slice."""
    pipeline = Pipeline("scale", schedule=Schedule.hourly("UTC"))
    spec = f"sqlite:///{warehouse}?partition_column=hour"

    @pipeline.task(destination=spec + "#a", write="replace", safe_repeat=True, timeout=30)
    def a(ctx: TaskContext) -> pa.Table:
        if calls is not None:
            calls.append(ctx.interval.label)
        return pa.table({"hour": [ctx.interval.start], "v": [ctx.interval.start.hour]})

    @pipeline.task(destination=spec + "#b", write="replace", safe_repeat=True, timeout=30,
                   depends_on=a)
    def b(ctx: TaskContext) -> pa.Table:
        rows = ctx.read_upstream("a").num_rows
        return pa.table({"hour": [ctx.interval.start], "n": [rows]})

    return pipeline


def hours(count: int, first: int = 0) -> list[Interval]:
    begin = START + timedelta(hours=first)
    return Schedule.hourly("UTC").intervals(begin, begin + timedelta(hours=count))


@contextmanager
def statements(ledger: Ledger) -> Iterator[list[str]]:
    """Every statement the ledger sends while the block runs."""
    sent: list[str] = []
    engine = ledger._session.engine

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", count)


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The partitions the backfill measured in their destination (drift checks)."""
    seen: list[str] = []
    measure = backfill.measure_drift

    def counting(spec: str, interval: Interval, record: Any) -> Any:
        seen.append(f"{spec} {interval.label}")
        return measure(spec, interval, record)

    monkeypatch.setattr(backfill, "measure_drift", counting)
    return seen


def verified_ledger(tmp_path: Path, count: int) -> tuple[Ledger, Pipeline, Path]:
    warehouse = tmp_path / f"w{count}.db"
    pipeline = hourly(warehouse)
    ledger = Ledger.open(tmp_path / f"l{count}.db")
    assert run_backfill(pipeline, ledger, hours(count)).counts() == {"succeeded": 2 * count}
    return ledger, pipeline, warehouse


def test_a_rerun_of_verified_units_reads_the_ledger_a_window_at_a_time(
    tmp_path: Path, measured: list[str]
) -> None:
    """The plan of a rerun sends as many statements for 36 verified intervals as for 12
    (one window), and measures no partition."""
    sent_for: dict[int, int] = {}
    for count in (12, 36):
        ledger, pipeline, _ = verified_ledger(tmp_path, count)
        measured.clear()
        with ledger, statements(ledger) as sent:
            plan = plan_backfill(pipeline, ledger, hours(count))
        assert {item.action for item in plan.items} == {"skip"}
        assert all(item.reason.startswith("verified: same unit of work recorded fingerprint v1")
                   for item in plan.items)
        assert measured == []  # no destination read for an untouched partition
        sent_for[count] = len(sent)
    assert sent_for[36] == sent_for[12], sent_for
    assert sent_for[36] <= 10  # units, attempts, fingerprints of each destination


def test_windows_bound_the_statements_of_a_long_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range longer than a window is read window by window: a few statements per window,
    never one per unit (a window of 4 hours here, 36 hours: 9 windows)."""
    ledger, pipeline, _ = verified_ledger(tmp_path, 36)
    monkeypatch.setattr(backfill, "PLAN_WINDOW", 4)
    with ledger, statements(ledger) as sent:
        plan = plan_backfill(pipeline, ledger, hours(36))
    assert {item.action for item in plan.items} == {"skip"}
    windows = 36 // 4  # at most; BEGIN, units, attempts, the fingerprints of a and of b
    assert len(sent) <= 5 * windows, len(sent)
    assert len(sent) < 2 * len(plan.items)  # fewer than one statement a unit


def test_a_restart_reaches_new_work_after_the_same_statements_however_many_are_verified(
    tmp_path: Path, measured: list[str]
) -> None:
    """A backfill over a range whose first units are verified sends the same number of
    ledger statements before its first new attempt with 24 or 48 verified hours, measures
    none of their partitions, and runs exactly the rest (the executor's timeout advice reads
    the attempts of each task's latest 20 units: both sizes hold more)."""
    before_new_work: dict[int, int] = {}
    for count in (24, 48):
        ledger, _, warehouse = verified_ledger(tmp_path, count)
        calls: list[str] = []
        pipeline = hourly(warehouse, calls)
        measured.clear()
        first_call: list[int] = []
        with ledger, statements(ledger) as sent:
            original = pipeline.get_task("a").fn

            def a(ctx: TaskContext, original: Callable[..., Any] = original,
                  first_call: list[int] = first_call, sent: list[str] = sent) -> Any:
                if not first_call:
                    first_call.append(len(sent))
                return original(ctx)

            object.__setattr__(pipeline.get_task("a"), "fn", a)
            result = run_backfill(pipeline, ledger, hours(count + 3))
        assert result.counts() == {"skipped": 2 * count, "succeeded": 6}, result.counts()
        assert calls == [span.label for span in hours(3, first=count)]  # only the new hours
        assert measured == []  # new partitions have no record: nothing to measure either
        before_new_work[count] = first_call[0]
    assert before_new_work[48] == before_new_work[24], before_new_work


def test_drift_of_an_untouched_partition_is_found_on_request(
    tmp_path: Path, measured: list[str]
) -> None:
    """By default a verified unit is skipped on the ledger's word (its partition is not
    read); ``verify_untouched`` measures every such partition, finds the one edited behind
    twice's back, records the drift and repairs it; ``twice verify`` finds it too."""
    ledger, pipeline, warehouse = verified_ledger(tmp_path, 6)
    with sqlite3.connect(warehouse) as conn:
        conn.execute("UPDATE a SET v = 99 WHERE v = 2")  # 02:00, behind twice's back
    with ledger:
        assert run_backfill(pipeline, ledger, hours(6)).counts() == {"skipped": 12}
        assert measured == []
        found = CliRunner().invoke(cli, ["verify", "--ledger", str(tmp_path / "l6.db")])
        assert found.exit_code == 1 and "MISMATCH" in found.output, found.output
        plan = plan_backfill(pipeline, ledger, hours(6), verify_untouched=True)
        assert len(measured) == 12  # every untouched partition, both destinations
        drifted = [item for item in plan.items if item.action == "run" and item.rerun]
        assert [(item.task, item.interval.start.hour) for item in drifted] == [("a", 2)]
        follows = [item.task for item in plan.items if item.action == "run" and not item.rerun]
        assert follows == ["b"]  # its reader follows it
        assert "no longer matches its recorded fingerprint" in drifted[0].reason
        repaired = run_backfill(pipeline, ledger, hours(6), verify_untouched=True)
        ran = [(run.task, run.interval.start.hour) for run in repaired.runs
               if run.status == "succeeded"]
        assert ran == [("a", 2), ("b", 2)]  # and its reader, which may have read the edit
        [rerun] = [run for run in repaired.runs if run.task == "a" and run.status == "succeeded"]
        assert rerun.drift is not None and rerun.drift.drifted
        assert [o.state for o in ledger.observations(rerun.uow_id)].count("drift") == 1
    assert CliRunner().invoke(cli, ["verify", "--ledger", str(tmp_path / "l6.db")]).exit_code == 0


def test_the_cli_option_measures_untouched_partitions(tmp_path: Path) -> None:
    """``twice backfill --verify-untouched`` repairs a drifted partition that a plain rerun
    leaves alone, and ``--help`` documents it."""
    warehouse = tmp_path / "w.db"
    file = tmp_path / "pipeline.py"
    file.write_text(PIPELINE_FILE.format(warehouse=warehouse))
    ledger = f"sqlite:///{tmp_path / 'l.db'}"
    base = ["backfill", str(file), "--start", "2025-01-01T00:00:00+00:00",
            "--end", "2025-01-01T04:00:00+00:00", "--ledger", ledger]
    runner = CliRunner()
    assert runner.invoke(cli, base).exit_code == 0
    with sqlite3.connect(warehouse) as conn:
        conn.execute("DELETE FROM a WHERE v = 1")
    plain = runner.invoke(cli, base)
    assert plain.exit_code == 0 and "8 skipped" in plain.output, plain.output
    assert "recorded fingerprint v1" in plain.output
    repaired = runner.invoke(cli, [*base, "--verify-untouched"])
    assert repaired.exit_code == 0, repaired.output
    assert "drift: 1 -> 0 rows behind twice's back" in repaired.output
    assert "6 skipped, 2 succeeded" in repaired.output
    helped = runner.invoke(cli, ["backfill", "--help"])
    assert "--verify-untouched" in helped.output and "twice verify" in helped.output


@pytest.mark.parametrize("text", [
    "  2025-01-01T00:00+00:00 a          skipped   verified: same unit of work recorded "
    "fingerprint v1",
    "  trailing spaces and a \\ backslash  ", "x" * 300, "  an emoji code :smile: here",
    "  markup [red]red[/red]", "  escaped \\[not markup]", "  non-ASCII é", "",
])
def test_progress_lines_print_as_rich_prints_them(text: str) -> None:
    """The backfill's per-unit lines skip Rich's renderer only where the bytes are Rich's."""
    import io

    from twice.cli.backfill_cmd import print_line
    from twice.cli.console import make_console

    by_rich, direct = io.StringIO(), io.StringIO()
    make_console(file=by_rich).print(text)
    print_line(make_console(file=direct), text)
    assert direct.getvalue() == by_rich.getvalue()
