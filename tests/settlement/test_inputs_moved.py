"""An upstream rewritten while a dependent's attempt runs never repeats the dependent's effect.

Found by the long simulation run (seeds 1296, 1367, 1505, 1519, 1557 of `python -m
tests.simulation.run --seeds 1000-1562 --steps 2000`, invariants 1-3): a dependent's unit is
keyed by its upstream's recorded output version when it is identified, but the task reads the
upstream's slice while its attempt runs. A second holder rewrote the upstream in between (here
the source moves v1 -> v2 while the first holder's attempt is inside the task): the dependent
read v2 under the unit keyed by v1, and the unit keyed by v2 then did the same again. An
``append`` landed the day's v2 row twice; a remote job for v2 ran twice.

The rule (docs/architecture.md, "Inputs as read"): the versions a unit was identified on are
pinned for its attempt. Every owned write of the attempt is admitted only while each
upstream's newest commit record still holds the pinned version, and ``ctx.read_upstream``
returns an upstream's slice only when it is the pinned version. Otherwise nothing lands or is
returned (``InputsChangedError``) and the unit is superseded by the one keyed by what the
upstream holds now.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from tests.executor.helpers import ManualClock, day
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.engine.executor import Executor
from twice.ledger import Ledger


def _warehouse(tmp_path: Path, engine: str) -> str:
    return (f"sqlite:///{tmp_path / 'wh.db'}" if engine == "sqlite"
            else f"duckdb://{tmp_path / 'wh.duckdb'}")


class World:
    """A source with a version, a receiver of deliveries, and a second holder that rewrites
    the upstream once, at the moment the first holder's task calls ``meanwhile()``."""

    def __init__(self, tmp_path: Path, engine: str) -> None:
        self.version = 1
        self.delivered: list[tuple[str, int]] = []
        self.clock = ManualClock()
        self.url = f"sqlite:///{tmp_path / 'ledger.db'}"
        wh = _warehouse(tmp_path, engine)
        self.extract_spec = f"{wh}?partition_column=day#extract"
        self.audit_spec = f"{wh}?partition_column=day#audit"
        self.pipeline = Pipeline("moving", schedule=Schedule.daily("UTC"))
        self.rewrite: Callable[[], None] | None = None

    def meanwhile(self) -> None:
        """Another holder rewrites the upstream for a new source version (once)."""
        rewrite, self.rewrite = self.rewrite, None
        if rewrite is not None:
            rewrite()

    def executor(self, ledger: Ledger, holder: str) -> Executor:
        return Executor(self.pipeline, ledger, clock=self.clock, sleep=self.clock.sleep,
                        holder=holder, isolation="thread")

    def arm(self) -> None:
        def rewrite() -> None:
            self.version += 1
            other = Ledger.open(self.url, clock=self.clock)
            try:
                result = self.executor(other, "h2").run(day(), tasks=["extract"])
                assert result.unit("extract").outcome == "succeeded"
            finally:
                other.close()

        self.rewrite = rewrite


def _build(world: World, *, audit_reads: str) -> None:
    pipeline = world.pipeline

    @pipeline.task(destination=world.extract_spec, write="replace", safe_repeat=True,
                   input_version=lambda interval: f"v{world.version}")
    def extract(ctx: TaskContext) -> pa.Table:
        return pa.table({"day": [ctx.interval.start.date()], "v": [world.version]})

    @pipeline.task(depends_on=extract, destination=world.audit_spec, write="append",
                   safe_repeat=True)
    def audit(ctx: TaskContext) -> pa.Table:
        world.meanwhile()
        if audit_reads == "itself":
            with open_destination(world.extract_spec) as source:
                upstream = source.read_partition(ctx.interval)
        else:
            upstream = ctx.read_upstream("extract")
        return pa.table({"day": [ctx.interval.start.date()],
                         "v": upstream.column("v").to_pylist()})

    @pipeline.task(depends_on=extract)
    def notify(ctx: TaskContext) -> None:
        world.meanwhile()
        upstream = ctx.read_upstream("extract")
        for v in upstream.column("v").to_pylist():
            world.delivered.append((str(ctx.interval.start.date()), v))


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
@pytest.mark.parametrize("audit_reads", ["itself", "through twice"])
def test_an_upstream_rewritten_during_the_attempt_lands_once(
    tmp_path: Path, engine: str, audit_reads: str
) -> None:
    world = World(tmp_path, engine)
    _build(world, audit_reads=audit_reads)
    ledger = Ledger.open(world.url, clock=world.clock)
    first = world.executor(ledger, "h1").run(day(), tasks=["extract"])
    assert first.unit("extract").outcome == "succeeded"

    world.arm()  # h2 rewrites extract (v2) while h1's audit is inside its task
    run = world.executor(ledger, "h1").run(day(), tasks=["audit"])
    assert world.rewrite is None, "the rewrite happened"
    audit = run.unit("audit")
    assert audit.outcome == "succeeded", audit.reason
    world.clock.advance(60)
    again = world.executor(ledger, "h1").run(day())  # the unit keyed by v2, if any, runs now
    assert again.unit("audit").outcome == "succeeded", again.unit("audit").reason

    with open_destination(world.audit_spec) as dest:
        landed = dest.read_partition(day()).column("v").to_pylist()
    assert landed == [2], f"the day's v2 audit row landed {landed.count(2)} times: {landed}"
    _assert_superseded_in_the_same_run(ledger, "audit", audit.uow_id)


def _assert_superseded_in_the_same_run(ledger: Ledger, task: str, current: str) -> None:
    """The unit keyed by v1 read or landed nothing (one failed-transient attempt, its error an
    InputsChangedError); the unit keyed by v2 ran in the same run and is the one reported."""
    units = {u.uow_id: ledger.attempts(u.uow_id) for u in ledger.units(task=task)}
    assert len(units) == 2 and current in units
    (old,) = [uow for uow in units if uow != current]
    assert [a.outcome for a in units[old]] == ["failed-transient"]
    assert [e.error_class for e in ledger.errors(old)] == ["twice.errors.InputsChangedError"]
    assert any(o.state == "superseded" for o in ledger.observations(old))
    assert [a.outcome for a in units[current]] == ["succeeded"]


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_an_effect_that_reads_through_twice_acts_once_per_upstream_version(
    tmp_path: Path, engine: str
) -> None:
    world = World(tmp_path, engine)
    _build(world, audit_reads="through twice")
    ledger = Ledger.open(world.url, clock=world.clock)
    assert world.executor(ledger, "h1").run(day(), tasks=["extract"]).ok

    world.arm()
    run = world.executor(ledger, "h1").run(day(), tasks=["notify"])
    assert world.rewrite is None
    assert run.unit("notify").outcome == "succeeded", run.unit("notify").reason
    world.clock.advance(60)
    assert world.executor(ledger, "h1").run(day()).ok
    assert world.delivered == [(str(day().start.date()), 2)]
    _assert_superseded_in_the_same_run(ledger, "notify", run.unit("notify").uow_id)


def test_read_upstream_names_what_it_cannot_read(tmp_path: Path) -> None:
    world = World(tmp_path, "sqlite")
    _build(world, audit_reads="through twice")
    ctx = world.pipeline.context("audit", day())
    from twice.errors import InputError

    with pytest.raises(InputError, match="'notify' is not an upstream of task 'audit'"):
        ctx.read_upstream("notify")
    with pytest.raises(InputError, match="task 'audit' is not running under twice's executor"):
        ctx.read_upstream("extract")
