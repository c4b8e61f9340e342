"""``twice cancel`` on BigQuery (issue 39's must-show): the cancel is sent as ``jobs.cancel``,
BigQuery answers with the job still RUNNING, the job then finishes DONE anyway, and the next
run settles the unit from that observation, without submitting a second job.

BigQuery cannot be reached from CI, so a real ``google-cloud-bigquery`` client is answered by
recorded REST exchanges (``tests.remote_jobs.replay``), one list per command, each holding
exactly the requests the documented protocol makes: a request twice did not make would be left
over, one it makes that is not there fails the command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.remote_jobs.replay import load
from twice.cli import cli
from twice.ledger import Ledger

pytest.importorskip("google.cloud.bigquery")

RECORDED_JOB = "twice_funds_positions_load_2024-12-02_g1"

PIPELINE = '''
import json
import os
from pathlib import Path

from tests.remote_jobs.replay import client_for
from twice import Pipeline, Schedule
from twice.remote import reconcile_job
from twice.remote.bigquery import BigQueryJobs, run_query

pipeline = Pipeline("bq", schedule=Schedule.daily("UTC"))


def service(job_id):
    """BigQuery for this call: the exchanges the phase has left, for this unit's job id."""
    text = Path(os.environ["BQ_PHASE"]).read_text().replace({recorded!r}, job_id)
    client, adapter = client_for(json.loads(text))
    return BigQueryJobs(client, location="EU"), adapter


def done(adapter):
    """What this call did not use is left for the phase's next call."""
    Path(os.environ["BQ_PHASE"]).write_text(json.dumps(list(adapter.pending)))


def reconcile(job_id, ctx):
    svc, adapter = service(job_id)
    try:
        return reconcile_job(svc, job_id)
    finally:
        done(adapter)


def cancel(job_id, ctx):
    svc, adapter = service(job_id)
    answer = svc.cancel(job_id)
    done(adapter)
    return f"jobs.cancel answered {{answer.state.value}}"


@pipeline.task(reconcile=reconcile, cancel=cancel, timeout=60, safe_repeat=True)
def load(ctx):
    svc, adapter = service(ctx.job_id)
    try:  # the worker stops waiting while the job is still RUNNING: an unknown outcome
        return run_query(svc, ctx.job_id, "SELECT 1", timeout=0, poll_interval=0)
    finally:
        done(adapter)
'''


def _phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
           exchanges: list[dict]) -> None:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(exchanges))
    monkeypatch.setenv("BQ_PHASE", str(path))


def _left() -> list[str]:
    """The requests of the current phase that no call made."""
    import os

    return [e["request"]["method"] for e in json.loads(Path(os.environ["BQ_PHASE"]).read_text())]


def _first_run(pipeline: Path, ledger: str) -> str:
    import runpy
    from datetime import date

    from twice.engine.executor import Executor

    defined = runpy.run_path(str(pipeline))["pipeline"]
    with Ledger.open(ledger) as opened:
        executor = Executor(defined, opened, observe_timeout=0.01, poll_interval=0.01)
        result = executor.run([defined.schedule.interval_for(date(2026, 11, 30))])
    [unit] = result.units
    return unit.outcome


def test_cancel_on_bigquery_the_job_finishes_anyway_and_the_unit_is_settled_from_observation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitted = load("bq_insert_then_done")[:2]  # jobs.insert: RUNNING; jobs.get: RUNNING
    cancel_sent, _, done = load("bq_cancel_too_late")  # cancel: RUNNING; ...; get: DONE
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(PIPELINE.format(recorded=RECORDED_JOB))
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))
    ledger = str(tmp_path / "ledger.db")
    runner = CliRunner()
    run = ["run", str(pipeline), "--interval", "2026-11-30", "--ledger", ledger,
           "--deadline", "none"]

    # the first run, in Python to shorten its observation (the CLI observes for 60 s): the
    # worker stops waiting, then polls the job once more; it is still RUNNING: unknown
    _phase(tmp_path, monkeypatch, "run", [*submitted, submitted[1]])
    first = _first_run(pipeline, ledger)
    assert first == "unknown-needs-reconcile"
    assert _left() == []

    _phase(tmp_path, monkeypatch, "cancel", [cancel_sent])
    asked = runner.invoke(cli, ["cancel", str(pipeline), "bq.load.20261130", "--ledger", ledger,
                                "--note", "wrong source file", "--json"])
    assert asked.exit_code == 0, asked.output
    request = json.loads(asked.stdout)
    assert request["answer"] == "jobs.cancel answered RUNNING"
    assert request["attempt_outcome"] == "unknown"  # a request, not an outcome
    assert _left() == []
    text = runner.invoke(cli, ["explain", request["uow_id"], "--ledger", ledger])
    assert "cancel-requested" in text.output

    _phase(tmp_path, monkeypatch, "rerun", [done])  # only jobs.get: no second job
    again = runner.invoke(cli, run)
    assert again.exit_code == 0, again.output
    assert _left() == [], again.output
    with Ledger.open(ledger) as opened:
        attempts = opened.attempts(request["uow_id"])
        assert [a.outcome for a in attempts] == ["succeeded"]  # the job finished anyway
        assert attempts[0].job_id == request["job_id"]
        observed = [(o.state, o.source) for o in opened.observations(request["uow_id"])]
    assert ("cancel-requested", "operator") in [(s, src.partition(":")[0])
                                                 for s, src in observed]
    # settled from what BigQuery said after the request: the job's own DONE, read by reconcile
    asked = next(i for i, (state, _) in enumerate(observed) if state == "cancel-requested")
    assert observed[asked + 1] == ("succeeded", "reconcile"), observed
