"""Issue 39, honest estimates: every decision that times an attempt says how long it assumed the
attempt takes and where that came from (the task's estimate, its timeout, the last measured
attempt, or nothing: 0 s), in the human output of ``run``, ``backfill``, ``worker``, ``decide
--ledger`` and ``update`` and as ``assumed_duration``/``duration_basis`` in their JSON; and
``twice check`` lists a definition's warnings, failing under ``--strict``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from twice.cli import cli

REPO = Path(__file__).resolve().parents[2]

#: one task without estimated_duration or timeout, one with a timeout, one with both
PIPELINE = '''\
from datetime import time

from twice import Pipeline, Schedule

pipeline = Pipeline("honest", schedule=Schedule.daily("UTC"), deadline=time(6, 0))


@pipeline.task(safe_repeat=True)
def bare(ctx):
    return 1


@pipeline.task(safe_repeat=True, timeout=600)
def bounded(ctx):
    return 2


@pipeline.task(safe_repeat=True, timeout=600, estimated_duration=120)
def estimated(ctx):
    return 3
'''

NONE = "assumed 0 s per attempt: no estimate, timeout or measurement"
TIMEOUT = "assumed 10 min per attempt from its timeout"
ESTIMATE = "assumed 2 min per attempt from its estimate"
MEASURED = "per attempt from its last measured attempt"
# a deadline long past for the interval: the planner refuses attempt 1, having timed it
PAST = "2026-11-24T06:00:00Z"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")  # tables unwrapped: each phrase on one line
    monkeypatch.delenv("TWICE_LEDGER", raising=False)
    (tmp_path / "honest.py").write_text(PIPELINE)
    return tmp_path


def twice(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def run(*args: str) -> Result:
    return twice("run", "honest.py", "--ledger", "ledger.db", *args)


def test_run_says_what_each_task_was_assumed_to_take(work: Path) -> None:
    result = run("--interval", "2026-11-23", "--deadline", "none")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0].split(".")[1]: line for line in result.stdout.splitlines()
            if line.strip().startswith("honest.")}
    assert set(rows) == {"bare", "bounded", "estimated"}, result.stdout
    assert NONE in result.stdout
    assert TIMEOUT in result.stdout
    assert ESTIMATE in result.stdout


def test_run_json_carries_the_basis(work: Path) -> None:
    result = run("--interval", "2026-11-23", "--deadline", "none", "--json")
    assert result.exit_code == 0, result.output
    units = {unit["task"]: unit for unit in json.loads(result.stdout)["units"]}
    assert (units["bare"]["assumed_duration"], units["bare"]["duration_basis"]) == (0.0, "none")
    assert (units["bounded"]["assumed_duration"], units["bounded"]["duration_basis"]) == (
        600.0, "assumed: the task's timeout")
    assert (units["estimated"]["assumed_duration"], units["estimated"]["duration_basis"]) == (
        120.0, "declared")


def test_a_rerun_assumes_the_last_measured_duration(work: Path) -> None:
    assert run("--interval", "2026-11-23", "--deadline", "none").exit_code == 0
    again = run("--interval", "2026-11-23", "--deadline", "none", "--tasks", "bare", "--force")
    assert again.exit_code == 0, again.output
    assert MEASURED in again.stdout
    assert NONE not in again.stdout
    as_json = run("--interval", "2026-11-23", "--deadline", "none", "--tasks", "bare",
                  "--force", "--json")
    (unit,) = json.loads(as_json.stdout)["units"]
    assert unit["duration_basis"] == "measured"
    assert unit["assumed_duration"] > 0


def test_a_skipped_unit_claims_no_assumption(work: Path) -> None:
    assert run("--interval", "2026-11-23", "--deadline", "none").exit_code == 0
    again = run("--interval", "2026-11-23", "--deadline", "none", "--json")
    units = json.loads(again.stdout)["units"]
    assert all(unit["skipped"] for unit in units)
    assert {(u["assumed_duration"], u["duration_basis"]) for u in units} == {(None, None)}
    assert "per attempt" not in run("--interval", "2026-11-23", "--deadline", "none").stdout


def _refused(work: Path) -> Result:
    """``bare`` for 2026-11-23 against a deadline long past: deadline-infeasible, planned on
    0 s since nothing says how long it takes."""
    result = run("--interval", "2026-11-23", "--tasks", "bare", "--deadline", PAST)
    assert result.exit_code == 1, result.output
    return result


def test_a_refusal_says_it_assumed_zero_seconds(work: Path) -> None:
    result = _refused(work)
    assert "deadline-infeasible" in result.stdout
    assert NONE in result.stdout


def test_decide_over_the_ledger_says_what_it_assumed(work: Path) -> None:
    _refused(work)
    table = twice("decide", "--ledger", "ledger.db", "--format", "table")
    assert table.exit_code == 0, table.output
    assert "deadline-infeasible" in table.stdout
    assert NONE in table.stdout
    as_json = twice("decide", "--ledger", "ledger.db")
    (task,) = json.loads(as_json.stdout)["tasks"]
    assert task["decision"] == "deadline-infeasible"
    assert (task["assumed_duration"], task["duration_basis"]) == (0.0, "none")


def test_decide_says_nothing_for_a_decision_that_times_nothing(work: Path) -> None:
    assert run("--interval", "2026-11-23", "--deadline", "none").exit_code == 0
    table = twice("decide", "--ledger", "ledger.db", "--format", "table")
    assert "validate-output" in table.stdout
    assert "per attempt" not in table.stdout
    tasks = json.loads(twice("decide", "--ledger", "ledger.db").stdout)["tasks"]
    assert {task["duration_basis"] for task in tasks} == {None}


def test_update_reads_out_the_recorded_assumption(work: Path) -> None:
    _refused(work)
    update = twice("update", "--ledger", "ledger.db")
    assert update.exit_code == 0, update.output
    (line,) = [line for line in update.stdout.splitlines() if line.startswith("Next action")]
    assert "deadline-infeasible for bare" in line
    assert NONE in line
    (unit,) = json.loads(twice("update", "--ledger", "ledger.db", "--json").stdout)["units"]
    assert (unit["assumed_duration"], unit["duration_basis"]) == (0.0, "none")
    handover = twice("handover", "--ledger", "ledger.db")
    assert "estimated finish incl. validation" in handover.stdout and NONE in handover.stdout


def test_status_json_carries_the_basis(work: Path) -> None:
    _refused(work)
    status = twice("status", "--ledger", "ledger.db", "--json")
    (unit,) = json.loads(status.stdout)["units"]
    assert unit["duration_basis"] == "none"


def test_backfill_and_worker_say_it_per_unit(work: Path) -> None:
    backfill = twice("backfill", "honest.py", "--interval", "2026-11-23", "--ledger",
                     "ledger.db", "--tasks", "bare")
    assert backfill.exit_code == 0, backfill.output
    (line,) = [line for line in backfill.stdout.splitlines() if "2026-11-23 bare" in line]
    assert line.rstrip().endswith(NONE), line
    runs = json.loads(twice("backfill", "honest.py", "--interval", "2026-11-24", "--ledger",
                            "ledger.db", "--tasks", "bounded", "--json").stdout)["runs"]
    assert [r["duration_basis"] for r in runs] == ["assumed: the task's timeout"]
    worker = twice("worker", "honest.py", "--interval", "2026-11-25", "--ledger", "ledger.db",
                   "--deadline", "none", "--once")
    assert worker.exit_code == 0, worker.output
    assert NONE in worker.stdout and TIMEOUT in worker.stdout and ESTIMATE in worker.stdout


# -- twice check ---------------------------------------------------------------------------

CLEAN = '''\
from datetime import time

import pyarrow as pa

from twice import Pipeline, Schedule

pipeline = Pipeline("clean", schedule=Schedule.daily("UTC"), deadline=time(6, 0))


@pipeline.task(destination="duckdb:wh.duckdb?partition_column=day#t", write="replace",
               timeout=600, estimated_duration=120)
def load(ctx):
    return pa.table({"day": pa.array([ctx.interval.start.date()], pa.date32())})
'''

SLOW_TIMEOUT = '''\
from twice import Pipeline, Schedule

pipeline = Pipeline("slow", schedule=Schedule.daily("UTC"))


@pipeline.task(timeout=3600, estimated_duration=60, reconcile=lambda ctx: None)
def load(ctx):
    return 1
'''


def test_check_lists_each_warning_naming_its_task(work: Path) -> None:
    result = twice("check", "honest.py")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert ("warning: task 'bare': neither estimated_duration nor timeout: the deadline planner "
            "assumes an attempt takes 0 s until one has been measured") in lines
    assert "warning: task 'bare': no timeout; a hung attempt holds its slots until someone " \
           "notices" in lines
    assert all(line.startswith("warning: task '") for line in lines[:-1])
    assert lines[-1] == f"honest.py: pipeline 'honest': {len(lines) - 1} warning(s)"


def test_check_strict_exits_1_on_any_warning_and_0_without(work: Path) -> None:
    assert twice("check", "honest.py", "--strict").exit_code == 1
    (work / "clean.py").write_text(CLEAN)
    clean = twice("check", "clean.py", "--strict")
    assert clean.exit_code == 0, clean.output
    assert clean.stdout.splitlines() == ["clean.py: pipeline 'clean': no warnings"]
    as_json = json.loads(twice("check", "honest.py", "--strict", "--json").stdout)
    assert as_json["ok"] is False and as_json["strict"] is True
    assert any("'bare': neither estimated_duration nor timeout" in w for w in as_json["warnings"])


def test_check_warns_of_a_timeout_far_above_the_estimate(work: Path) -> None:
    (work / "slow.py").write_text(SLOW_TIMEOUT)
    result = twice("check", "slow.py", "--strict")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == (
        "warning: task 'load': timeout 3600 s is 60x its estimated_duration 60 s: a hung attempt "
        "is detected only after 3600 s; a timeout near 180 s would detect it sooner")


@pytest.mark.parametrize(("name", "text", "said"), [
    ("missing.py", None, "pipeline file not found: missing.py"),
    ("broken.py", "import no_such_module_here\n", "import failed: ModuleNotFoundError"),
    ("cycle.py", "from twice import Pipeline, Schedule\n"
                 "pipeline = Pipeline('c', schedule=Schedule.daily('UTC'))\n"
                 "pipeline.task(name='a', depends_on=['nowhere'])(lambda ctx: 1)\n",
     "is invalid"),
])
def test_check_bad_input_exits_2_with_one_error_line(
        work: Path, name: str, text: str | None, said: str) -> None:
    if text is not None:
        (work / name).write_text(text)
    result = twice("check", name, "--strict")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert first.startswith("twice check: error: ") and said in result.stderr, result.stderr


def test_check_prints_each_warning_once(work: Path) -> None:
    """Loading warns on standard error; ``check`` lists the warnings instead, not both."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "twice", "check", "honest.py"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    printed = done.stdout + done.stderr
    assert printed.count("neither estimated_duration nor timeout") == 1
