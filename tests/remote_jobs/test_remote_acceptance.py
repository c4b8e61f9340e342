"""Acceptance of a job that writes a remote table twice cannot open (``bq:project.dataset.table``):
decided on what the job reported, the seed's central case (a job DONE with non-fatal errors,
weighed against acceptance).

Found by issue 39: ``destination="bq:..."`` with ``AcceptanceCriteria(max_nonfatal_errors=5)``
was accepted at definition, and after the job succeeded every attempt failed with
``DestinationSpecError: unknown destination scheme 'bq'``, failed-permanent.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.executor.helpers import ManualClock, day
from twice.core.outcomes import RemoteState
from twice.define.acceptance import AcceptanceCriteria
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.remote.jobs import JobError, JobState, JobStatus


def _run(tmp_path: Path, warnings: int, statistics: dict[str, Any],
         criteria: AcceptanceCriteria) -> Any:
    pipeline = Pipeline("loads", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination="bq:acme.positions.daily", reconcile=lambda job_id, ctx:
                   RemoteState.SUCCEEDED, acceptance=criteria, timeout=60)
    def load(ctx: TaskContext) -> JobStatus:
        return JobStatus(
            job_id=ctx.job_id, state=JobState.DONE, observed_at=datetime(2026, 12, 1, tzinfo=UTC),
            service="bigquery",
            errors=tuple(JobError("invalid", f"row {i}: bad date") for i in range(warnings)),
            statistics=statistics,
        )

    clock = ManualClock()
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock)
    return Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).unit("load")


def test_a_job_done_within_its_non_fatal_limit_is_accepted(tmp_path: Path) -> None:
    result = _run(tmp_path, 3, {"numDmlAffectedRows": "120"},
                  AcceptanceCriteria(min_rows=100, max_nonfatal_errors=5, max_rejected_rows=None))
    assert result.outcome == "succeeded", (result.error, result.reason)
    assert result.acceptance == ("rows >= 100: 120 (ok)", "non-fatal errors <= 5: 3 (ok)")


def test_a_job_done_over_its_non_fatal_limit_is_rejected_not_misread(tmp_path: Path) -> None:
    result = _run(tmp_path, 7, {"load": {"outputRows": "120", "badRecords": "7"}},
                  AcceptanceCriteria(max_nonfatal_errors=5, max_rejected_rows=10))
    assert result.outcome == "failed-permanent"
    assert result.error is not None and result.error.startswith("AcceptanceFailed: ")
    assert "non-fatal errors is 7, criterion is non-fatal errors <= 5" in result.error
    assert "rejected rows" not in result.error  # 7 bad records reported, within 10


@pytest.mark.parametrize("statistics", [{}, {"totalBytesProcessed": "10"}])
def test_rows_the_job_did_not_report_fail_a_row_criterion(tmp_path: Path,
                                                          statistics: dict[str, Any]) -> None:
    result = _run(tmp_path, 0, statistics, AcceptanceCriteria(min_rows=1))
    assert result.outcome == "failed-permanent"
    assert "rows was not reported" in (result.error or "")
