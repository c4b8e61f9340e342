"""An unknown outcome settled from a commit record that a later write has since replaced.

A unit's attempt commits its slice, then the ledger never hears of it (killed, or the ledger
failed). Its source is corrected: a new unit of work rewrites the slice. The correction is
reverted: the first unit is the one to run again, and its unknown attempt is reconciled from
its commit record. That record proves the attempt succeeded, but its rows are gone: the slice
holds the corrected unit's output. The unit must run again (found by the adversarial race
probe: the slice was left holding the reverted-away data, reported verified)."""

from __future__ import annotations

import sqlite3
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger

BEFORE, DAY = Schedule.daily("UTC").intervals(date(2026, 10, 31), date(2026, 11, 2))


def _pipeline(root: Path, calls: list[str]) -> Pipeline:
    pipeline = Pipeline("revert", schedule=Schedule.daily("UTC"))
    source = root / "source.txt"

    @pipeline.task(destination=f"sqlite:///{root}/wh.db?partition_column=day#value",
                   write="replace", safe_repeat=True,
                   input_version=lambda interval: source.read_text())
    def value(ctx: TaskContext) -> pa.Table:
        price = int(source.read_text())
        calls.append(str(price))
        return pa.table({"day": [ctx.interval.start.date()], "value": [2 * price]})

    return pipeline


def _values(root: Path) -> list[int]:
    with sqlite3.connect(root / "wh.db") as conn:
        return [row[0] for row in conn.execute("SELECT value FROM value")]


@pytest.mark.parametrize("first_lease", ["run-out", "still-held"])
def test_a_commit_record_replaced_since_does_not_settle_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_lease: str
) -> None:
    """``run-out``: the corrected unit's claim settles the first unit first (another unit of
    the slot, its lease run out: ``twice.engine.siblings``), from its commit record, before the
    correction replaces its rows; the revert then finds the slot written by the corrected unit
    and runs the first unit again. ``still-held``: the first unit's lease has not run out when
    the correction runs, so it is left to its holder; the revert settles it itself, from a
    commit record replaced since."""
    from tests.executor.helpers import ManualClock

    calls: list[str] = []
    pipeline = _pipeline(tmp_path, calls)
    (tmp_path / "source.txt").write_text("100")
    real = Ledger.finish_attempt
    clock = ManualClock()

    def lost(self: Ledger, *args: object, **kwargs: object) -> object:
        from sqlalchemy.exc import OperationalError

        raise OperationalError("UPDATE twice_attempts", {}, Exception("disk I/O error"))

    def executor(**options: object) -> Executor:
        return Executor(pipeline, ledger, clock=clock, sleep=clock.sleep, **options)

    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock) as ledger:
        # 1. source 100: the slice is written, the ledger never records how the attempt ended
        monkeypatch.setattr(Ledger, "finish_attempt", lost)
        kept = Ledger.release_lease  # nor gives its lease back, as a process killed there
        monkeypatch.setattr(Ledger, "release_lease", lambda self, *args: False)
        first = executor(lease_ttl=60).run(DAY)
        monkeypatch.setattr(Ledger, "finish_attempt", real)
        monkeypatch.setattr(Ledger, "release_lease", kept)
        assert first.units[0].outcome == "unknown-needs-reconcile"
        assert _values(tmp_path) == [200]
        if first_lease == "run-out":
            clock.advance(61)
        # 2. the source is corrected: a new unit of work rewrites the slice
        (tmp_path / "source.txt").write_text("200")
        second = executor().run(DAY)
        assert second.ok, second.units
        assert _values(tmp_path) == [400]
        settled_first = "settled succeeded" in " ".join(second.units[0].notes)
        assert settled_first == (first_lease == "run-out"), second.units[0].notes
        clock.advance(61)
        # 3. the correction is reverted: the first unit again
        (tmp_path / "source.txt").write_text("100")
        third = executor().run(DAY)
        assert third.ok, third.units
        assert _values(tmp_path) == [200]  # not the reverted-away 400
        assert calls == ["100", "200", "100"]
        unit = third.units[0]
        said = " ".join(unit.notes)
        assert ("the slot now holds the output of unit" in said if settled_first
                else "rewrote the slice" in said), unit.notes
        outcomes = [a.outcome for a in ledger.attempts(unit.uow_id or "")]
        assert outcomes == ["succeeded", "succeeded"]  # the first did commit; then a rerun
        # 4. and nothing more: the slice is this unit's output, verified
        assert executor().run(DAY).units[0].skipped
        assert _values(tmp_path) == [200] and len(calls) == 3


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", "parquet", "delta", "iceberg"])
def test_reconcile_seals_the_slice_before_it_concludes_nothing_committed(
    tmp_path: Path, engine: str
) -> None:
    """An attempt whose outcome is unknown and whose commit record is absent may belong to a
    process that is only paused (SIGSTOP past its lease) or to a timed-out thread still
    running: it could commit right after reconcile concludes "never committed". Reconcile
    seals the slice first, so that write is refused and the conclusion holds (found by the
    adversarial race probe: the paused writer's rows landed after the takeover, the ledger
    saying they never would)."""
    from twice import OutcomeUnknownError
    from twice.destinations import open_destination
    from twice.destinations.commits import FencedWriteError

    spec = {
        "sqlite": f"sqlite:///{tmp_path}/wh.db?partition_column=day#events",
        "duckdb": f"duckdb:///{tmp_path}/wh.duckdb?partition_column=day#events",
        "parquet": f"parquet:///{tmp_path}/events?partition_column=day",
        "delta": f"delta:///{tmp_path}/events?partition_column=day",
        "iceberg": f"iceberg:///{tmp_path}/warehouse?partition_column=day#ns.events",
    }[engine]
    pipeline = Pipeline("sealed", schedule=Schedule.daily("UTC"))
    stamps: list[object] = []

    @pipeline.task(destination=spec, write="replace", safe_repeat=True)
    def events(ctx: TaskContext) -> pa.Table:
        if not stamps and ctx.interval == DAY:
            stamps.append(ctx.stamp)  # what the paused attempt would write with
            raise OutcomeUnknownError("no answer (injected): did it write?")
        return pa.table({"day": [ctx.interval.start.date()], "writer": ["retry"]})

    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        # the day before is written first: a table format needs its table to seal it
        assert Executor(pipeline, ledger).run(BEFORE).ok
        first = Executor(pipeline, ledger).run(DAY)
        second = Executor(pipeline, ledger).run(DAY)
        assert (second.ok or first.ok), (first.units, second.units)
        unit = (second if second.ok else first).units[0]
        errors = ledger.errors(unit.uow_id or "")
        assert any("sealed against it" in e.message for e in errors), errors
    paused = pa.table({"day": [DAY.start.date()], "writer": ["paused"]})
    with open_destination(spec) as dest:
        with pytest.raises(FencedWriteError):
            dest.replace_partition(paused, DAY, stamp=stamps[0])
        assert dest.read_partition(DAY).column("writer").to_pylist() == ["retry"]


def test_a_task_with_reconcile_is_asked_and_its_slice_sealed(tmp_path: Path) -> None:
    """Only twice writes an owned slice (issue 36: a reconciler's answer is about the remote
    job, never about the write): before concluding that the unknown attempt wrote nothing,
    the executor seals the slice against it, asks the task's reconcile about the job, and
    the retry writes the rows. (Before, a task with ``reconcile=`` was not sealed, on the
    theory that its remote job might write the owned slice itself.)"""
    from twice import OutcomeUnknownError, RemoteState
    from twice.destinations import open_destination

    spec = f"sqlite:///{tmp_path}/wh.db?partition_column=day#events"
    pipeline = Pipeline("asked", schedule=Schedule.daily("UTC"))
    asked: list[str] = []

    def look(job_id: str, ctx: TaskContext) -> RemoteState:
        asked.append(job_id)
        return RemoteState.NOT_FOUND

    @pipeline.task(destination=spec, write="replace", safe_repeat=True, reconcile=look)
    def events(ctx: TaskContext) -> pa.Table:
        if ctx.interval == DAY and not asked:
            raise OutcomeUnknownError("no answer (injected)")
        return pa.table({"day": [ctx.interval.start.date()], "writer": ["retry"]})

    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        assert Executor(pipeline, ledger).run(BEFORE).ok
        Executor(pipeline, ledger).run(DAY)  # one attempt a run: settled, not retried here
        assert Executor(pipeline, ledger).run(DAY).ok
    assert asked  # the task's reconcile was asked
    with open_destination(spec) as dest:
        modes = [record.mode for record in dest.commit_records()]
        assert "fence" in modes and modes[-1] == "replace"
        assert dest.read_partition(DAY).column("writer").to_pylist() == ["retry"]
