"""A worker reports what it did: a unit the executor found already done under the lease (a
success committed, with its lease's release, between the worker's look and its claim) is
``done-elsewhere``, never ``ran``. Two workers racing on one PostgreSQL ledger hit exactly that
window (``test_worker_fleet``); here it is made deterministic."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers.worker import Worker, _Open
from twice.engine.executor import Executor
from twice.ledger import Ledger


def test_a_unit_done_before_the_claim_is_done_elsewhere(tmp_path: Path) -> None:
    pipeline = Pipeline("settle", schedule=Schedule.daily("UTC"))
    calls: list[str] = []

    @pipeline.task
    def extract(ctx: TaskContext) -> None:
        calls.append(ctx.interval.label)

    day = pipeline.schedule.interval_for(date(2026, 11, 1))
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        other = Executor(pipeline, ledger, holder="other")
        assert other.run(day).ok
        worker = Worker(pipeline, ledger, [day], name="late")
        item = _Open("extract", day, other.unit_for("extract", day).uow_id)
        unit = worker._run(item)  # as if its look had seen the attempt still running
        assert unit is not None
        assert (unit.settlement, unit.by, unit.outcome) == ("done-elsewhere", "other",
                                                             "succeeded")
        assert calls == [day.label]
        report = worker.run()  # and a full pass agrees
        assert [u.settlement for u in report.units] == ["done-elsewhere"]
    assert calls == [day.label]
