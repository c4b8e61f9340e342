"""A write left unsettled by another unit of the same slot is settled before the slot is judged.

Found by the simulation's long run (seed 3721 of `python -m tests.simulation.run --seeds
0-3999 --steps 2000`, invariant 6): the day's source moved, so two units of ``extract`` exist
for one day (one per input version). The current one had succeeded; the other one's attempt
then replaced the slice and its process was killed after the destination committed, before
the ledger recorded it. Its attempt stayed ``running`` and nothing ever settled it: no run
claims a unit whose inputs are no longer current. The current unit was skipped as verified
though the slice held the other unit's rows, and every dependent reading through twice was
refused (``InputsChangedError``: the slice's newest commit record is not the version the ledger
records) on every run, with no operator able to help.

The rule (docs/architecture.md, "Settlement: what proves what"): before a unit with an owned
destination is claimed, every other unit of the same slot whose latest attempt is unsettled
(``running`` or ``unknown``) and whose lease has run out is settled by the settlement rule,
from its commit record; only settled, never run again (its inputs are not current). Its
write, once recorded, is the slot's latest version, so the current unit's success no longer
stands for the slot and it runs again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.executor.helpers import ManualClock, day
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.drivers.backfill import run_backfill
from twice.engine.executor import Executor
from twice.ledger import Ledger

LEASE_TTL = 60.0


class Killed(BaseException):
    """SIGKILL of the holder (a BaseException: nothing in the engine swallows it)."""


class World:
    def __init__(self, tmp_path: Path, engine: str) -> None:
        wh = (f"sqlite:///{tmp_path / 'wh.db'}" if engine == "sqlite"
              else f"duckdb://{tmp_path / 'wh.duckdb'}")
        self.extract_spec = f"{wh}?partition_column=day#extract"
        self.version = 2
        self.delivered: list[tuple[date, int]] = []
        self.clock = ManualClock()
        self.ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=self.clock)
        self.pipeline = pipeline = Pipeline("orphans", schedule=Schedule.daily("UTC"))

        @pipeline.task(destination=self.extract_spec, write="replace", safe_repeat=True,
                       timeout=30, input_version=lambda interval: f"v{self.version}")
        def extract(ctx: TaskContext) -> pa.Table:
            return pa.table({"day": [ctx.interval.start.date()] * 2, "id": [1, 2],
                             "v": [self.version] * 2})

        @pipeline.task(depends_on=extract, timeout=30)
        def report(ctx: TaskContext) -> None:
            versions = set(ctx.read_upstream("extract").column("v").to_pylist())
            assert len(versions) == 1
            self.delivered.append((ctx.interval.start.date(), versions.pop()))

    def executor(self, holder: str, **options: Any) -> Executor:
        self.clock.advance(LEASE_TTL * 2)  # every earlier holder's lease has run out
        return Executor(self.pipeline, self.ledger, clock=self.clock, sleep=self.clock.sleep,
                        holder=holder, lease_ttl=LEASE_TTL, **options)

    def slice_versions(self) -> list[int]:
        with open_destination(self.extract_spec) as dest:
            return sorted(set(dest.read_partition(day()).column("v").to_pylist()))

    def units(self) -> dict[str, str]:
        """input version -> uow id of extract's units for the day."""
        return {unit.input_version: unit.uow_id
                for unit in self.ledger.units(task="extract")}


@contextmanager
def killed_at(point: str) -> Iterator[None]:
    """The holder is killed just before (``"before"``) or just after (``"after"``) its next
    destination write commits."""
    from twice.destinations.embedded import EmbeddedSqlDestination

    original = EmbeddedSqlDestination._transaction

    @contextmanager
    def transaction(self: Any) -> Iterator[Any]:
        with original(self) as tx:
            yield tx
            if point == "before":
                raise Killed()
        raise Killed()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EmbeddedSqlDestination, "_transaction", transaction)
        with pytest.raises(Killed):
            yield


def orphan_then_restore(world: World, point: str) -> None:
    """Unit v2 verified; the source moves to v1 and its unit's holder is killed at ``point``
    of its write (its attempt stays running); the source comes back to v2."""
    first = world.executor("h1").run(day())
    assert first.ok, first
    world.version = 1
    with killed_at(point):
        world.executor("h2").run(day(), tasks=["extract"])
    orphan = world.units()["v1"]
    assert [a.outcome for a in world.ledger.attempts(orphan)] == ["running"]
    world.version = 2


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_an_orphaned_write_of_another_unit_is_settled_and_the_slot_rewritten(
        tmp_path: Path, engine: str) -> None:
    world = World(tmp_path, engine)
    orphan_then_restore(world, "after")
    assert world.slice_versions() == [1]  # the orphan's write landed

    result = world.executor("h3").run(day())

    assert result.ok, result
    assert world.slice_versions() == [2]
    units = world.units()
    orphan = world.ledger.attempts(units["v1"])
    assert [a.outcome for a in orphan] == ["succeeded"]  # settled from its commit record
    assert [a.outcome for a in world.ledger.attempts(units["v2"])] == ["succeeded", "succeeded"]
    assert world.ledger.latest_fingerprint(world.extract_spec, day().label).uow_id == units["v2"]
    assert world.delivered == [(day().start.date(), 2)]  # report ran once, on v2
    assert world.executor("h4").run(day()).ok  # and stays settled


def test_an_orphan_that_never_committed_changes_nothing(tmp_path: Path) -> None:
    world = World(tmp_path, "sqlite")
    orphan_then_restore(world, "before")
    assert world.slice_versions() == [2]

    result = world.executor("h3").run(day())

    assert result.ok, result
    units = world.units()
    assert [a.outcome for a in world.ledger.attempts(units["v1"])] == ["failed-transient"]
    assert [a.outcome for a in world.ledger.attempts(units["v2"])] == ["succeeded"]  # not rerun
    assert world.delivered == [(day().start.date(), 2)]


def test_a_backfill_settles_the_orphan_too(tmp_path: Path) -> None:
    world = World(tmp_path, "duckdb")
    orphan_then_restore(world, "after")
    world.clock.advance(LEASE_TTL * 2)

    result = run_backfill(world.pipeline, world.ledger, [day()], deadline=None,
                          clock=world.clock, sleep=world.clock.sleep, lease_ttl=LEASE_TTL)

    assert result.ok, result
    assert world.slice_versions() == [2]
    assert [a.outcome for a in world.ledger.attempts(world.units()["v1"])] == ["succeeded"]
    assert world.delivered == [(day().start.date(), 2)]
