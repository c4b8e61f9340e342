"""The deterministic simulation of the real engine (issue 36; docs/reliability.md,
"Deterministic simulation").

A run of one seed: build the world and the pipeline from the seed, then take steps until the
step budget is spent. A step is one crash-point opportunity inside the engine, task code or a
destination (``World.point``) or one harness action: a holder runs some days, a source
changes, the clock moves, an operator resolves what twice cannot see. Holders are real
``twice.engine.executor.Executor``\\ s on real SQLite ledger files, with real SQLite and
DuckDB destinations; they act one at a time, in one thread, so a seed replays exactly. A
crashed holder is replaced by a fresh executor (a restarted process, under a new holder
name). A paused holder (a zombie) stops at a crash point while the clock passes its lease
TTL and another holder runs, then resumes. After every harness step the reference model
(``tests.simulation.model``) checks invariants 1-5; after the budget, a fault-free phase of
restarts must bring every unit twice can see to verified with no operator (invariant 6).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

from tests.simulation import faults
from tests.simulation.faults import Crash
from tests.simulation.model import Model, close_readers
from tests.simulation.pipeline import build
from tests.simulation.world import FEATURES, LEASE_TTL, World
from twice.core.interval import Interval
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger, LedgerError

T = TypeVar("T")

#: The world's features a simulation runs with unless told otherwise: all of them.
DEFAULT_FEATURES: frozenset[str] = frozenset(FEATURES)
FINAL_ROUNDS = 4
ACTIONS = (("run", 60), ("source", 8), ("clock", 10), ("operator", 6), ("restart", 2))


@dataclass
class Holder:
    """One process running the engine: its own ledger connection and executor."""

    name: str
    url: str
    second_ledger: bool = False
    incarnation: int = 0
    dead: bool = False
    ledger: Any = None
    executor: Any = None


@dataclass
class Report:
    seed: int
    steps: int
    features: frozenset[str]
    violations: list[str] = field(default_factory=list)
    failed_at_step: int | None = None
    fired: Counter[str] = field(default_factory=Counter)
    reached: Counter[str] = field(default_factory=Counter)
    escaped: list[str] = field(default_factory=list)
    runs: int = 0
    crashes: int = 0
    operator_actions: int = 0
    steps_taken: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def replay(self) -> str:
        """One line that replays this seed exactly."""
        line = f"python -m tests.simulation.run --seed {self.seed} --steps {self.steps}"
        if self.features != DEFAULT_FEATURES:
            line += f" --features {','.join(sorted(self.features)) or 'none'}"
        return line


class Simulation:
    def __init__(self, seed: int, steps: int, root: Path,
                 features: frozenset[str] = DEFAULT_FEATURES, fault_rate: float = 0.02) -> None:
        self.world = World(seed, root, features, fault_rate)
        self.steps = steps
        self.pipeline, self.dest = build(self.world)
        self.schedule = Schedule.daily("UTC")
        main = f"sqlite:///{root / 'ledger.db'}"
        self.reader = Ledger.open(main, clock=self.world.clock)
        self.holders = [Holder("h1", main), Holder("h2", main)]
        if "second_ledger" in features:
            self.holders.append(Holder("b1", f"sqlite:///{root / 'ledger-b.db'}",
                                       second_ledger=True))
        self.report = Report(seed, steps, features)
        self.model = Model(self)
        self.world.on_pause = self._pause

    def interval(self, day: date) -> Interval:
        return self.schedule.interval_for(day)

    # -- holders ------------------------------------------------------------------------------

    def _start(self, holder: Holder) -> None:
        if holder.ledger is not None:
            holder.ledger.close()
        holder.incarnation += 1
        holder.dead = False
        holder.ledger = Ledger.open(holder.url, clock=self.world.clock, retry_seconds=0)
        faults.hook_ledger(holder.ledger, self.world)
        holder.executor = Executor(
            self.pipeline, holder.ledger, clock=self.world.clock, sleep=self.world.sleep,
            rng=self.world.rng, holder=f"sim-{holder.name}-{holder.incarnation}",
            max_workers=1, lease_ttl=LEASE_TTL, isolation="thread", shared_pools=False,
            poll_interval=5.0, observe_timeout=60.0,
        )

    def _run(self, holder: Holder, days: list[date]) -> None:
        """``holder`` runs the pipeline over ``days``; a crash restarts it."""
        if holder.executor is None:
            self._start(holder)
        previous, self.world.holder = self.world.holder, holder
        self.report.runs += 1
        try:
            holder.executor.run([self.interval(d) for d in days])
        except Crash:
            self.report.crashes += 1
            holder.dead = True
        except LedgerError as exc:  # the process exits with a ledger error: restarted
            holder.dead = True
            self.report.escaped.append(f"step {self.world.steps}: {type(exc).__name__}")
        except Exception as exc:
            holder.dead = True
            self.report.escaped.append(
                f"step {self.world.steps}: {type(exc).__name__}: {str(exc)[:200]}")
        finally:
            self.world.holder = previous
        if holder.dead:
            self._start(holder)

    def _pause(self) -> None:
        """The acting holder stops (a zombie): its lease runs out, maybe the source changes,
        another holder runs; then it resumes where it stopped."""
        w = self.world
        paused = w.holder
        others = [h for h in self.holders if h is not paused and not h.second_ledger]
        if w.rng.random() < 0.5:
            w.change_source(w.rng.choice(w.days))
        w.clock.advance(LEASE_TTL * 1.5)
        self._run(w.rng.choice(others), self._days())

    def _main_owns_all(self) -> bool:
        """The second ledger runs only once the main ledger's writes have claimed every owned
        destination: a destination belongs to the first ledger that writes it, so a second
        ledger that wrote first would own it (and refusing the main ledger would be right)."""
        owned = {spec for task, spec in self.dest.items()
                 if task != "remote" or "reconcile_with_owned_write" in self.world.features}
        return len(self.world.owners) >= len(owned)

    def _days(self) -> list[date]:
        w = self.world
        return sorted(w.rng.sample(w.days, w.rng.randint(1, len(w.days))))

    # -- harness actions ----------------------------------------------------------------------

    def _operator(self) -> None:
        """An operator resolves, truthfully, notify attempts left unknown (the receiver's log
        says whether the delivery happened)."""
        from twice.ledger import RESOLVED_ATTEMPT_OUTCOME  # noqa: F401  (vocabulary check)

        w = self.world
        for unit in self.reader.units(task="notify"):
            latest = self.reader.latest_attempt(unit.uow_id)
            if latest is None or latest.outcome not in ("unknown", "running"):
                continue
            if latest.job_id is None:
                continue
            happened = w.receiver.delivered(latest.job_id)
            if not happened and "operator_resolution_failed" not in w.features:
                continue
            try:
                self.reader.record_resolution(
                    unit.uow_id, attempt=latest.number,
                    outcome="succeeded" if happened else "failed",
                    note="simulated operator, from the receiver's log", operator="sim")
            except LedgerError:
                continue  # refused (its holder may still finish): asked again later
            self.report.operator_actions += 1

    def _step(self) -> bool:
        """One harness action; True when it may have changed what is durable (a source
        change or a clock move alone changes no claim, so the model need not look)."""
        w = self.world
        names = [name for name, _ in ACTIONS]
        action = w.rng.choices(names, weights=[wt for _, wt in ACTIONS])[0]
        w.steps += 1
        if action == "run":
            ready = [h for h in self.holders if not h.second_ledger or self._main_owns_all()]
            self._run(w.rng.choice(ready), self._days())
            return True
        if action == "source":
            w.change_source(w.rng.choice(w.days))
        elif action == "clock":
            w.clock.advance(w.rng.choice([1.0, 10.0, LEASE_TTL + 1]))
        elif action == "operator":
            self._operator()
            return True
        else:
            holder = w.rng.choice(self.holders)
            holder.dead = True
            self.report.crashes += 1
            self._start(holder)
        return False

    def run(self) -> Report:
        w, report = self.world, self.report
        with faults.active(w):
            while w.steps < self.steps:
                if not self._step():
                    continue
                found = self.model.check()
                if found:
                    report.violations, report.failed_at_step = found, w.steps
                    break
            if report.ok:
                w.faults_on = False
                operators = report.operator_actions
                for _ in range(FINAL_ROUNDS):
                    w.clock.advance(LEASE_TTL * 2)
                    for holder in self.holders:
                        self._start(holder)  # every process restarted
                    self._run(self.holders[0], list(w.days))
                    found = self.model.check()
                    if found:
                        report.violations, report.failed_at_step = found, w.steps
                        break
                if report.ok:
                    report.violations = self.model.converged()
                    if report.operator_actions != operators:
                        report.violations.append("6: an operator acted in the fault-free phase")
                    if report.violations:
                        report.failed_at_step = w.steps
        for holder in self.holders:
            if holder.ledger is not None:
                holder.ledger.close()
        self.reader.close()
        close_readers()
        report.fired, report.reached, report.steps_taken = w.fired, w.reached, w.steps
        return report


def scratch_root() -> Path:
    """A fresh folder for one seed's files, in memory when /dev/shm exists."""
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    return Path(tempfile.mkdtemp(prefix="twice-sim-", dir=base))


def simulate(seed: int, steps: int, features: frozenset[str] = DEFAULT_FEATURES,
             fault_rate: float = 0.02) -> Report:
    """Run one seed in a fresh folder (removed afterwards) on a thread of its own: the engine
    then runs each unit in the calling thread (``_InThread``), so nothing runs concurrently."""
    unknown = set(features) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}")
    root = scratch_root()
    try:
        return in_thread(lambda: Simulation(seed, steps, root, features, fault_rate).run())
    finally:
        shutil.rmtree(root, ignore_errors=True)


def in_thread(fn: Callable[[], T]) -> T:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="twice-sim")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
