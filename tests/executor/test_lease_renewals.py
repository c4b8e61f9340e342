"""A unit's lease is renewed while its attempt runs longer than the lease's ttl, for every
unit an executor runs at once (one renewing thread serves them all), and never after the run
gave it back."""

from __future__ import annotations

import threading
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger

TTL = 0.6  # seconds; each attempt below runs for three of them
DAY = date(2024, 3, 1)


def slow_pipeline(started: threading.Barrier | None = None) -> Pipeline:
    pipeline = Pipeline("renewals", schedule=Schedule.daily("UTC"))
    for name in ("a", "b", "c"):
        def run(ctx: TaskContext, _name: str = name) -> None:
            """Outlives its lease's ttl three times over."""
            if started is not None:
                started.wait(timeout=10)
            time.sleep(3 * TTL)

        run.__name__ = name
        pipeline.task(safe_repeat=True)(run)
    return pipeline


def interval(pipeline: Pipeline) -> Any:
    return pipeline.schedule.intervals(DAY, DAY + timedelta(days=1))[0]


def test_every_running_unit_keeps_its_lease(tmp_path: Path) -> None:
    """Three units run at once, each for 3 ttl: another holder finds all three leased while
    they run, and each ran exactly once."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    started = threading.Barrier(4)
    pipeline = slow_pipeline(started)
    span = interval(pipeline)
    with Ledger.open(url) as ledger:
        runner = Executor(pipeline, ledger, holder="runner", lease_ttl=TTL, max_workers=3)
        outcome: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: outcome.setdefault("run", runner.run(span)))
        thread.start()
        started.wait(timeout=10)
        time.sleep(2 * TTL)  # past the first lease's expiry: only renewals keep it
        rival = Executor(pipeline, ledger, holder="rival", lease_ttl=TTL, max_workers=3)
        during = rival.run(span)
        thread.join(timeout=30)
        units = {unit.task: unit for unit in outcome["run"].units}
        attempts = {name: ledger.attempts(units[name].uow_id) for name in units}
    assert sorted(unit.outcome for unit in during.units) == ["leased-elsewhere"] * 3, during
    assert all(unit.ok for unit in units.values()), units
    assert {name: [a.holder for a in found] for name, found in attempts.items()} == {
        "a": ["runner"], "b": ["runner"], "c": ["runner"]}


def test_no_renewal_after_the_run_gave_the_lease_back(tmp_path: Path) -> None:
    """The success gives the lease back in its finishing transaction, and nothing renews it
    after: the lease stays released and no renewal is even attempted."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    pipeline = slow_pipeline()
    span = interval(pipeline)
    calls: list[datetime] = []  # when each renewal was asked for, on the ledger's clock
    with Ledger.open(url) as ledger:
        renew = ledger.renew_lease

        def counted(uow_id: str, *args: Any, **kwargs: Any) -> Any:
            calls.append(ledger.now())
            return renew(uow_id, *args, **kwargs)

        ledger.renew_lease = counted  # type: ignore[method-assign]
        result = Executor(pipeline, ledger, holder="runner", lease_ttl=TTL,
                          max_workers=3).run(span, ["a"])
        uow_id = result.units[0].uow_id
        assert uow_id is not None
        released = ledger.lease(uow_id)
        time.sleep(2 * TTL)  # several renewal periods
        later = ledger.lease(uow_id)
    assert result.ok
    assert released is not None and released.released_at is not None
    assert len(calls) >= 2  # 3 ttl long, renewed every ttl / 3
    assert max(calls) < released.released_at, (calls, released)
    assert later == released
