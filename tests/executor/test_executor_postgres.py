"""End to end on a shared PostgreSQL ledger: retries, a lost acknowledgement, a ledger pool."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tests.executor.helpers import ManualClock, day, outcomes
from tests.executor.helpers import planner_decisions as planner

from twice.cli import cli
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.remote import reconcile_job, run_job
from twice.testing.fake_bigquery import FakeBigQuery

pytestmark = pytest.mark.postgres


def test_pipeline_on_postgres(postgres_url: str) -> None:
    clock = ManualClock()
    bq = FakeBigQuery(clock=clock)
    bq.lose_acknowledgements(arrive_after=0.5)
    policy = RetryPolicy(max_attempts=3, initial_delay=1.0, jitter="none",
                         transient=(ConnectionError,))
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    pipeline.pool("positions_db", slots=2)
    extract_calls: list[int] = []

    @pipeline.task(retry=policy, safe_repeat=True, timeout=5, pool="positions_db", slots=2)
    def extract(ctx):  # type: ignore[no-untyped-def]
        extract_calls.append(ctx.attempt)
        if len(extract_calls) == 1:
            raise ConnectionError("positions db reset the connection")
        return 5

    @pipeline.task(depends_on=[extract], retry=policy, safe_repeat=True, timeout=5,
                   reconcile=lambda job_id, ctx: reconcile_job(bq, job_id))
    def load(ctx):  # type: ignore[no-untyped-def]
        return run_job(bq, ctx.job_id, {"rows": ctx.upstream["extract"]}, poll_interval=0.01)

    with Ledger.open(postgres_url, clock=clock) as ledger:
        assert ledger.dialect == "postgresql"
        result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep,
                          pool_poll_interval=0.01).run(day())
        assert result.ok, result.to_dict()
        extract_unit, load_unit = result.unit("extract"), result.unit("load")
        assert outcomes(ledger, extract_unit.uow_id) == ["failed-transient", "succeeded"]
        assert outcomes(ledger, load_unit.uow_id) == ["failed-transient", "succeeded"]
        assert len(bq.jobs) == 1 and "409 duplicate" in bq.answers("submit")
        holdings = ledger.pool_holdings("positions_db", active_only=False)
        assert [h.slots for h in holdings] == [2, 2]  # one holding per extract attempt
        assert all(h.released_at is not None for h in holdings)
        assert ledger.lease(load_unit.uow_id).released_at is not None  # type: ignore[union-attr]

    rows = planner(postgres_url, clock())
    assert {task: row["decision"] for task, row in rows.items()} == {
        "extract": "validate-output", "load": "validate-output"
    }
    status = CliRunner().invoke(cli, ["status", "--ledger", postgres_url, "--json",
                                      "--as-of", clock().isoformat()])
    assert status.exit_code == 0, status.output
    units = {row["task"]: row for row in json.loads(status.stdout)["units"]}
    assert units["load"]["job_id"] == load_unit.job_id and units["load"]["attempt"] == 2
    assert "***" in json.loads(status.stdout)["ledger"]  # the password is masked
