"""``twice airflow describe``: the translation table without Airflow, bad input -> exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from twice.cli.airflow_cmd import airflow

PIPELINE = '''
from twice.define.pipeline import Pipeline
from twice.core.policy import RetryPolicy
from twice.define.schedule import Schedule

pipeline = Pipeline("cli_demo", schedule=Schedule.hourly("UTC"))
pipeline.pool("api", slots=3)
policy = RetryPolicy(max_attempts=5, initial_delay=2, multiplier=3, max_delay=60,
                     transient=(ConnectionError,))

@pipeline.task(retry=policy, pool="api", slots=2, safe_repeat=True)
def pull(ctx):
    return None

@pipeline.task(depends_on=["pull"])
def push(ctx):
    return None
'''


def _file(tmp_path: Path) -> str:
    path = tmp_path / "cli_demo.py"
    path.write_text(PIPELINE)
    return str(path)


def test_describe_prints_settings_sequence_and_dag_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(airflow, ["describe", _file(tmp_path), "--ledger",
                                          "postgresql://twice:secret@db:5432/ledger"])
    assert result.exit_code == 0, result.output
    out = result.output
    for needle in ("CronDataIntervalTimetable('0 * * * *'", "retries=4", "pool='api'",
                   "pool_slots=2", "retry_exponential_backoff=3", "5 execution(s)",
                   "airflow pools set api 3", "Task push (upstream: pull)", "to_dag("):
        assert needle in out, needle
    # a URL with a password is not written into the DAG file at all: the workers read
    # $TWICE_LEDGER (tests/cli_vocabulary/test_airflow_snippet.py checks the file is valid)
    assert "secret" not in out and "ledger=None" in out and "has a password" in out
    # push has one attempt and no safe_repeat: nothing to retry, 0 retries
    assert "task_id='push',\n    retries=0," in out


def test_describe_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(airflow, ["describe", _file(tmp_path), "--json",
                                          "--dag-id", "hourly.v2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["dag_id"] == "hourly.v2"
    tasks = {t["task"]: t for t in data["tasks"]}
    assert tasks["pull"]["retries"] == 4 and tasks["pull"]["pool_slots"] == 2
    assert [row["attempt"] for row in tasks["pull"]["attempts"]] == [1, 2, 3, 4, 5]
    assert tasks["push"]["depends_on"] == ["pull"]


def test_bad_input_exits_2_naming_the_problem(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(airflow, ["describe", str(tmp_path / "nope.py")])
    assert missing.exit_code == 2 and "not found" in missing.output
    assert "Traceback" not in missing.output
    broken = tmp_path / "broken.py"
    broken.write_text("from twice.define.pipeline import Pipeline\npipeline = Pipeline(\n")
    bad = runner.invoke(airflow, ["describe", str(broken)])
    assert bad.exit_code == 2 and "syntax error" in bad.output
    dag_id = runner.invoke(airflow, ["describe", _file(tmp_path), "--dag-id", "no spaces"])
    assert dag_id.exit_code == 2 and "--dag-id" in dag_id.output
