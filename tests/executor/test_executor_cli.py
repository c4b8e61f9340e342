"""``twice run``, ``status``, ``explain`` and ``decide --ledger``: output, exit codes, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from twice.cli import cli

PIPELINE = """\
from datetime import timedelta
from twice.define.pipeline import Pipeline
from twice.core.policy import RetryPolicy
from twice.define.schedule import Schedule

pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"), workflow_timeout=60)
pipeline.pool("positions_db", slots=2)
CALLS = {"extract": 0}

@pipeline.task(retry=RetryPolicy(max_attempts=3, initial_delay=0.01, jitter="equal",
                                 transient=(ConnectionError,)),
               safe_repeat=True, timeout=5, pool="positions_db", slots=2)
def extract(ctx):
    CALLS["extract"] += 1
    if CALLS["extract"] == 1:
        raise ConnectionError("positions db reset the connection")
    ctx.nonfatal("2 rows skipped", 2)
    return 10

@pipeline.task(depends_on=[extract], timeout=5)
def transform(ctx):
    return ctx.upstream["extract"] * 2

@pipeline.task(depends_on=[transform], timeout=5)
def load(ctx):
    if ctx.params.get("fail", True):
        raise ValueError("column account_id missing")
"""


@pytest.fixture
def pipeline_file(tmp_path: Path) -> Path:
    path = tmp_path / "pipelines" / "funds.py"
    path.parent.mkdir()
    path.write_text(PIPELINE)
    return path


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.db")


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_run_prints_a_summary_and_exits_1_when_a_unit_fails(pipeline_file: Path,
                                                           db: str) -> None:
    result = invoke("run", str(pipeline_file), "--interval", "2026-11-30", "--ledger", db,
                    "--seed", "3")
    assert result.exit_code == 1
    for text in ("extract", "succeeded", "failed-permanent", "repair-cause",
                 "ValueError: column account_id missing", "2 succeeded"):
        assert text in result.output


def test_run_json_then_status_explain_decide(pipeline_file: Path, db: str) -> None:
    ran = invoke("run", str(pipeline_file), "--interval", "2026-11-30", "--ledger", db, "--json")
    assert ran.exit_code == 1
    report = json.loads(ran.stdout)
    units = {unit["task"]: unit for unit in report["units"]}
    assert units["extract"]["attempts"] == 2 and units["extract"]["outcome"] == "succeeded"
    assert units["load"]["outcome"] == "failed-permanent"
    assert report["ok"] is False and report["outputs_verified"] is False

    status = invoke("status", "--ledger", db, "--json")
    assert status.exit_code == 0
    rows = {row["task"]: row for row in json.loads(status.stdout)["units"]}
    assert rows["extract"]["attempt"] == 2 and rows["extract"]["outcome"] == "succeeded"
    assert rows["extract"]["source"] == "executor" and rows["extract"]["age"] >= 0
    assert rows["extract"]["decision"] == "validate-output"
    assert rows["load"]["decision"] == "repair-cause"
    assert rows["load"]["policy_source"] == "ledger"  # recorded by the run itself

    with_file = invoke("status", "--ledger", db, "--pipeline-file", str(pipeline_file),
                       "--json")
    rows = {row["task"]: row for row in json.loads(with_file.stdout)["units"]}
    assert rows["load"]["policy_source"] == "pipeline"

    table = invoke("status", "--ledger", db)
    assert table.exit_code == 0 and "funds.extract" in table.output
    assert "validate-output" in table.output

    explained = invoke("explain", units["extract"]["uow_id"], "--ledger", db, "--json")
    kinds = [event["kind"] for event in json.loads(explained.stdout)["events"]]
    assert kinds.count("attempt-started") == 2 and "nonfatal-error" in kinds
    assert "decision" in kinds and kinds[0] == "unit-recorded"
    readable = invoke("explain", units["extract"]["uow_id"][:20], "--ledger", db)
    assert readable.exit_code == 0
    assert "attempt 1 finished: failed-transient" in readable.output
    assert "transient error ConnectionError" in readable.output

    decided = invoke("decide", "--ledger", db, "--json")
    assert decided.exit_code == 0
    tasks = {row["task"]: row["decision"] for row in json.loads(decided.stdout)["tasks"]}
    assert tasks == {"extract": "validate-output", "transform": "validate-output",
                     "load": "repair-cause"}
    as_table = invoke("decide", "--ledger", db, "--format", "table")
    assert "repair-cause" in as_table.output


def test_run_exit_0_when_everything_succeeds(tmp_path: Path, db: str) -> None:
    path = tmp_path / "ok.py"
    path.write_text(PIPELINE.replace('ctx.params.get("fail", True)', "False"))
    result = invoke("run", str(path), "--start", "2026-11-29", "--end", "2026-12-01",
                    "--ledger", db, "--tasks", "extract")
    assert result.exit_code == 0, result.output
    assert result.output.count("succeeded") >= 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "missing.py", "--interval", "2026-11-30"], "pipeline file not found: missing.py"),
        (["run", "{file}", "--interval", "2026-11-31"], "is not an ISO date"),
        (["run", "{file}", "--interval", "2026-11-30T05:00"], "not an interval start"),
        (["run", "{file}"], "give --interval DATE"),
        (["run", "{file}", "--interval", "2026-11-30", "--start", "2026-11-29"],
         "not both"),
        (["run", "{file}", "--interval", "2026-11-30", "--tasks", "lod"],
         "no task 'lod'; did you mean 'load'?"),
        (["run", "{file}", "--interval", "2026-11-30", "--ledger", "mysql://x/y"],
         "unsupported ledger URL"),
        (["status", "--ledger", "{missing_db}"], "no ledger at"),
        (["status", "--ledger", "{db}", "--as-of", "yesterday"], "--as-of"),
        (["explain", "nope", "--ledger", "{db}"], "unknown unit of work 'nope'"),
        (["decide", "--ledger", "{missing_db}"], "no ledger at"),
        (["decide", "--ledger", "{db}", "--as-of", "2026-12-01T05:00"], "no UTC offset"),
        (["status", "--ledger", "{db}", "--pipeline-file", "nothing.py"],
         "pipeline file not found"),
        (["status", "--ledger", "{db}", "--pipeline", "nothing.py"],
         "--pipeline takes a pipeline's name"),
    ],
)
def test_bad_input_exits_2_with_a_message(pipeline_file: Path, db: str, tmp_path: Path,
                                          args: list[str], message: str) -> None:
    # a real ledger for the cases that need one
    invoke("run", str(pipeline_file), "--interval", "2026-11-30", "--ledger", db,
           "--tasks", "extract")
    filled = [a.format(file=pipeline_file, db=db, missing_db=tmp_path / "absent.db")
              for a in args]
    result = invoke(*filled)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_subprocess_errors_have_no_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(textwrap.dedent("""\
        from twice.define.pipeline import Pipeline
        from twice.define.schedule import Schedule
        pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

        @pipeline.task(depends_on=["extrct"])
        def load(ctx):
            pass
    """))
    for args in (["run", str(broken), "--interval", "2026-11-30"],
                 ["run", str(tmp_path / "none.py"), "--interval", "2026-11-30"],
                 ["explain", "x", "--ledger", str(tmp_path / "none.db")]):
        done = subprocess.run(
            [sys.executable, "-c", "from twice.cli import main; main()", *args],
            capture_output=True, text=True, cwd=tmp_path, timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert done.stderr.strip()
    assert not (tmp_path / "none.db").exists()  # status/explain never create a ledger


def test_decide_over_the_ledger_asks_nothing_of_a_verified_unit(tmp_path: Path) -> None:
    """Found by a probe: ``twice decide --ledger`` told the operator to validate the output of
    every verified unit (the lab's raw ``validate-output``), which status calls done. The table
    now shows each unit's health, and a settled one has no decision; the JSON keeps the raw
    decision beside ``health`` and ``nextAction``."""
    path = tmp_path / "verified.py"
    path.write_text(
        "import pyarrow as pa\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('settled', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination='sqlite:///{tmp_path}/w.db?partition_column=day#t',\n"
        "               write='replace', safe_repeat=True)\n"
        "def t(ctx):\n"
        "    return pa.table({'day': [ctx.interval.start.date()], 'v': [1]})\n"
    )
    db = str(tmp_path / "l.db")
    ran = invoke("run", str(path), "--interval", "2026-11-30", "--deadline", "none",
                 "--ledger", db)
    assert ran.exit_code == 0, ran.output
    table = invoke("decide", "--ledger", db, "--format", "table")
    assert table.exit_code == 0, table.output
    assert "verified" in table.output and "validate-output" not in table.output
    [row] = json.loads(invoke("decide", "--ledger", db).output)["tasks"]
    assert (row["health"], row["next_action"], row["decision"]) == (
        "verified", None, "validate-output")


def test_run_says_what_it_could_not_verify_and_whose_word_a_success_is(tmp_path: Path) -> None:
    """Found by a probe: ``twice run`` said every success had its destination partition
    fingerprinted, for a task with no destination too; and a unit an operator resolved as
    succeeded was shown as a plain earlier success. Both now say what they are."""
    from click.testing import CliRunner

    path = tmp_path / "side.py"
    path.write_text(
        "import os, time\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('side', schedule=Schedule.daily('UTC'))\n"
        "@pipeline.task(timeout=0.2)\n"
        "def notify(ctx):\n"
        "    if os.environ.get('SIDE_SLOW'):\n"
        "        time.sleep(1)\n"
    )
    db = str(tmp_path / "l.db")

    def run(day: str, *, slow: bool) -> Result:
        return CliRunner().invoke(cli, ["run", str(path), "--interval", day, "--deadline",
                                        "none", "--ledger", db],
                                  env={"SIDE_SLOW": "1" if slow else ""})

    done = run("2026-11-29", slow=False)
    assert done.exit_code == 0, done.output
    assert "notify has no destination twice can read" in " ".join(done.output.split())
    assert "unknown" in run("2026-11-30", slow=True).output
    resolved = invoke("resolve", "side.notify.20261130", "--as", "succeeded", "--note",
                      "the mail went out", "--operator", "alice", "--ledger", db)
    assert resolved.exit_code == 0, resolved.output
    again = run("2026-11-30", slow=False)
    assert again.exit_code == 0, again.output
    assert "asserted by operator alice" in " ".join(again.output.split())


def test_a_held_unit_is_not_shown_as_retry_eligible(tmp_path: Path) -> None:
    """Found by a probe: the run table gave a held unit (a task that is not safe_repeat,
    already succeeded) the planner's raw next step (``retry-eligible``, ``validate-output``):
    it runs again only when named with --repeat, as its reason says."""
    from click.testing import CliRunner

    path = tmp_path / "p.py"
    path.write_text("from twice import Pipeline, Schedule\n"
                    "pipeline = Pipeline('held', schedule=Schedule.daily('UTC'))\n"
                    "@pipeline.task(reconcile=lambda ctx: None)\n"
                    "def notify(ctx):\n    pass\n")
    args = ["run", str(path), "--interval", "2026-11-01", "--deadline", "none", "--ledger",
            str(tmp_path / "l.db")]
    assert CliRunner().invoke(cli, args).exit_code == 0
    held = CliRunner().invoke(cli, [*args, "--force"], terminal_width=300)
    assert "held" in held.output and "--repeat notify" in held.output
    assert "retry-eligible" not in held.output and "validate-output" not in held.output
