"""A unit whose slot another unit overwrote runs again under its OWN generation.

Found by the simulation (seed 48 of `python -m tests.simulation.run --seeds 0-49 --steps
2000`, invariant 2): the day's source moved v2 -> v1 -> v2. Unit v2 had succeeded (its remote
job ran), unit v1 then wrote the slot, and when the source came back to v2, unit v2's output
was gone, so it ran again, under a new job generation: its remote job ran a second time for
the same inputs. Nothing asked for a new job: the job for these inputs already ran, and the
retry under the same job id adopts it and writes its rows back. A deliberate rerun (--force,
a backfill's stale success) still takes a new generation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.executor.helpers import ManualClock, day
from tests.settlement.services import JobService
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.engine.executor import Executor
from twice.ledger import Ledger


def test_a_restored_source_adopts_the_units_own_job(tmp_path: Path) -> None:
    service = JobService()
    source = {"version": 2}
    spec = f"sqlite:///{tmp_path / 'wh.db'}?partition_column=day#prices"
    pipeline = Pipeline("prices", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=spec, write="replace", safe_repeat=True, timeout=30,
                   input_version=lambda interval: f"v{source['version']}",
                   reconcile=lambda job_id, ctx: service.state(job_id))
    def prices(ctx: TaskContext) -> pa.Table:
        v = source["version"]
        rows = service.submit(ctx.job_id, [{"day": ctx.interval.start.date(), "v": v}])
        return pa.Table.from_pylist(rows)

    clock = ManualClock()
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock)

    def run() -> Any:
        clock.advance(60)
        return Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).unit(
            "prices")

    v2 = run()
    source["version"] = 1
    assert run().outcome == "succeeded"  # unit v1 writes the slot
    source["version"] = 2
    again = run()
    assert again.uow_id == v2.uow_id and again.outcome == "succeeded", again.reason
    with open_destination(spec) as dest:
        assert dest.read_partition(day()).column("v").to_pylist() == [2]
    attempts = ledger.attempts(v2.uow_id)
    assert len(attempts) == 2
    assert {a.job_id for a in attempts} == {attempts[0].job_id}  # its own job, adopted
    assert service.executions[attempts[0].job_id] == 1
    assert sum(service.executions.values()) == 2  # one job for v2, one for v1


def test_a_forced_rerun_still_takes_a_new_generation(tmp_path: Path) -> None:
    service = JobService()
    spec = f"sqlite:///{tmp_path / 'wh.db'}?partition_column=day#prices"
    pipeline = Pipeline("prices", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=spec, write="replace", safe_repeat=True, timeout=30)
    def prices(ctx: TaskContext) -> pa.Table:
        rows = service.submit(ctx.job_id, [{"day": ctx.interval.start.date(), "v": 1}])
        return pa.Table.from_pylist(rows)

    clock = ManualClock()
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock)
    first = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day()).unit("prices")
    clock.advance(60)
    forced = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep,
                      force=["prices"]).run(day()).unit("prices")
    assert forced.outcome == "succeeded"
    assert [a.generation for a in ledger.attempts(first.uow_id)] == [1, 2]
    assert len(service.executions) == 2
