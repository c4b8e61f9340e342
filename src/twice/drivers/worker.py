"""A worker process: one of many ``twice`` processes sharing one ledger (PostgreSQL across hosts).

Every worker is given the same pipeline, intervals and tasks. It walks the units of work (each
interval in order, tasks in dependency order) and runs one unit at a time through the
``Executor``, which takes the unit's lease first; so however many workers run, a unit runs in
one of them at a time, and a succeeded unit is never run again. The worker never decides on
its own: it only chooses which unit to hand to the executor next, from what the ledger says.

Per unit, on each pass:

- latest attempt succeeded (here or elsewhere): settled, nothing to do;
- a dependency (among the selected tasks, same interval) not settled yet: revisit later; a
  dependency that did not succeed: the unit is ``blocked`` (the executor records why);
- leased by another live holder: revisit later (its lease expires if that holder dies, and
  the executor that takes it over finds the attempt recorded ``unknown`` and reconciles it);
- latest attempt ended without success in ANOTHER holder at or after ``since`` (default: when
  this worker started): settled, "ended elsewhere". Each run of a unit gets a fresh attempt
  budget, so without this rule a unit failing in one worker would be retried by each of the
  others in turn; a worker started later (a new run, after a fix) does run it again;
- otherwise the executor runs it (its result is the worker's result for that unit).

Choosing without serialising (issue 38): the state of the units ahead (their latest attempt,
lease and slot's writer) is read for several of them in one consistent read
(``Ledger.claim_states``): ``READ_AHEAD_FIRST`` at the start of a pass and after each unit this
worker runs (it runs the next one, mostly: reading more would be read again after the run),
twice as many at each read after that, up to ``READ_AHEAD``, so a worker walking past units
others hold or finished costs no round trip per unit. Before handing a unit to the
executor a worker takes its claim intent (``Ledger.claim_intents``, PostgreSQL): a unit another
worker is claiming at that instant is skipped for the next one instead of waited for (its
claiming transaction holds the unit's rows until it commits), and looked at again on the next
pass, when the executor decides even if the intent is still held (a stopped claimer must not
keep its unit from a takeover). Two workers that went for the same unit were walking the list
in step: the one that lost leaves up to ``SPREAD`` free units after it to others (chosen at
random; they are looked at again on the next pass), so the fleet spreads over the list instead
of colliding on each next unit. The lease, taken in the executor's claiming transaction, still
decides who runs a unit; ``lease_conflicts`` counts the claims another worker won.

Passes repeat until every unit is settled, unless ``once`` (one pass) or ``max_units`` (that
many executor runs) stops it earlier. After a pass that settled nothing (what is left is leased
elsewhere or waits on a dependency), the next starts after ``CLAIM_WAIT``, doubling while
nothing changes up to ``poll`` (``idle_wait``): a unit another worker runs is mostly settled
within a unit's time, so the fleet's last units are seen settled soon after they are, instead
of up to a whole ``poll`` later, and a long one is still looked at only every ``poll``. After a
pass whose only obstacle was a claim in flight the wait is ``CLAIM_WAIT``. On PostgreSQL a wait
also ends as soon as another worker gives a unit back (``ClaimIntents.wait_for_change``), so a
fleet's idle workers see its last units settled at once and exit.
Pools are held in the ledger (``shared_pools``), so their capacity binds all workers together.

Stopping: ``request_stop`` (SIGTERM/SIGINT under ``stop_on_signals``) lets the running attempt
finish and be recorded, interrupts a backoff wait or a reconcile poll instead of starting
another attempt, releases the lease, and starts nothing new. Units left are reported.

Tasks run one unit per executor call, so ``ctx.upstream`` is empty: in a worker, tasks pass
data through their destinations (as they must across machines), not return values.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from twice.core.interval import Interval
from twice.core.outcomes import Settlement
from twice.core.unit import UnitOfWork
from twice.define.schedule import refuse_open_intervals
from twice.engine.evidence import iso
from twice.engine.executor import Executor, UnitResult, overwritten_by
from twice.errors import TwiceError
from twice.ledger.claims import ClaimIntents, ClaimState
from twice.ledger.lease import in_force
from twice.ledger.lease_holders import process_holder

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline, Task
    from twice.ledger import AttemptRecord, Ledger

StopReason = Literal["finished", "once", "max-units", "signal"]

log = logging.getLogger("twice.worker")
log.addHandler(logging.NullHandler())  # silent unless the program configured logging


def default_worker_name() -> str:
    """``host:pid``: unique per live process, readable in the ledger and in ``twice explain``
    (and, on this host, judged gone once the process is: ``twice.ledger.lease_holders``)."""
    return process_holder()


class WorkerStopped(TwiceError):
    """Raised inside the executor's waits once a stop was requested: start nothing more."""


@dataclass(frozen=True)
class WorkerUnit:
    """What became of one unit of work as far as this worker is concerned.

    ``settlement``: ``ran`` (the executor ran it here; ``result`` says how it went),
    ``done-elsewhere`` (the ledger shows it succeeded, ``by`` whom), ``ended-elsewhere``
    (another holder's run of it ended without success since this worker started) or ``left``
    (still open when the worker stopped: leased elsewhere, waiting on a dependency, stopped).
    """

    task: str
    interval: Interval
    settlement: Settlement
    reason: str
    uow_id: str | None = None
    by: str | None = None
    outcome: str | None = None
    result: UnitResult | None = None

    @property
    def ok(self) -> bool:
        """Only what this worker ran counts against it; a ``ran`` unit must have succeeded."""
        return self.settlement != "ran" or (self.result is not None and self.result.ok)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "interval": self.interval.label,
            "uow_id": self.uow_id,
            "settlement": self.settlement,
            "outcome": self.outcome,
            "by": self.by,
            "reason": self.reason,
            "result": None if self.result is None else self.result.to_dict(),
        }


@dataclass(frozen=True)
class WorkerReport:
    """Everything one worker process did, in the order units were settled."""

    pipeline: str
    worker: str
    units: tuple[WorkerUnit, ...]
    stopped: StopReason
    passes: int
    started_at: datetime
    finished_at: datetime
    notes: tuple[str, ...] = ()
    #: claims that found another worker first: its claim intent held (the unit skipped for
    #: another, not waited for) or, in the executor, its lease
    lease_conflicts: int = 0

    @property
    def ran(self) -> tuple[WorkerUnit, ...]:
        return tuple(unit for unit in self.units if unit.settlement == "ran")

    @property
    def ok(self) -> bool:
        """Every unit this worker ran succeeded and it was not stopped with work in hand."""
        return all(unit.ok for unit in self.units) and self.stopped != "signal"

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for unit in self.units:
            key = unit.settlement if unit.settlement != "ran" else f"ran:{unit.outcome}"
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "worker": self.worker,
            "ok": self.ok,
            "stopped": self.stopped,
            "passes": self.passes,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "counts": self.counts(),
            "units": [unit.to_dict() for unit in self.units],
            "notes": list(self.notes),
            "lease_conflicts": self.lease_conflicts,
            # Truthfulness: what this worker established.
            "jobsExecuted": any(u.result is not None and u.result.attempts for u in self.units),
            "outputsVerified": False,
            "idempotencyProven": False,
        }


class _Run:
    """The verdict "hand this unit to the executor now"."""


class _Go:
    """The verdict "its dependencies let it run: read its state"."""


RUN = _Run()
GO = _Go()

#: How many open units ahead a worker reads the state of at once: ``READ_AHEAD_FIRST`` at the
#: start of a pass and after each unit it runs, twice the last number at each read with no run
#: between, at most ``READ_AHEAD``.
READ_AHEAD_FIRST = 2
READ_AHEAD = 32
#: After losing a unit to another worker's claim, a worker leaves up to this many free units
#: after it (chosen at random) to others and claims the next one: workers that went for the
#: same unit were walking the list in step, and would collide again on each next unit.
SPREAD = 8
#: The wait before the next pass when a unit was skipped only because another worker was
#: claiming it (a claim takes one ledger transaction), and the first wait after a pass that
#: settled nothing (``idle_wait``).
CLAIM_WAIT = 0.05
#: How often a wait for another worker's news looks at a stop request.
STOP_CHECK = 0.1


def idle_wait(idle_passes: int, poll: float) -> float:
    """The wait after the ``idle_passes``-th pass in a row that settled nothing (from 1):
    ``CLAIM_WAIT`` doubled each time, at most ``poll``."""
    return min(poll, CLAIM_WAIT * 2.0 ** min(idle_passes - 1, 32))


@dataclass
class _Open:
    task: str
    interval: Interval
    uow_id: str | None = None
    why: str = "not looked at yet"
    #: skipped once because another worker held its claim intent (``twice.ledger.claims``)
    claimed_elsewhere: bool = False


class Worker:
    """Runs the units of ``intervals`` x ``tasks`` that no other worker is running (see module).

    ``name`` is the lease holder (default ``host:pid``); two live processes must never share a
    name, since a lease held by a name is held by every process using it. ``lease_ttl`` is how
    long a dead worker's unit stays blocked (live workers renew every third of it);
    ``pool_ttl`` the same for pool slots. ``executor_options`` go to the ``Executor``.
    Intervals that have not ended are refused (``OpenIntervalError``) unless ``allow_open``.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        ledger: Ledger,
        intervals: Interval | Iterable[Interval],
        *,
        tasks: Sequence[str] | str | None = None,
        name: str | None = None,
        lease_ttl: float = 60.0,
        pool_ttl: float = 60.0,
        poll: float = 1.0,
        once: bool = False,
        max_units: int | None = None,
        since: datetime | None = None,
        allow_open: bool = False,
        **executor_options: Any,
    ) -> None:
        if not poll > 0:
            raise ValueError(f"poll must be > 0 seconds, got {poll!r}")
        if not lease_ttl > 0:
            raise ValueError(f"lease_ttl must be > 0 seconds, got {lease_ttl!r}")
        if max_units is not None and (
            isinstance(max_units, bool) or not isinstance(max_units, int) or max_units < 1
        ):
            raise ValueError(f"max_units must be an integer >= 1, got {max_units!r}")
        if since is not None and since.tzinfo is None:
            raise ValueError("since must be timezone-aware")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError("name must be a non-empty string")
        self.pipeline = pipeline
        self.ledger = ledger
        spans = [intervals] if isinstance(intervals, Interval) else list(intervals)
        if not spans:
            raise ValueError("no intervals to work on")
        self.intervals = [pipeline.schedule.canonical(span) for span in spans]
        plan = pipeline
        if tasks is not None:
            names = [tasks] if isinstance(tasks, str) else list(tasks)
            plan = pipeline.subset(names, with_dependents=False)
        self.order = plan.topological_order()
        self.selected = frozenset(self.order)
        self.name = name or default_worker_name()
        self.poll = poll
        self.once = once
        self.max_units = max_units
        self.since = since
        self._stop = threading.Event()
        self.conflicts = 0  # see WorkerReport.lease_conflicts
        self._spread = random.Random()
        self._stop_why: str | None = None
        self.executor = Executor(
            pipeline, ledger, holder=self.name, lease_ttl=lease_ttl, pool_ttl=pool_ttl,
            shared_pools=True, max_workers=1, sleep=self._sleep, allow_open=allow_open,
            **executor_options,
        )
        # Refused here, before any unit is looked at (the executor would refuse each run).
        refuse_open_intervals(self.intervals, self.executor.now(), allow_open=allow_open)

    # -- stopping -----------------------------------------------------------------------------

    def request_stop(self, why: str = "stop requested") -> None:
        """Finish the attempt in hand, then start nothing more (safe from a signal handler)."""
        if self._stop_why is None:
            self._stop_why = why
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @contextlib.contextmanager
    def stop_on_signals(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)
                        ) -> Iterator[None]:
        """First signal: graceful stop; a second one of the same kind acts as the default."""
        previous: dict[int, Any] = {}

        def handler(signum: int, _frame: FrameType | None) -> None:
            if self.stopping:
                signal.signal(signum, previous.get(signum, signal.SIG_DFL))
                signal.raise_signal(signum)
                return
            log.warning("received %s: stopping after the attempts in flight",
                        signal.Signals(signum).name, extra={"worker": self.name})
            self.request_stop(f"received {signal.Signals(signum).name}")

        for signum in signals:
            previous[signum] = signal.signal(signum, handler)
        try:
            yield
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)

    def _idle(self, intents: ClaimIntents, seconds: float) -> bool:
        """Wait ``seconds`` before the next pass, or less: until another worker gives a unit
        back (``ClaimIntents.wait_for_change``; where it cannot tell, the whole wait) or a
        stop is requested. True: stopping."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            told = intents.wait_for_change(min(left, STOP_CHECK))
            if told is None:
                return self._stop.wait(left)
            if told:
                return False
        return True

    def _sleep(self, seconds: float) -> None:
        """The executor's waits (backoff, reconcile polls) end early when stopping."""
        if self._stop.wait(seconds):
            raise WorkerStopped(self._stop_why or "stop requested")

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> WorkerReport:
        """Pass over the open units until all are settled or a stop condition (see module)."""
        intents = self.ledger.claim_intents()
        try:
            return self._passes(intents)
        finally:
            intents.close()

    def _passes(self, intents: ClaimIntents) -> WorkerReport:
        started = self.ledger.now()
        since = self.since or started
        open_units = [_Open(task, interval) for interval in self.intervals for task in self.order]
        settled: dict[tuple[str, Interval], WorkerUnit] = {}
        done: list[WorkerUnit] = []
        notes: list[str] = []
        runs = passes = idle = 0  # idle: passes in a row that settled nothing
        stopped: StopReason = "finished"
        log.info("worker started: %d unit(s) to settle", len(open_units),
                 extra={"worker": self.name, "pipeline": self.pipeline.name})
        while open_units:
            passes += 1
            intents.forget_changes()  # this pass reads the units as they are now
            progressed = False
            claimed_elsewhere = False  # a unit skipped: another worker was claiming it
            spread = 0  # free units still to leave to others after a conflict (see SPREAD)
            ahead: dict[tuple[str, Interval], tuple[UnitOfWork, ClaimState]] = {}
            reading = READ_AHEAD_FIRST  # how many the next read ahead takes
            pending = list(open_units)
            for position, item in enumerate(pending):
                if self.stopping:
                    break
                if self.max_units is not None and runs >= self.max_units:
                    break
                unit: WorkerUnit | _Run | _Go | None = self._ready(item, settled)
                if unit is GO:
                    if (item.task, item.interval) not in ahead:
                        ahead = self._read_ahead(pending, position, settled, reading)
                        reading = min(2 * reading, READ_AHEAD)
                    seen = ahead.get((item.task, item.interval))
                    unit = RUN if seen is None else self._judge(item, *seen, since)
                if unit is None:
                    item.claimed_elsewhere = False  # a claim seen through: intents count anew
                    continue  # wait: leased elsewhere or a dependency is still open
                if unit is RUN:
                    if spread and not item.claimed_elsewhere:
                        spread -= 1
                        claimed_elsewhere = True  # work is left: no poll wait
                        item.why = "left to another worker, to spread after a conflict"
                        continue
                    if item.uow_id is not None and not intents.take(item.uow_id):
                        self.conflicts += 1
                        if not item.claimed_elsewhere:
                            # someone is claiming it this instant: another unit first; on a
                            # later pass the executor decides (a stopped claimer's intent
                            # must not keep its unit from being taken over)
                            item.claimed_elsewhere = claimed_elsewhere = True
                            item.why = "another worker was claiming it"
                            # the two were walking the same way: one of them jumps ahead
                            spread = 0 if self.once else self._spread.randrange(SPREAD)
                            continue
                    runs += 1
                    if item.uow_id is None:
                        intents.flush()  # no intent to take: end the last one before the run
                    try:
                        unit = self._run(item)
                    finally:
                        if item.uow_id is not None:  # ended with the next take (or wait)
                            intents.give_back_later(item.uow_id)
                    ahead = {}  # read afresh: others moved on while this unit ran
                    reading = READ_AHEAD_FIRST
                    if unit is None:  # another holder took the lease first: revisit
                        self.conflicts += 1
                        continue
                assert isinstance(unit, WorkerUnit)
                open_units.remove(item)
                settled[(item.task, item.interval)] = unit
                done.append(unit)
                progressed = True
            if not open_units:
                break
            if self.stopping:
                stopped = "signal"
                notes.append(f"stopped: {self._stop_why}; nothing new was started")
                break
            if self.max_units is not None and runs >= self.max_units:
                stopped = "max-units"
                notes.append(f"stopped after {runs} unit run(s) (--max-units {self.max_units})")
                break
            if self.once:
                stopped = "once"
                notes.append("one pass only (--once): open units are left for other workers")
                break
            if not progressed:
                log.debug("pass %d: %d unit(s) open, leased elsewhere or waiting; next pass in "
                          "%s s", passes, len(open_units), self.poll,
                          extra={"worker": self.name, "pipeline": self.pipeline.name})
            # A unit being claimed elsewhere is settled (or leased) within a transaction's
            # time: look again at once rather than a whole poll later; others' running units
            # within about a unit's time (see idle_wait).
            idle = 0 if progressed else idle + 1
            wait = min(self.poll, CLAIM_WAIT) if claimed_elsewhere else idle_wait(idle, self.poll)
            if not progressed and self._idle(intents, wait):
                continue  # the stop is handled at the top of the next pass
        for item in open_units:
            done.append(WorkerUnit(item.task, item.interval, "left", item.why, uow_id=item.uow_id))
        if stopped == "finished" and self.stopping:
            stopped = "signal"
        log.info("worker stopped (%s) after %d pass(es): %d unit(s) settled here or elsewhere, "
                 "%d left", stopped, passes, len(done) - len(open_units), len(open_units),
                 extra={"worker": self.name, "pipeline": self.pipeline.name})
        return WorkerReport(
            self.pipeline.name, self.name, tuple(done), stopped, passes, started,
            self.ledger.now(), tuple(notes), lease_conflicts=self.conflicts,
        )

    def _ready(
        self, item: _Open, settled: Mapping[tuple[str, Interval], WorkerUnit]
    ) -> _Run | _Go | None:
        """Whether ``item``'s dependencies (among the selected tasks) let it be looked at
        (``GO``); ``RUN`` when one did not succeed (the executor records it blocked, with the
        reason); None while one is still open (why in ``item.why``)."""
        task = self.pipeline.get_task(item.task)
        for dep in task.depends_on:
            if dep not in self.selected:
                continue  # outside the selection: the executor checks the ledger for it
            other = settled.get((dep, item.interval))
            if other is None:
                item.why = f"waiting for dependency {dep} ({item.interval.label})"
                return None
            if not _succeeded(other):
                return RUN
        return GO

    def _read_ahead(
        self, pending: Sequence[_Open], position: int,
        settled: Mapping[tuple[str, Interval], WorkerUnit], count: int,
    ) -> dict[tuple[str, Interval], tuple[UnitOfWork, ClaimState]]:
        """The units of the next ``count`` open items from ``position`` whose dependencies
        let them be looked at, each identified afresh (its input version covers its upstream's
        current output), with their ledger state read in one consistent read: one read per
        unit this worker runs, not one per unit it walks past."""
        found: dict[tuple[str, Interval], UnitOfWork] = {}
        for item in pending[position:]:
            if len(found) >= count:
                break
            key = (item.task, item.interval)
            if key in settled or self._ready(item, settled) is not GO:
                continue
            try:
                found[key] = self.executor.unit_for(item.task, item.interval)
            except Exception:
                continue  # the executor reports why the unit cannot be identified
        tasks = {key: self.pipeline.get_task(key[0]) for key in found}
        slots = {unit.uow_id: (tasks[key].destination, unit.interval.label)
                 for key, unit in found.items() if tasks[key].owns_output}
        states = self.ledger.claim_states([unit.uow_id for unit in found.values()], slots)
        return {key: (unit, states[unit.uow_id]) for key, unit in found.items()}

    def _judge(self, item: _Open, unit: UnitOfWork, state: ClaimState,
               since: datetime) -> WorkerUnit | _Run | None:
        """Settle ``item`` from its unit's ledger state, or say to run it (``RUN``) or to wait
        (None, why in ``item.why``). The attempt and the lease were read in one transaction:
        they are settled in one (the success and the lease's release), so reading them apart
        could see the attempt still running and the lease already free, and run a unit that
        is done."""
        item.uow_id = unit.uow_id
        if not state.recorded:
            return RUN  # never recorded: nobody has touched it yet
        latest, lease = state.latest, state.lease
        task = self.pipeline.get_task(item.task)
        if latest is not None and latest.outcome == "succeeded" and not _overwritten(
            self.ledger, task, unit, state
        ):
            return _done_elsewhere(item, latest)
        now = self.ledger.now()
        if lease is not None and in_force(lease, now) and lease.holder != self.name:
            item.why = f"leased by {lease.holder} until {iso(lease.expires_at)}"
            return None
        if (
            latest is not None and latest.holder != self.name and latest.finished_at is not None
            and latest.finished_at >= since and latest.outcome != "running"
        ):
            return WorkerUnit(
                item.task, item.interval, "ended-elsewhere",
                f"attempt {latest.number} by {latest.holder} ended {latest.outcome} at "
                f"{iso(latest.finished_at)}, after this worker started: that run decided; "
                "not run again here (a worker started later is a new run)",
                uow_id=item.uow_id, by=latest.holder, outcome=latest.outcome,
            )
        return RUN

    def _run(self, item: _Open) -> WorkerUnit | None:
        """Hand one unit to the executor; None if another holder got its lease first."""
        try:
            result = self.executor.run(item.interval, [item.task]).units[0]
        except WorkerStopped as exc:
            latest = None if item.uow_id is None else self.ledger.latest_attempt(item.uow_id)
            seen = "no attempt" if latest is None else (
                f"attempt {latest.number} recorded {latest.outcome}"
            )
            return WorkerUnit(
                item.task, item.interval, "left",
                f"stopped ({exc}) while waiting to retry or reconcile: {seen}; lease released",
                uow_id=item.uow_id, outcome=None if latest is None else latest.outcome,
            )
        if result.outcome == "leased-elsewhere":
            item.why = result.reason
            return None
        if result.skipped and result.uow_id is not None and item.uow_id == result.uow_id:
            # it succeeded before the executor took the lease: this worker ran nothing
            latest = self.ledger.latest_attempt(result.uow_id)
            if latest is not None and latest.outcome == "succeeded":
                return _done_elsewhere(item, latest)
        return WorkerUnit(
            item.task, item.interval, "ran", result.reason, uow_id=result.uow_id,
            by=self.name, outcome=result.outcome, result=result,
        )


def _done_elsewhere(item: _Open, latest: AttemptRecord) -> WorkerUnit:
    return WorkerUnit(
        item.task, item.interval, "done-elsewhere",
        f"attempt {latest.number} by {latest.holder} succeeded; not run again",
        uow_id=item.uow_id, by=latest.holder, outcome="succeeded",
    )


def _overwritten(ledger: Ledger, task: Task, unit: UnitOfWork, state: ClaimState) -> bool:
    """``overwritten_by``, from the slot's writer read with the unit's state when it was."""
    if not state.slot_read:
        return overwritten_by(ledger, task, unit) is not None
    return state.slot_writer not in (None, unit.uow_id)


def _succeeded(unit: WorkerUnit) -> bool:
    return unit.outcome == "succeeded"
