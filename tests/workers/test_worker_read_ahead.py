"""How much of the list ahead a worker reads (issue 38): the units it will run next and the
units it walks past. A worker that runs unit after unit reads the state of the next few
units only (reading 32 after every run spent most of a worker's bookkeeping on units it then
read again), and one walking past units settled elsewhere reads them in batches that grow,
so a long settled stretch still costs few reads. Either way every unit is settled once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from itertools import pairwise
from pathlib import Path

from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers import worker as worker_module
from twice.drivers.worker import Worker
from twice.ledger import Ledger

FIRST = date(2025, 11, 1)


def _pipeline(executions: list[str]) -> Pipeline:
    pipeline = Pipeline("ahead", schedule=Schedule.daily("UTC"))

    @pipeline.task(safe_repeat=True)
    def extract(ctx: TaskContext) -> None:
        executions.append(ctx.interval.label)

    return pipeline


def _days(pipeline: Pipeline, count: int) -> list:  # type: ignore[type-arg]
    return [pipeline.schedule.interval_for(FIRST + timedelta(days=n)) for n in range(count)]


@contextmanager
def _reads(ledger: Ledger) -> Iterator[list[int]]:
    """The number of units each ``claim_states`` call of ``ledger`` read, in order."""
    sizes: list[int] = []
    real = ledger.claim_states

    def counted(uow_ids, slots=None):  # type: ignore[no-untyped-def]
        sizes.append(len(uow_ids))
        return real(uow_ids, slots)

    ledger.claim_states = counted  # type: ignore[method-assign]
    try:
        yield sizes
    finally:
        del ledger.claim_states


def test_a_worker_running_unit_after_unit_reads_only_the_next_few(tmp_path: Path) -> None:
    executions: list[str] = []
    pipeline = _pipeline(executions)
    days = _days(pipeline, 40)
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger, _reads(ledger) as sizes:
        result = Worker(pipeline, ledger, days, poll=0.01).run()
    assert result.ok and sorted(executions) == sorted(day.label for day in days)
    # one read per unit run, each of the next unit and at most one more
    assert len(sizes) == len(days)
    assert sum(sizes) <= 2 * len(days), sizes


def test_a_worker_walking_past_units_settled_elsewhere_reads_them_in_growing_batches(
        tmp_path: Path) -> None:
    executions: list[str] = []
    pipeline = _pipeline(executions)
    days = _days(pipeline, 70)
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        assert Worker(pipeline, ledger, days, name="first", poll=0.01).run().ok
        assert len(executions) == len(days)
        with _reads(ledger) as sizes:
            later = Worker(pipeline, ledger, days, name="later", poll=0.01).run()
    assert later.ok and len(executions) == len(days)  # nothing ran again
    limit = worker_module.READ_AHEAD
    assert sizes[0] == worker_module.READ_AHEAD_FIRST
    # each read twice the one before, up to the limit, until every unit was seen
    assert all(b == min(2 * a, limit) for a, b in pairwise(sizes[:-1]))
    assert sum(sizes) == len(days) and max(sizes) == limit
