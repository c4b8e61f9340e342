"""Only the commit record proves an owned write; ``reconcile=`` settles only the remote job.

Reproduces issue 36, scenario 1: a task with ``write="replace"`` and a ``reconcile=`` submits a
remote job under ``ctx.job_id``, and its attempt ends unknown after the job finished but before
twice wrote the returned rows (a lost acknowledgement, or the process killed there). The
reconciler truthfully answers "succeeded" for the job. Before the fix that answer stood in for
the missing commit record: the slice was fingerprinted as it was (no rows, or the previous
rows) and recorded verified, and dependents ran on it; where the table did not exist yet the
unit was failed-permanent. Now the job is adopted by its id (not executed again) and the owned
write is done by the retry under the same job id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.executor.helpers import ManualClock, day, outcomes
from tests.settlement.services import JobService
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, RemoteState, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.engine.executor import Executor
from twice.errors import OutcomeUnknownError
from twice.ledger import Ledger

POLICY = RetryPolicy(max_attempts=3, initial_delay=0.0, jitter="none")


def expected_rows(interval_day: Any) -> list[dict[str, Any]]:
    return [{"day": interval_day, "order_id": n, "amount": 10.0 * n} for n in range(1, 5)]


def build(tmp_path: Path, service: JobService, lose_ack: set[str]) -> Pipeline:
    """``extract`` runs a remote job and returns its rows for twice to replace the day with;
    ``summary`` (a dependent) counts the rows it finds. ``lose_ack`` names the days whose
    first answer from the service is lost after the job ran."""
    pipeline = Pipeline("orders", schedule=Schedule.daily("UTC"))
    spec = f"sqlite:///{tmp_path / 'wh.db'}?partition_column=day#orders"
    seen: dict[str, int] = {}

    def reconcile(job_id: str, _ctx: TaskContext) -> RemoteState:
        return service.state(job_id)

    @pipeline.task(name="extract", destination=spec, write="replace", safe_repeat=True,
                   reconcile=reconcile, retry=POLICY, timeout=30)
    def extract(ctx: TaskContext) -> pa.Table:
        today = ctx.interval.start.date()
        rows = service.submit(ctx.job_id, expected_rows(today))
        label = ctx.interval.label
        if label in lose_ack and label not in seen:
            seen[label] = 1
            raise OutcomeUnknownError("connection reset after the job was submitted")
        return pa.Table.from_pylist(rows)

    @pipeline.task(name="summary", depends_on="extract", timeout=30)
    def summary(ctx: TaskContext) -> int:
        with open_destination(spec) as dest:
            table = dest.read_partition(ctx.interval)
        return table.num_rows

    return pipeline


def slice_rows(tmp_path: Path, offset: int) -> list[dict[str, Any]]:
    spec = f"sqlite:///{tmp_path / 'wh.db'}?partition_column=day#orders"
    with open_destination(spec) as dest:
        table = dest.read_partition(day(offset))
    return sorted(table.to_pylist(), key=lambda row: row["order_id"])


def recorded_rows(ledger: Ledger, uow_id: str) -> int | None:
    """The row count the ledger records as the unit's verified slice (None: none recorded)."""
    for record in ledger.latest_fingerprints():
        if record.uow_id == uow_id:
            return record.row_count
    return None


@pytest.mark.parametrize("table_exists", [False, True], ids=["new-table", "table-exists"])
def test_lost_acknowledgement_adopts_the_job_and_writes_the_rows(
    tmp_path: Path, table_exists: bool
) -> None:
    service = JobService()
    clock = ManualClock()
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock)
    pipeline = build(tmp_path, service, lose_ack={day(0).label})
    executor = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep)
    if table_exists:
        assert executor.run(day(-1)).ok  # an earlier day makes the table
    result = executor.run(day(0))

    extract = result.unit("extract")
    assert result.ok, [(u.task, u.outcome, u.reason) for u in result.units]
    assert extract.outcome == "succeeded"
    got = slice_rows(tmp_path, 0)
    assert [row["order_id"] for row in got] == [1, 2, 3, 4]
    assert sum(row["amount"] for row in got) == 100.0
    # the remote job ran once: the retry adopted it under the same job id
    job_ids = {a.job_id for a in ledger.attempts(extract.uow_id)}
    assert len(job_ids) == 1
    assert service.executions[job_ids.pop()] == 1
    assert outcomes(ledger, extract.uow_id) == ["failed-transient", "succeeded"]
    # the dependent read the written rows
    assert result.unit("summary").value == 4
    # the recorded version is the rows now in the slice
    assert recorded_rows(ledger, extract.uow_id) == 4


def test_a_remote_job_still_running_is_observed_not_verified(tmp_path: Path) -> None:
    """A job the reconciler says is still running leaves the attempt unknown: nothing is
    verified, nothing resubmitted."""
    service = JobService()
    clock = ManualClock()
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock)
    pipeline = build(tmp_path, service, lose_ack={day(0).label})
    running = Pipeline("orders", schedule=Schedule.daily("UTC"))
    task = pipeline.get_task("extract")
    running.task(name="extract", destination=task.destination, write="replace",
                 safe_repeat=True, reconcile=lambda job_id, ctx: RemoteState.RUNNING,
                 retry=POLICY, timeout=30)(task.fn)
    result = Executor(running, ledger, clock=clock, sleep=clock.sleep,
                      observe_timeout=2.0, poll_interval=1.0).run(day(0))
    extract = result.unit("extract")
    assert extract.outcome == "unknown-needs-reconcile"
    assert outcomes(ledger, extract.uow_id) == ["unknown"]
    assert recorded_rows(ledger, extract.uow_id) is None


CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import pyarrow as pa
    from twice.core.policy import RetryPolicy
    from twice.define.pipeline import Pipeline, RemoteState, TaskContext
    from twice.define.schedule import Schedule
    from twice.engine.executor import Executor
    from twice.ledger import Ledger
    from twice.core.interval import Interval
    from datetime import datetime, UTC

    root = Path(sys.argv[1])
    kill = sys.argv[2] == "kill"
    jobs = root / "jobs"
    jobs.mkdir(exist_ok=True)
    spec = f"sqlite:///{root / 'wh.db'}?partition_column=day#orders"
    pipeline = Pipeline("orders", schedule=Schedule.daily("UTC"))

    def reconcile(job_id, ctx):
        return RemoteState.SUCCEEDED if (jobs / job_id).exists() else RemoteState.NOT_FOUND

    @pipeline.task(name="extract", destination=spec, write="replace", safe_repeat=True,
                   reconcile=reconcile, retry=RetryPolicy(max_attempts=3, initial_delay=0.0,
                   jitter="none"), timeout=30)
    def extract(ctx: TaskContext):
        marker = jobs / ctx.job_id
        if not marker.exists():  # the job runs once per id
            with open(root / "executions", "a") as out:
                out.write(ctx.job_id + "\\n")
            marker.write_text("done")
        if kill:  # killed after the job finished, before twice writes its rows
            os.kill(os.getpid(), signal.SIGKILL)
        day = ctx.interval.start.date()
        return pa.table({"day": [day] * 3, "order_id": [1, 2, 3]})

    ledger = Ledger.open(f"sqlite:///{root / 'ledger.db'}")
    interval = Schedule.daily("UTC").interval_for(datetime(2026, 11, 30, tzinfo=UTC).date())
    result = Executor(pipeline, ledger, lease_ttl=0.5).run(interval)
    print(result.unit("extract").outcome)
    sys.exit(0 if result.ok else 1)
""")


def test_killed_after_the_remote_job_then_restarted(tmp_path: Path) -> None:
    """SIGKILL after the job ran and before twice wrote its rows; the restart adopts the job
    (one execution) and writes the rows: exit 0, no operator."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.run([sys.executable, str(script), str(tmp_path), "kill"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    import time

    time.sleep(0.6)  # past the killed holder's lease
    second = subprocess.run([sys.executable, str(script), str(tmp_path), "run"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.strip() == "succeeded"
    executions = (tmp_path / "executions").read_text().split()
    assert len(executions) == 1
    spec = f"sqlite:///{tmp_path / 'wh.db'}?partition_column=day#orders"
    with open_destination(spec) as dest:
        table = dest.read_partition(day(0))
    assert sorted(table.column("order_id").to_pylist()) == [1, 2, 3]
    # the killed attempt's write never committed: not written (never "failed permanently",
    # never verified from the reconciler's answer)
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    (unit,) = ledger.units()
    assert outcomes(ledger, unit.uow_id) == ["failed-transient", "succeeded"]
    assert "failed-permanent" not in [o.state for o in ledger.observations(unit.uow_id)]
