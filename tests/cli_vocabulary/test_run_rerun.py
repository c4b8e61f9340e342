"""``twice run``: ``--force`` reruns one day, ``--tasks`` brings dependents along, a skipped
unit is said to be skipped, and ``twice backfill --interval`` means what it means on run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner, Result

from twice.cli import cli

PIPELINE = '''\
import json
import os
from pathlib import Path

import pyarrow as pa

from twice import Pipeline, Schedule, TaskContext, open_destination

SOURCE = Path(os.environ["VOCAB_SOURCE"])
WAREHOUSE = os.environ["VOCAB_WAREHOUSE"]
ORDERS = f"duckdb:///{WAREHOUSE}?partition_column=day#orders"
TOTALS = f"duckdb:///{WAREHOUSE}?partition_column=day#totals"

pipeline = Pipeline("vocab", schedule=Schedule.daily("UTC"))


@pipeline.task(destination=ORDERS, write="replace", safe_repeat=True)
def orders(ctx: TaskContext) -> pa.Table:
    day = ctx.interval.start.date()
    amounts = json.loads(SOURCE.read_text()).get(day.isoformat(), [])
    return pa.table({"day": pa.array([day] * len(amounts), pa.date32()),
                     "amount": pa.array(amounts, pa.int64())})


@pipeline.task(depends_on=orders, destination=TOTALS, write="replace", safe_repeat=True)
def totals(ctx: TaskContext) -> pa.Table:
    with open_destination(ORDERS) as source:
        rows = source.read_partition(ctx.interval).to_pylist()
    day = ctx.interval.start.date()
    return pa.table({"day": pa.array([day], pa.date32()),
                     "total": pa.array([sum(r["amount"] for r in rows)], pa.int64())})
'''

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    source = tmp_path / "source.json"
    source.write_text(json.dumps({d: [n + 1, 10 * (n + 1)] for n, d in enumerate(DAYS)}))
    monkeypatch.setenv("VOCAB_SOURCE", str(source))
    monkeypatch.setenv("VOCAB_WAREHOUSE", str(tmp_path / "wh.duckdb"))
    pipeline = tmp_path / "vocab.py"
    pipeline.write_text(PIPELINE)
    return {"source": source, "pipeline": pipeline, "ledger": tmp_path / "ledger.db",
            "warehouse": tmp_path / "wh.duckdb"}


def twice(env: dict[str, Path], *args: str) -> Result:
    result = CliRunner().invoke(cli, [args[0], str(env["pipeline"]), *args[1:], "--ledger",
                                      str(env["ledger"]), "--deadline", "none"])
    assert "Traceback" not in result.output, result.output
    return result


def table(env: dict[str, Path], name: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
        return con.execute(f"SELECT * FROM {name} ORDER BY ALL").fetchall()


def expected_totals(env: dict[str, Path]) -> list[tuple[str, int]]:
    source = json.loads(env["source"].read_text())
    return sorted((day, sum(amounts)) for day, amounts in source.items())


def totals(env: dict[str, Path]) -> list[tuple[str, int]]:
    return [(str(day), int(total)) for day, total in table(env, "totals")]


def change_source(env: dict[str, Path], day: str, amounts: list[int]) -> None:
    source = json.loads(env["source"].read_text())
    source[day] = amounts
    env["source"].write_text(json.dumps(source))


def test_a_second_run_skips_and_says_so_and_force_reruns_one_day(env: dict[str, Path]) -> None:
    first = twice(env, "run", "--start", DAYS[0], "--end", "2026-11-04")
    assert first.exit_code == 0, first.output
    assert totals(env) == expected_totals(env)

    change_source(env, DAYS[1], [7, 7, 7])  # the source was corrected after the run
    again = twice(env, "run", "--interval", DAYS[1], "--json")
    units = json.loads(again.stdout)["units"]
    assert again.exit_code == 0 and {u["skipped"] for u in units} == {True}
    assert totals(env) != expected_totals(env)  # nothing ran: the table is the old one
    text = twice(env, "run", "--interval", DAYS[1])
    assert "2 unit(s) had already succeeded and were not run again" in text.output
    assert "--force" in text.output
    # a run that made no attempt does not say it succeeded or executed anything
    summary = " ".join(text.output.split())
    assert "2 already succeeded (not run again)" in summary
    assert not re.search(r"(?<![\w.])2 succeeded", summary)
    assert "Executed and recorded" not in summary
    assert "no attempt was made" in summary

    forced = twice(env, "run", "--interval", DAYS[1], "--force", "--json")
    assert forced.exit_code == 0, forced.output
    by_task = {u["task"]: u for u in json.loads(forced.stdout)["units"]}
    assert not by_task["orders"]["skipped"] and by_task["orders"]["attempts"] == 1
    assert by_task["orders"]["generation"] == 2  # a new job generation, not a replay
    assert totals(env) == expected_totals(env)  # the dependent followed its changed input
    orders = [(str(d), a) for d, a in table(env, "orders")]
    assert orders.count((DAYS[1], 7)) == 3 and len(orders) == 2 + 3 + 2  # no duplicate rows


def test_force_with_unchanged_input_reruns_the_task_and_skips_an_identical_dependent(
        env: dict[str, Path]) -> None:
    assert twice(env, "run", "--interval", DAYS[0]).exit_code == 0
    forced = twice(env, "run", "--interval", DAYS[0], "--force", "--tasks", "orders", "--json")
    by_task = {u["task"]: u for u in json.loads(forced.stdout)["units"]}
    assert by_task["orders"]["attempts"] == 1 and by_task["orders"]["generation"] == 2
    # same rows, same fingerprint: totals is the same unit of work, already succeeded
    assert by_task["totals"]["skipped"] and by_task["totals"]["attempts"] == 0


def test_tasks_brings_dependents_along_so_they_never_stay_on_old_data(
        env: dict[str, Path]) -> None:
    assert twice(env, "run", "--start", DAYS[0], "--end", "2026-11-04").exit_code == 0
    change_source(env, DAYS[2], [1000])
    ran = twice(env, "run", "--interval", DAYS[2], "--tasks", "orders", "--force", "--json")
    assert ran.exit_code == 0, ran.output
    assert {u["task"] for u in json.loads(ran.stdout)["units"]} == {"orders", "totals"}
    assert totals(env) == expected_totals(env)


def test_backfill_takes_interval_like_run(env: dict[str, Path]) -> None:
    assert twice(env, "run", "--start", DAYS[0], "--end", "2026-11-04").exit_code == 0
    change_source(env, DAYS[0], [5])
    done = twice(env, "backfill", "--interval", DAYS[0], "--force", "--json")
    assert done.exit_code == 0, done.output
    intervals = json.loads(done.stdout)["plan"]["intervals"]
    assert len(intervals) == 1 and intervals[0].startswith(DAYS[0]), intervals
    assert totals(env) == expected_totals(env)
    both = twice(env, "backfill", "--interval", DAYS[0], "--start", DAYS[0], "--end", DAYS[1])
    assert both.exit_code == 2 and "--interval or --start/--end" in both.output


def test_run_takes_concurrency_and_the_old_max_workers(env: dict[str, Path]) -> None:
    assert twice(env, "run", "--interval", DAYS[0], "--concurrency", "2").exit_code == 0
    assert twice(env, "run", "--interval", DAYS[1], "--max-workers", "2").exit_code == 0
    bad = twice(env, "run", "--interval", DAYS[2], "--concurrency", "0")
    assert bad.exit_code == 2 and "--concurrency" in bad.output


def test_piped_output_is_not_wrapped(env: dict[str, Path], tmp_path: Path) -> None:
    deep = tmp_path / ("a-rather-long-directory-name-" * 4)
    deep.mkdir()
    ledger = deep / "ledger.db"
    ran = subprocess.run(
        [sys.executable, "-m", "twice", "run", str(env["pipeline"]), "--interval", DAYS[0],
         "--ledger", str(ledger), "--deadline", "none"],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": ""}, check=False)
    assert ran.returncode == 0, ran.stderr
    # the title names the ledger path in full on one line, and the closing sentence is one line
    assert any(str(ledger) in line for line in ran.stdout.splitlines()), ran.stdout
    assert any(line.startswith("2 succeeded.") and line.rstrip().endswith("for the evidence.")
               for line in ran.stdout.splitlines()), ran.stdout


def test_a_long_run_of_skipped_units_is_one_line_and_a_short_one_each(
        env: dict[str, Path]) -> None:
    """A restart over many verified units reaches its new work without a line per unit; a
    few skipped units are still named one by one, and ``--json`` keeps every reason."""
    start, end = "2026-10-20", "2026-11-04"  # 15 days, 30 units
    assert twice(env, "backfill", "--start", start, "--end", end).exit_code == 0
    again = twice(env, "backfill", "--start", start, "--end", end)
    assert again.exit_code == 0, again.output
    lines = [line for line in again.output.splitlines() if "skipped" in line]
    assert re.search(r"2026-10-20 \.\. 2026-11-03\s+30 units skipped, already done",
                     again.output), again.output
    assert not [line for line in lines if "verified: same unit of work" in line], lines
    few = twice(env, "backfill", "--start", DAYS[0], "--end", DAYS[2])
    assert few.exit_code == 0, few.output
    each = [line for line in few.output.splitlines() if "skipped" in line and "verified" in line]
    assert len(each) == 4, few.output  # two days x two tasks, each with its reason
    as_json = twice(env, "backfill", "--start", start, "--end", end, "--json")
    runs = json.loads(as_json.stdout)["runs"]
    assert len(runs) == 30 and all(run["status"] == "skipped" and run["reason"] for run in runs)
