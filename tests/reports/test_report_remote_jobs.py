"""Remote jobs in the reports, from REAL runs: the executor drives a task against FakeBigQuery on a
SQLite ledger, and the update and the handover read what the engine recorded.

- ``twice update`` for a job whose outcome is unknown (still running at the service) or whose
  attempt is running: it always names the next action (the planner's observe-running /
  reconcile-remote / refresh-observation, with the job id) and when the next evidence is due,
  and it flags evidence older than the run's max observation age.
- ``twice handover``'s "DONE with an error" example finds the failed job however it was run:
  a ``JobStatus`` the task returned (the executor's own remote path), ``run_job`` raising
  ``JobFailed`` inside task code, and reconcile finding the job failed after a lost answer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from click.testing import CliRunner
from tests.executor.helpers import ManualClock, day
from tests.reports.test_report_handover import EXAMPLES, SECTIONS, section

from twice.cli import cli
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.remote import (
    JobError,
    reconcile_job,
    run_job,
    submit_or_inspect,
    wait_for_job,
)
from twice.reports import load_evidence, render_handover, render_update
from twice.testing.fake_bigquery import FakeBigQuery

QUOTA = JobError("quotaExceeded", "Quota exceeded: too many table update operations")
Path_ = Literal["returned", "run_job", "reconcile"]


@dataclass(frozen=True)
class RemoteRun:
    url: str
    uow_id: str
    job_id: str
    ended: datetime  # the run's clock when it returned


def _pipeline(bq: FakeBigQuery, clock: ManualClock, body: str) -> Pipeline:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=RetryPolicy(max_attempts=1, jitter="none"), safe_repeat=True,
                   reconcile=lambda job_id, ctx: reconcile_job(bq, job_id),
                   destination="bq:funds.positions")
    def load(ctx: Any) -> Any:
        if body == "returned":  # the executor judges the JobStatus the task returns
            submit_or_inspect(bq, ctx.job_id, {})
            return wait_for_job(bq, ctx.job_id, poll_interval=1, sleep=clock.sleep,
                                clock=lambda: clock().timestamp())
        if body == "waits-30s":  # gives up after 30 s while the job still runs: unknown
            submit_or_inspect(bq, ctx.job_id, {})
            return wait_for_job(bq, ctx.job_id, poll_interval=1, timeout=30, sleep=clock.sleep,
                                clock=lambda: clock().timestamp())
        return run_job(bq, ctx.job_id, {}, poll_interval=1, sleep=clock.sleep)

    return pipeline


def _run(tmp_path: Path, bq: FakeBigQuery, clock: ManualClock, body: str) -> RemoteRun:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url, clock=clock) as ledger:
        result = Executor(_pipeline(bq, clock, body), ledger, clock=clock, sleep=clock.sleep,
                          poll_interval=5, observe_timeout=20).run(day())
        unit = result.unit("load")
        assert unit.job_id is not None
        return RemoteRun(url, unit.uow_id, unit.job_id, clock())


def lines_of(text: str) -> dict[str, str]:
    return {line.split(":", 1)[0]: line for line in text.splitlines()[1:]}


# -- twice update: an unknown job that is still running at the service ----------------------


@pytest.fixture
def unknown_run(tmp_path: Path) -> RemoteRun:
    """The task gives up waiting after 30 s (JobStillRunning: unknown); the executor
    reconciles by the job id for 20 s and the service still says running: nothing resubmitted,
    and the recorded reconcile-remote decision is older than the reconcile observations."""
    clock = ManualClock()
    bq = FakeBigQuery(clock=clock, duration=3600.0)
    run = _run(tmp_path, bq, clock, "waits-30s")
    assert len(bq.jobs) == 1
    return run


def test_update_for_an_unknown_running_job_flags_stale_evidence_and_names_the_action(
    unknown_run: RemoteRun,
) -> None:
    as_of = unknown_run.ended + timedelta(minutes=15)
    text = CliRunner().invoke(cli, ["update", "--ledger", unknown_run.url, "--as-of",
                                    as_of.isoformat()], catch_exceptions=False).stdout
    lines = lines_of(text)
    job = unknown_run.job_id
    attention = lines["Needs attention"]
    assert f"unknown: load attempt 1 (job {job}) unknown since" in attention
    assert "last evidence 15 min old via reconcile, over the 10 min limit" in attention
    action = next(line for key, line in lines.items() if key.startswith("Next action"))
    assert "No current decision" not in action and "no current planner decision" not in action
    assert f"refresh-observation for load (job {job}; decided as of this update)" in action
    due = lines["Next evidence"]
    assert "none scheduled" not in due
    assert due.startswith("Next evidence: due now:") and job in due
    assert "went stale at" in due


def test_update_for_a_fresh_unknown_job_wants_evidence_now(unknown_run: RemoteRun) -> None:
    """Fresh evidence of an unknown outcome is still no settlement: reconcile now, by the id."""
    evidence = load_evidence(unknown_run.url, as_of=unknown_run.ended + timedelta(minutes=1))
    lines = lines_of(render_update(evidence))
    job = unknown_run.job_id
    action = next(line for key, line in lines.items() if key.startswith("Next action"))
    assert f"reconcile-remote for load (job {job}; decided as of this update)" in action
    assert "No current decision" not in action
    due = lines["Next evidence"]
    assert due.startswith(f"Next evidence: due now: reconcile load (look job {job} up by its id).")
    assert "last evidence 1 min old via reconcile, do not retry" in lines["Needs attention"]


# -- twice update: an attempt still running (the worker is inside the task) ------------------


@pytest.fixture
def running_run(tmp_path: Path) -> Iterator[tuple[RemoteRun, ManualClock]]:
    """The executor runs in a thread, its task blocked while the job runs; the update is read
    meanwhile from the same ledger file."""
    clock = ManualClock()
    bq = FakeBigQuery(clock=clock, duration=3600.0)
    inside, release = threading.Event(), threading.Event()
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=RetryPolicy(max_attempts=1, jitter="none"), safe_repeat=True,
                   reconcile=lambda job_id, ctx: reconcile_job(bq, job_id),
                   destination="bq:funds.positions")
    def load(ctx: Any) -> Any:
        status = submit_or_inspect(bq, ctx.job_id, {})
        inside.set()
        release.wait(30)
        return status

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = Ledger.open(url, clock=clock)
    worker = threading.Thread(target=lambda: Executor(
        pipeline, ledger, clock=clock, sleep=clock.sleep, poll_interval=5, observe_timeout=5,
    ).run(day()))
    worker.start()
    try:
        assert inside.wait(30)
        [job_id] = bq.jobs
        yield RemoteRun(url, "", job_id, clock()), clock
    finally:
        release.set()
        worker.join(30)
        ledger.close()


def test_update_for_a_running_attempt_names_the_action_and_when_evidence_is_due(
    running_run: tuple[RemoteRun, ManualClock],
) -> None:
    run, _ = running_run
    job = run.job_id
    fresh = lines_of(render_update(load_evidence(run.url, as_of=run.ended + timedelta(minutes=2))))
    action = next(line for key, line in fresh.items() if key.startswith("Next action"))
    assert f"observe-running for load (job {job}; decided as of this update)" in action
    assert "No current decision" not in action
    assert fresh["Next evidence"] == (f"Next evidence: then 05:10:00Z observe load (look "
                                      f"job {job} up by its id), before its evidence goes stale.")
    stale = lines_of(render_update(load_evidence(run.url,
                                                 as_of=run.ended + timedelta(minutes=15))))
    assert ("stale-evidence: load attempt 1 running since 05:00:00Z (last evidence 15 min old, "
            "over the 10 min limit)") in stale["Needs attention"]
    action = next(line for key, line in stale.items() if key.startswith("Next action"))
    assert f"refresh-observation for load (job {job}; decided as of this update)" in action
    assert stale["Next evidence"] == (
        f"Next evidence: due now: refresh load (look job {job} up by its id): its evidence via "
        "executor went stale at 05:10:00Z.")


# -- twice handover: DONE with an error, however the job was run ------------------------------


@pytest.mark.parametrize("path", ["returned", "run_job", "reconcile"])
def test_handover_finds_done_with_error_on_every_path(tmp_path: Path, path: Path_) -> None:
    clock = ManualClock()
    bq = FakeBigQuery(clock=clock, duration=1.0)
    bq.plan_next(error_result=QUOTA)
    if path == "reconcile":
        bq.lose_acknowledgements()  # the submit's answer is lost: reconcile finds the failure
    run = _run(tmp_path, bq, clock, "returned" if path == "returned" else "run_job")
    with Ledger.open(run.url) as ledger:
        [generation] = ledger.job_generations(run.uow_id)
        assert generation.state == "confirmed-failed"
    text = render_handover(load_evidence(run.url, as_of=run.ended))
    done = section(section(text, SECTIONS[7]), EXAMPLES[1])
    assert "_None recorded._" not in done, done
    assert run.uow_id in done
    assert f"generation 1 `{run.job_id}` confirmed-failed" in done
    if path == "reconcile":
        assert "observed `failed` via `reconcile`" in done
        assert "`twice.engine.reconcile.RemoteJobFailed`" in done
    else:
        # the error the engine recorded, by its class, with its message whole
        assert "`twice.remote.jobs.JobFailed`" in done
        assert "quotaExceeded: Quota exceeded: too many table update operations" in done
    if path == "returned":
        assert "observed `failed` via `remote:bigquery`" in done


def test_handover_done_with_error_leaves_out_other_failures(tmp_path: Path) -> None:
    """A task that failed without a remote job is not a DONE-with-error example."""
    clock = ManualClock()
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

    @pipeline.task(retry=RetryPolicy(max_attempts=1, jitter="none"), safe_repeat=True,
                   destination="bq:funds.positions")
    def load(ctx: Any) -> Any:
        raise ValueError("column account_id missing")

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url, clock=clock) as ledger:
        Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())
    text = render_handover(load_evidence(url, as_of=clock()))
    assert section(section(text, SECTIONS[7]), EXAMPLES[1]).strip() == "_None recorded._"
