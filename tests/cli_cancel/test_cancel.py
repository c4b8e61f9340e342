"""``twice cancel``: asking for a remote job's cancel is a request, recorded, never an outcome.

Issue 39: the source documents say cancelling is a request, that the job may still finish,
that costs may remain and that published results are not undone; only the Python job API
could send one.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from twice.cli import cli
from twice.ledger import Ledger

PIPELINE = '''
import json
from pathlib import Path
from twice import OutcomeUnknownError, Pipeline, RemoteState, Schedule

JOBS = Path({jobs!r})
pipeline = Pipeline("loads", schedule=Schedule.daily("UTC"))


def state(job_id):
    jobs = json.loads(JOBS.read_text()) if JOBS.exists() else {{}}
    return jobs.get(job_id)


def put(job_id, value):
    jobs = json.loads(JOBS.read_text()) if JOBS.exists() else {{}}
    jobs[job_id] = value
    JOBS.write_text(json.dumps(jobs))


def reconcile(job_id, ctx):
    return {{"running": RemoteState.RUNNING, "cancelled": RemoteState.FAILED,
             "done": RemoteState.SUCCEEDED, None: RemoteState.NOT_FOUND}}[state(job_id)]


def cancel(job_id, ctx):
    put(job_id, "cancelled")
    return "cancel accepted"


@pipeline.task(reconcile=reconcile, cancel=cancel, timeout=60, safe_repeat=True)
def load(ctx):
    if state(ctx.job_id) is None and ctx.generation == 1:
        put(ctx.job_id, "running")
        raise OutcomeUnknownError("the response to jobs.insert was lost")
    put(ctx.job_id, "done")
'''


def _setup(tmp_path: Path) -> tuple[Path, str, CliRunner]:
    jobs = tmp_path / "jobs.json"
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(PIPELINE.format(jobs=str(jobs)))
    ledger = str(tmp_path / "ledger.db")
    runner = CliRunner()
    first = runner.invoke(cli, ["run", str(pipeline), "--interval", "2026-11-30",
                                "--ledger", ledger, "--deadline", "none"])
    assert first.exit_code == 1, first.output  # the outcome is unknown
    return pipeline, ledger, runner


def test_a_cancel_is_recorded_as_a_request_and_the_next_run_reconciles(tmp_path: Path) -> None:
    pipeline, ledger, runner = _setup(tmp_path)
    result = runner.invoke(cli, ["cancel", str(pipeline), "loads.load.20261130", "--ledger",
                                 ledger, "--note", "wrong source file", "--operator", "alice",
                                 "--json"])
    assert result.exit_code == 0, result.output
    request = json.loads(result.stdout)
    from tests.cli_vocabulary.test_json_output import documented

    assert set(request) == documented()["twice cancel --json"]  # docs/reference/json-output.md
    assert request["answer"] == "cancel accepted" and request["basis"] == "asserted"
    assert request["attempt_outcome"] == "unknown"
    jobs = json.loads((tmp_path / "jobs.json").read_text())
    assert jobs[request["job_id"]] == "cancelled"
    with Ledger.open(ledger) as opened:
        latest = opened.latest_attempt(request["uow_id"])
        assert latest is not None and latest.outcome == "unknown"  # a request, not an outcome
        [seen] = [o for o in opened.observations(request["uow_id"])
                  if o.state == "cancel-requested"]
        assert seen.source == "operator:alice" and seen.detail["note"] == "wrong source file"
    again = runner.invoke(cli, ["run", str(pipeline), "--interval", "2026-11-30", "--ledger",
                                ledger, "--deadline", "none"])
    assert again.exit_code == 0, again.output
    with Ledger.open(ledger) as opened:
        attempts = opened.attempts(request["uow_id"])
        assert attempts[-1].outcome == "succeeded"
        assert attempts[-1].job_id != request["job_id"]  # the cancelled job's id is not reused


def test_the_text_says_what_a_cancel_is(tmp_path: Path) -> None:
    pipeline, ledger, runner = _setup(tmp_path)
    result = runner.invoke(cli, ["cancel", str(pipeline), "loads.load.20261130", "--ledger",
                                 ledger, "--note", "stop it"])
    assert result.exit_code == 0, result.output
    assert "the job may still finish" in result.output
    assert "stays billed" in result.output and "not undone" in result.output


def test_nothing_to_cancel_is_refused_naming_the_field(tmp_path: Path) -> None:
    pipeline, ledger, runner = _setup(tmp_path)
    runner.invoke(cli, ["cancel", str(pipeline), "loads.load.20261130", "--ledger", ledger,
                        "--note", "stop it"])
    assert runner.invoke(cli, ["run", str(pipeline), "--interval", "2026-11-30", "--ledger",
                               ledger, "--deadline", "none"]).exit_code == 0
    done = runner.invoke(cli, ["cancel", str(pipeline), "loads.load.20261130", "--ledger",
                               ledger, "--note", "too late"])
    assert done.exit_code == 2
    assert "UOW_ID: attempt" in done.output and "already ended succeeded" in done.output
    no_note = runner.invoke(cli, ["cancel", str(pipeline), "loads.load.20261130", "--ledger",
                                  ledger])
    assert no_note.exit_code == 2 and "--note" in no_note.output
