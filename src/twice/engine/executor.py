"""The engine: ONE lifecycle for every unit of work, whichever driver chose it.

``twice run``, ``twice worker``, ``twice backfill`` and the Airflow runner only choose which
(task, interval) units run and when; this module owns the rest, the same way on every path (the
protocol is described once, in docs/architecture.md, "One lifecycle for every unit of work"):
identify the unit (its input version covers its upstream outputs, ``identify_unit``), claim its
lease (with a fencing token), hold it if it is an already-succeeded task not ``safe_repeat``,
plan each attempt with the lab planner on ledger evidence, run the attempt under its write stamp
(owned writes commit a commit record with their rows), verify (acceptance, then the slice's
fingerprint recorded) before recording success, settle unknown outcomes (commit record first,
then the task's ``reconcile`` by the attempt's own job id, else the operator), and emit typed
events (``twice.engine.events``).

Scheduling. For each interval (in the order given) the tasks run in dependency order;
independent tasks run concurrently on a thread pool of ``max_workers``, but only as far as their
pools allow (a 2-slot task in a 2-slot pool keeps every light task of that pool waiting) and one
attempt at a time per embedded destination file. A task whose dependency did not succeed is not
run (``blocked``, with the reason).

The decide/attempt loop of one unit: build evidence FROM THE LEDGER and ask the planner before
each attempt: ``retry-eligible``/``wait-backoff`` (then wait the policy delay with jitter),
``deadline-infeasible`` (not started, recorded), ``attempts-exhausted``, ``reconcile-effects``
(repeat not asserted safe), ``repair-cause`` (permanent error) or ``reconcile-remote`` (unknown
outcome). The job generation is reused until it is confirmed failed, so a resubmission finds the
existing job ("duplicate"); a deliberate rerun takes a new one, so the job really runs again.

Budgets are per run: each run of a unit may make ``max_attempts`` attempts and its backoff
restarts, while attempt numbers keep growing in the ledger. A unit whose latest attempt
succeeded is not run again unless the driver names it in ``reruns={uow_id: attempt}`` (a success
recorded after that attempt, by another process, is kept, so racing reruns execute it once). A
crashed holder leaves an attempt ``running`` and a lease that expires: whoever takes the lease
over finds the attempt recorded ``unknown`` and settles it before anything else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import Executor as FuturesExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from twice.core import resolution
from twice.core.backoff import jittered_delay
from twice.core.decision import Decision, DecisionResult
from twice.core.interval import Interval
from twice.core.outcomes import (
    STOPPING_DECISIONS,
    ErrorClassification,
    RemoteState,
    UnitOutcome,
    attempt_outcome,
)
from twice.core.secrets import redact
from twice.core.timescale import format_duration, micros_to_instant
from twice.core.unit import UnitOfWork
from twice.define.pipeline import NonFatal, Pipeline, Task, TaskContext
from twice.define.schedule import refuse_open_intervals
from twice.destinations.commits import CommitRecord, WriteStamp
from twice.engine import snapshots
from twice.engine.attempt import AttemptReport, Isolation, call_attempt, classify
from twice.engine.events import (
    AttemptFinished,
    AttemptStarted,
    Event,
    Listener,
    OutputRejected,
    OutputVerified,
    Reconciled,
    UnitSettled,
)
from twice.engine.evidence import (
    EXECUTOR_SOURCE,
    RUN_STARTED,
    PlanSettings,
    UnitEvidence,
    gather_evidence,
    iso,
    plan_unit,
)
from twice.engine.pool import (
    LedgerLease,
    LedgerPool,
    Pool,
    PoolHeldByJob,
    PoolLease,
    PoolTimeout,
    SlotPool,
)
from twice.engine.reconcile import ReconcileReport, reconcile_attempt
from twice.engine.settle import Commit, Known, Proof, Settlement, Verdict, settle
from twice.engine.timeouts import Deadline, WorkflowTimeout, outliving, still_running
from twice.engine.verification import (
    AcceptanceFailed,
    MeasuredPartition,
    PartitionDiff,
    SchemaChangeError,
    measure_partition,
    record_measured,
)
from twice.errors import Interrupted, OutcomeUnknownError
from twice.ledger.errors import LedgerCommitUnknownError, LedgerError
from twice.ledger.lease_holders import new_holder, running_elsewhere
from twice.remote.jobs import JobFailed, JobStatus

if TYPE_CHECKING:
    from twice.ledger import (
        AttemptRecord,
        FingerprintRecord,
        JobGenerationRecord,
        LeaseResult,
        Ledger,
        ResolutionRecord,
        UnitRecord,
    )
    from twice.ledger.records import DecisionName

Clock = Callable[[], datetime]
Sleep = Callable[[float], None]
T = TypeVar("T")


def attempts_of_run(recorded: Sequence[AttemptRecord], before: AttemptRecord | None
                    ) -> list[AttemptRecord]:
    """The attempts in ``recorded`` that a run started or settled, given the unit's latest
    attempt ``before`` it: those after it, and ``before`` itself when its outcome was open
    (unknown or running: the run resolved it, or left it)."""
    first = 1 if before is None else before.number + 1
    if before is not None and before.outcome in ("unknown", "running"):
        first = before.number
    return [attempt for attempt in recorded if attempt.number >= first]


@dataclass(frozen=True)
class AttemptHistory:
    """A unit's attempts around one run, as the run itself read them: the latest when it
    claimed the unit (``before``), and every one when it left it (``recorded``), so a driver
    describes the run without reading the ledger again."""

    before: AttemptRecord | None
    recorded: tuple[AttemptRecord, ...]

    def ours(self) -> list[AttemptRecord]:
        return attempts_of_run(self.recorded, self.before)


@dataclass(frozen=True)
class UnitResult:
    """What happened to one unit of work in this run, and what the planner says now.

    ``attempts`` counts attempts started in this run, ``total_attempts`` all recorded ones.
    ``next_decision`` is the planner's decision over the ledger when the run left the unit.
    ``skipped``: it had already succeeded in an earlier run and was not run again.
    ``history``: the attempts around this run (None when it never claimed the unit, or the
    ledger failed under it). ``ledger_failed``: the ledger failed while twice drove it, so what
    this run did to it is not all recorded (its attempt counts are unknown).
    """

    task: str
    interval: Interval
    outcome: UnitOutcome
    reason: str
    uow_id: str | None = None
    attempts: int = 0
    total_attempts: int = 0
    job_id: str | None = None
    generation: int | None = None
    next_decision: str | None = None
    error: str | None = None
    holder: str | None = None
    lease_expires_at: datetime | None = None
    notes: tuple[str, ...] = ()
    acceptance: tuple[str, ...] = ()
    nonfatal: int = 0
    skipped: bool = False
    ledger_failed: bool = False
    value: Any = field(default=None, compare=False, repr=False)
    history: AttemptHistory | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.outcome == "succeeded"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "interval": self.interval.label,
            "uow_id": self.uow_id,
            "outcome": self.outcome,
            "reason": self.reason,
            "attempts": self.attempts,
            "total_attempts": self.total_attempts,
            "job_id": self.job_id,
            "generation": self.generation,
            "next_decision": self.next_decision,
            "error": self.error,
            "holder": self.holder,
            "lease_expires_at": iso(self.lease_expires_at),
            "notes": list(self.notes),
            "acceptance": list(self.acceptance),
            "nonfatal": self.nonfatal,
            "skipped": self.skipped,
            "ledger_failed": self.ledger_failed,
        }


@dataclass(frozen=True)
class RunResult:
    """Every unit of one ``Executor.run``; ``ok`` only if all of them succeeded."""

    pipeline: str
    holder: str
    units: tuple[UnitResult, ...]
    started_at: datetime
    finished_at: datetime

    @property
    def ok(self) -> bool:
        return all(unit.ok for unit in self.units)

    def unit(self, task: str, interval: Interval | None = None) -> UnitResult:
        """The result of ``task`` (for ``interval``; the only one if omitted)."""
        found = [u for u in self.units if u.task == task and interval in (None, u.interval)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} results for task {task!r} (interval {interval})")
        return found[0]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for unit in self.units:
            counts[unit.outcome] = counts.get(unit.outcome, 0) + 1
        return dict(sorted(counts.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "holder": self.holder,
            "ok": self.ok,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "counts": self.counts(),
            "units": [unit.to_dict() for unit in self.units],
            # Truthfulness: what this run did and did not establish.
            "jobsExecuted": any(unit.attempts for unit in self.units),
            "outputsVerified": False,
            "idempotencyProven": False,
        }


def unsettled(ledger: Ledger, uow_id: str) -> str | None:
    """What the unit's latest attempt is short of success ("no attempt", "latest attempt
    failed-permanent"), or None when it succeeded: how a dependency outside the run, or an
    upstream still due, is judged."""
    latest = ledger.latest_attempt(uow_id)
    if latest is not None and latest.outcome == "succeeded":
        return None
    return "no attempt" if latest is None else f"latest attempt {latest.outcome}"


def earlier_success(ledger: Ledger, unit: UnitOfWork
                    ) -> tuple[UnitRecord, AttemptRecord] | None:
    """Another unit of ``unit``'s task and interval (an older input or transform version)
    whose latest attempt succeeded, with that attempt; None if there is none. A task that is
    not ``safe_repeat`` is held on it before its new unit's first attempt."""
    label = unit.interval.label
    for other in ledger.units(pipeline=unit.pipeline, task=unit.task,
                              starting=unit.interval.start):
        if other.uow_id == unit.uow_id or other.interval.label != label:
            continue
        latest = ledger.latest_attempt(other.uow_id)
        if latest is not None and latest.outcome == "succeeded":
            return other, latest
    return None


def latest_attempt_before(attempts: Sequence[AttemptRecord], began: datetime | None
                          ) -> AttemptRecord | None:
    """The latest of ``attempts`` (in number order) started at or before ``began`` (all of
    them when None): what a deliberate rerun repeats, so a success another process recorded
    after the rerun was decided stands (``twice run --force`` and a backfill's ``reruns``)."""
    before = [a for a in attempts if began is None or a.started_at <= began]
    return before[-1] if before else None


def default_holder() -> str:
    """A holder id unique across hosts, processes and executors (``lease_holders``)."""
    return new_holder()


class _Renewals:
    """Renews the leases of the units an executor is running, each every ``ttl / 3`` seconds,
    on one thread started while there are leases to renew (a thread started per unit cost
    more than the unit's whole bookkeeping). Renewals run one at a time; ``stop`` returns once
    none of the keeper's is running, and none starts after it."""

    #: How long the thread waits for a lease to renew before it ends (a new one starts then).
    IDLE_SECONDS = 5.0

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._due: dict[_LeaseKeeper, float] = {}  # keeper -> time.monotonic() of its renewal
        self._renewing: _LeaseKeeper | None = None
        self._thread: threading.Thread | None = None
        self._wakes_at = 0.0  # when the thread looks at ``_due`` again

    def start(self, keeper: _LeaseKeeper) -> None:
        with self._changed:
            due = self._due[keeper] = time.monotonic() + keeper.period
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="twice-leases")
                self._thread.start()
            elif due < self._wakes_at:  # otherwise the thread finds it when it wakes anyway
                self._changed.notify_all()

    def renewing(self, keeper: _LeaseKeeper) -> bool:
        with self._changed:
            return keeper in self._due

    def stop(self, keeper: _LeaseKeeper) -> None:
        with self._changed:
            self._due.pop(keeper, None)
            while self._renewing is keeper and threading.current_thread() is not self._thread:
                self._changed.wait()

    def _run(self) -> None:
        try:
            while self._renew_next():
                pass
        finally:  # idle, or ended by surprise: the next start() starts a new thread
            with self._changed:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _renew_next(self) -> bool:
        """Wait for the next renewal that is due and run it; False when idle (decided under
        the lock, so a ``start`` after it sees the thread gone)."""
        with self._changed:
            keeper = self._next()
            if keeper is None:
                self._thread = None
                return False
            self._due[keeper] = time.monotonic() + keeper.period
            self._renewing = keeper
        try:
            keeper.renew()
        finally:
            with self._changed:
                self._renewing = None
                if keeper.lost:
                    self._due.pop(keeper, None)
                self._changed.notify_all()
        return True

    def _next(self) -> _LeaseKeeper | None:
        """The keeper whose renewal is due, once it is (the lock held); None after waiting
        ``IDLE_SECONDS`` with nothing to renew."""
        while True:
            now = time.monotonic()
            if not self._due:
                self._wakes_at = now + self.IDLE_SECONDS
                self._changed.wait(self.IDLE_SECONDS)
                if not self._due:
                    return None
                continue
            keeper, at = min(self._due.items(), key=lambda item: item[1])
            if at <= now:
                return keeper
            self._wakes_at = at
            self._changed.wait(at - now)


class _LeaseKeeper:
    """Keeps a unit's lease while it runs (attempts can outlive it): renewed every ``ttl / 3``
    seconds by the executor's ``_Renewals``."""

    def __init__(self, ledger: Ledger, uow_id: str, holder: str, ttl: float,
                 renewals: _Renewals, expires_at: datetime | None = None) -> None:
        self._ledger, self._uow_id, self._holder, self._ttl = ledger, uow_id, holder, ttl
        self._renewals = renewals
        self.period = ttl / 3
        self.lost = False
        self.released = False  # given back by the run itself (see stop_renewing)
        self.expires_at = expires_at  # of the last lease we know we hold

    def __enter__(self) -> _LeaseKeeper:
        self._renewals.start(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop_renewing()
        if self.released:
            return
        with contextlib.suppress(Exception):  # releasing is a courtesy; expiry also frees it
            self._ledger.release_lease(self._uow_id, self._holder)

    def resume_renewing(self) -> None:
        """Renew again after ``stop_renewing`` when the lease was not given back after all."""
        if self.released or self.lost or self._renewals.renewing(self):
            return
        self._renewals.start(self)

    def stop_renewing(self) -> None:
        """No renewal after this returns: the run is about to give the lease back itself (in
        the transaction that finishes its attempt, then setting ``released``)."""
        self._renewals.stop(self)

    def renew(self) -> None:
        """One renewal (by ``_Renewals``); a failed call is tried again a period later."""
        try:
            renewed = self._ledger.renew_lease(self._uow_id, self._holder, self._ttl)
        except Exception:
            return
        if not renewed.acquired:
            self.lost = True
            return
        self.expires_at = renewed.expires_at

    def expired(self, now: datetime) -> bool:
        """Whether we may no longer hold the lease: a renewal failed, or the last lease we
        know of has run out (a process paused past it has not renewed yet)."""
        return self.lost or (self.expires_at is not None and now >= self.expires_at)


class _InThread(FuturesExecutor):
    """A pool of one that runs each submitted call at once, in the calling thread; its
    future is already done (see ``Executor._run_interval``)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed on by future.result(), as a pool's would be
            future.set_exception(exc)
        return future


class FileWriters:
    """One writer at a time per embedded destination file (SQLite, DuckDB, Parquet), on every
    path: embedded engines take one writer per file, so attempts of one process queue for the
    file instead of failing with lock or catalog conflicts. Server engines need no lock here."""

    EMBEDDED = ("sqlite", "duckdb", "parquet")

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}

    def holding(self, spec: str) -> AbstractContextManager[object]:
        lock = self._lock(spec)
        return contextlib.nullcontext() if lock is None else lock

    def held_if_free(self, spec: str) -> contextlib.ExitStack | None:
        """The file's writer taken without waiting (held until the stack closes), or None
        when another attempt holds it now."""
        held = contextlib.ExitStack()
        lock = self._lock(spec)
        if lock is not None:
            if not lock.acquire(blocking=False):
                return None
            held.callback(lock.release)
        return held

    def _lock(self, spec: str) -> Any:
        scheme = spec.partition(":")[0].lower()
        if not spec or scheme not in self.EMBEDDED:
            return None
        key = spec.split("?", 1)[0].split("#", 1)[0]
        with self._guard:
            return self._locks.setdefault(key, threading.RLock())


class Executor:
    """Runs a pipeline's units of work against a ledger (see the module docstring).

    ``clock`` returns the aware "now" for planning (default: the ledger's clock; an injected
    clock must not run ahead of the ledger's, which refuses evidence from the future).
    ``sleep`` waits backoff and reconcile polls (inject a fake in tests); ``rng`` draws the
    jitter. ``shared_pools`` (default True) holds pool slots in the ledger as well as in
    process, so every process using the same ledger shares the capacity (SQLite on one host,
    PostgreSQL across hosts); False keeps pools local to this executor.

    For a caller that owns the retry loop (``twice.drivers.airflow``): ``attempts_per_call`` stops a
    unit after that many attempts in one ``run`` call, recording the planner's next step (it is
    the result's ``next_decision``); ``continue_run`` continues the unit's latest run instead of
    opening a new one, so the budget, backoff and safe-repeat rules span the caller's tries.

    Which units run is the driver's choice: ``reruns`` names stale successes to run again (a
    new job generation each), ``force`` names tasks whose successes recorded before ``run``
    began run again (``twice run --force``; same rule), ``repeat`` names tasks that are not
    ``safe_repeat`` whose successes the operator wants executed again anyway (otherwise they
    are ``held``), and
    ``accept_schema_change`` lets a verified output change its destination's schema. How a
    unit runs is the engine's, the same for every driver; ``listeners`` receive its typed
    events (``twice.engine.events``). An interval that has not ended by ``clock`` is refused
    (``OpenIntervalError``, nothing recorded) unless ``allow_open``; then its run-started
    observation says so (``open_interval``) and the result carries a note.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        ledger: Ledger,
        *,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
        holder: str | None = None,
        max_workers: int = 4,
        lease_ttl: float = 300.0,
        isolation: Isolation = "thread",
        shared_pools: bool = True,
        pool_ttl: float = 60.0,
        pool_poll_interval: float = 0.05,
        poll_interval: float = 1.0,
        observe_timeout: float = 60.0,
        max_observation_age: float = 600.0,
        params: Mapping[str, Any] | None = None,
        attempts_per_call: int | None = None,
        continue_run: bool = False,
        reruns: Mapping[str, int] | None = None,
        repeat: Iterable[str] = (),
        force: Iterable[str] = (),
        accept_schema_change: bool = False,
        listeners: Iterable[Listener] = (),
        refresh_snapshots: bool = False,
        snapshot_root: str | None = None,
        allow_open: bool = False,
    ) -> None:
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be an integer >= 1, got {max_workers!r}")
        for name, value in (("lease_ttl", lease_ttl), ("poll_interval", poll_interval),
                            ("observe_timeout", observe_timeout),
                            ("max_observation_age", max_observation_age)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
        if isolation not in ("thread", "process"):
            raise ValueError(f"isolation must be 'thread' or 'process', got {isolation!r}")
        if isolation == "process" and pipeline.source_file is None:
            raise ValueError("isolation='process' needs a pipeline loaded with load_pipeline")
        self.pipeline = pipeline
        self.ledger = ledger
        self.holder = holder or default_holder()
        self._clock: Clock = clock or ledger.now
        self._injected_clock = clock is not None
        self._sleep: Sleep = sleep or time.sleep
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self.max_workers = max_workers
        self.lease_ttl = lease_ttl
        self._renewals = _Renewals()
        self.isolation: Isolation = isolation
        self.shared_pools = shared_pools
        self.pool_ttl = pool_ttl
        self.pool_poll_interval = pool_poll_interval
        self.poll_interval = poll_interval
        self.observe_timeout = observe_timeout
        self.max_observation_age = max_observation_age
        self.params = dict(params or {})
        if attempts_per_call is not None and (
            isinstance(attempts_per_call, bool) or not isinstance(attempts_per_call, int)
            or attempts_per_call < 1
        ):
            raise ValueError(
                f"attempts_per_call must be an integer >= 1, got {attempts_per_call!r}"
            )
        self.attempts_per_call = attempts_per_call
        self.continue_run = continue_run
        self.reruns: Mapping[str, int] = dict(reruns or {})
        self.repeat = frozenset(repeat)
        self.force = frozenset(force)
        self._began: datetime | None = None  # when run() began: the baseline of forced reruns
        self.accept_schema_change = accept_schema_change
        self.allow_open = allow_open  # run intervals that have not ended (recorded as such)
        # twice.engine.snapshots: read each snapshotting task's source again, once per interval
        self.refresh_snapshots = refresh_snapshots
        self.snapshot_root = snapshot_root
        self._refreshed: set[tuple[str, Interval]] = set()
        self._refresh_lock = threading.Lock()
        self.listeners: tuple[Listener, ...] = tuple(listeners)
        self.writers = FileWriters()
        self._pools: dict[str, SlotPool] = {}
        self._pools_lock = threading.Lock()

    # -- public -------------------------------------------------------------------------------

    def now(self) -> datetime:
        return self._clock()

    def emit(self, event: Event) -> None:
        """Hand ``event`` to every listener; a failing listener never changes the outcome."""
        for listener in self.listeners:
            with contextlib.suppress(Exception):
                listener(event)

    def unit_for(self, task_name: str, interval: Interval) -> UnitOfWork:
        """The unit of work of ``task_name`` for ``interval`` as it stands NOW.

        Its input version covers the upstream outputs it reads for the interval (DESIGN.md,
        data versions): for each dependency in the pipeline, the latest recorded fingerprint of
        the dependency's destination partition, or (no destination) the dependency's own unit
        id. Changed upstream output is therefore a new unit of work that runs; identical output
        is the same unit, already settled. Computed again before every attempt. With
        ``refresh_snapshots`` a snapshotting task's source is read again first (once per
        interval and run), so a changed source is identified as a new unit.
        """
        task = self.pipeline.get_task(task_name)
        if self.refresh_snapshots and task.snapshot is not None:
            with self._refresh_lock:
                if (task_name, interval) not in self._refreshed:
                    snapshots.ensure(self.ledger, task, self.pipeline.name, interval,
                                     refresh=True, root=self.snapshot_root)
                    self._refreshed.add((task_name, interval))
        return identify_unit(self.pipeline, self.ledger, task_name, interval)

    def run(
        self, intervals: Interval | Iterable[Interval], tasks: Iterable[str] | str | None = None
    ) -> RunResult:
        """Run ``tasks`` (default: all) for each interval, in order; see the module docstring.

        With ``tasks``, only those run; their dependencies outside the selection must have a
        succeeded latest attempt in the ledger for the same interval, or they are blocked.
        Bad input (unknown task, an interval off the schedule's grid) raises before anything runs.
        """
        spans = [intervals] if isinstance(intervals, Interval) else list(intervals)
        canonical = [self.pipeline.schedule.canonical(span) for span in spans]
        refuse_open_intervals(canonical, self.now(), allow_open=self.allow_open)
        plan = self.pipeline
        if tasks is not None:
            names = [tasks] if isinstance(tasks, str) else list(tasks)
            plan = self.pipeline.subset(names, with_dependents=False)
        order = plan.topological_order()
        started = self.now()
        self._began = started
        results: list[UnitResult] = []
        for interval in canonical:
            results.extend(self._run_interval(plan, order, interval))
        return RunResult(self.pipeline.name, self.holder, tuple(results), started, self.now())

    def forced_baseline(self, uow_id: str) -> int:
        """The attempt a forced rerun repeats: the unit's latest attempt started before this
        run began (0: none). A success another process recorded since stands, so racing forced
        runs execute the unit once (the same rule as a backfill's ``reruns``)."""
        before = latest_attempt_before(self.ledger.attempts(uow_id), self._began)
        return 0 if before is None else before.number

    # -- scheduling ---------------------------------------------------------------------------

    def _workflow_deadline(self) -> tuple[Deadline | None, datetime | None]:
        timeout = self.pipeline.workflow_timeout
        if timeout is None:
            return None, None
        if self._injected_clock:
            deadline = Deadline(timeout, clock=lambda: self._clock().timestamp())
        else:
            deadline = Deadline(timeout)
        return deadline, self.now() + timedelta(seconds=timeout)

    def _run_interval(
        self, plan: Pipeline, order: list[str], interval: Interval
    ) -> list[UnitResult]:
        deadline, wall_deadline = self._workflow_deadline()
        done: dict[str, UnitResult] = {}
        pending = list(order)
        running: dict[Future[UnitResult], str] = {}
        workers: FuturesExecutor
        if self.max_workers == 1 and threading.current_thread() is not threading.main_thread():
            # A driver's worker thread (a backfill's interval): no signal lands here, so the
            # units run in this thread instead of a pool started for each interval.
            workers = _InThread()
        else:
            workers = ThreadPoolExecutor(self.max_workers, thread_name_prefix="twice-unit")
        with workers:
            while pending or running:
                progressed = True
                while progressed:
                    progressed = False
                    for name in list(pending):
                        task = plan.get_task(name)
                        internal = [d for d in task.depends_on if d in plan]
                        if any(dep not in done for dep in internal):
                            continue
                        pending.remove(name)
                        progressed = True
                        blocked = self._blocked_reason(task, internal, done, interval)
                        if blocked is not None:
                            done[name] = self._blocked(task, interval, blocked)
                            continue
                        upstream = {dep: done[dep].value for dep in internal}
                        future = workers.submit(
                            self._run_unit, task, interval, upstream, deadline, wall_deadline,
                            frozenset(order),
                        )
                        running[future] = name
                if not running:
                    continue
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    done[running.pop(future)] = future.result()
        return [done[name] for name in order]

    def _blocked_reason(
        self, task: Task, internal: list[str], done: Mapping[str, UnitResult], interval: Interval
    ) -> str | None:
        failed = [dep for dep in internal if not done[dep].ok]
        if failed:
            details = ", ".join(f"{dep} ({done[dep].outcome})" for dep in failed)
            return f"dependency did not succeed in this run: {details}"
        for dep in task.depends_on:
            if dep in internal or dep not in self.pipeline:
                continue  # declared external to this pipeline: satisfied by earlier runs
            try:
                unit = self.unit_for(dep, interval)
            except Exception as exc:
                return f"dependency {dep}: cannot identify its unit of work ({redact(str(exc))})"
            seen = unsettled(self.ledger, unit.uow_id)
            if seen is not None:
                return (
                    f"dependency {dep} was not selected to run and the ledger shows {seen} "
                    f"for {interval}"
                )
        return None

    def _blocked(self, task: Task, interval: Interval, reason: str) -> UnitResult:
        try:
            unit = self.unit_for(task.name, interval)
        except Exception as exc:
            return UnitResult(task.name, interval, "blocked", f"{reason}; {redact(str(exc))}")
        self.ledger.record_unit(unit)
        self.ledger.record_observation(
            unit.uow_id, "blocked", source=EXECUTOR_SOURCE, detail={"reason": reason}
        )
        latest = self.ledger.latest_attempt(unit.uow_id)
        return UnitResult(
            task.name, interval, "blocked", reason, uow_id=unit.uow_id,
            total_attempts=0 if latest is None else latest.number,
        )

    def _run_unit(
        self,
        task: Task,
        interval: Interval,
        upstream: Mapping[str, Any],
        deadline: Deadline | None,
        wall_deadline: datetime | None,
        planned: frozenset[str] = frozenset(),
    ) -> UnitResult:
        """Claim, drive and settle the unit of ``task`` for ``interval`` (emits UnitSettled);
        ``planned``: the tasks this run drives for the interval.

        The unit is identified again if its inputs change while it is claimed (an upstream
        output rewritten meanwhile): the new unit is driven instead, at most a few times.
        """

        result: UnitResult | None = None
        for _ in range(3):
            try:
                result, superseded = self._claim_and_drive(
                    task, interval, upstream, deadline, wall_deadline
                )
            except (LedgerError, _sqlalchemy_error()) as exc:
                settles = (
                    "what the attempt wrote is settled from the destination's commit record on "
                    "the next run" if task.owns_output or task.reconcile is not None else
                    "twice cannot see this task's effects: if its attempt ran, record how it "
                    "ended with `twice resolve` once the ledger works"
                )
                result = UnitResult(
                    task.name, interval, "unknown-needs-reconcile",
                    f"the ledger failed while twice drove this unit ({type(exc).__name__}: "
                    f"{_first_line(exc)}); {settles}",
                    error=f"{type(exc).__name__}: {_first_line(exc)}", ledger_failed=True,
                )
                superseded = False
            if not superseded:
                break
        assert result is not None
        if result.outcome == "succeeded":
            self._record_dependents_due(task, interval, planned)
        self.emit(UnitSettled(result.uow_id or "", task.name, interval, result.outcome, result))
        return result

    def _record_dependents_due(self, task: Task, interval: Interval,
                               planned: frozenset[str] = frozenset()) -> None:
        """Record the unit each direct dependent of ``task`` now needs for ``interval``, as
        the ledger stands after ``task``'s success: when ``task``'s output changed, that is a
        new unit, which every report then shows never run (and the dependent's earlier unit
        superseded) until a run, a backfill or a worker executes it. Without this, a run of
        ``task`` alone (``tasks=``, a worker stopped after one unit) left the dependents'
        old successes reading "verified" over outputs built from the old input.

        Not for a dependent this run drives (``planned``: it records its own unit when it
        runs), nor while another of its upstreams is itself due (its unit would change again
        once that one runs: recorded now, it would only ever be superseded)."""
        for other in self.pipeline:
            if task.name not in other.depends_on or other.name in planned:
                continue
            if any(self._due(upstream, interval) for upstream in other.depends_on
                   if upstream != task.name and upstream in self.pipeline):
                continue
            try:
                unit = self.unit_for(other.name, interval)
            except Exception:  # identified, and its error reported, when it is planned
                continue
            if self.ledger.unit(unit.uow_id) is None:
                self.ledger.record_unit(unit)

    def _due(self, name: str, interval: Interval) -> bool:
        """Whether task ``name``'s unit for ``interval``, as the ledger stands, has not
        succeeded (it would run, or cannot be identified now)."""
        try:
            unit = self.unit_for(name, interval)
        except Exception:  # identified, and its error reported, when it is planned
            return True
        return unsettled(self.ledger, unit.uow_id) is not None

    def _claim_and_drive(
        self,
        task: Task,
        interval: Interval,
        upstream: Mapping[str, Any],
        deadline: Deadline | None,
        wall_deadline: datetime | None,
    ) -> tuple[UnitResult, bool]:
        try:
            unit = self.unit_for(task.name, interval)
        except Exception as exc:
            return UnitResult(
                task.name, interval, "blocked",
                f"cannot identify the unit of work: {type(exc).__name__}: {redact(str(exc))}",
                error=f"{type(exc).__name__}: {redact(str(exc))}",
            ), False
        try:
            settings = PlanSettings.for_task(
                self.pipeline, task, unit.interval,
                max_observation_age=self.max_observation_age, workflow_deadline=wall_deadline,
            )
        except Exception as exc:  # e.g. a deadline function that fails for this interval
            reason = f"cannot plan it: {type(exc).__name__}: {redact(str(exc))}"

            def blocked(ledger: Ledger) -> None:
                ledger.record_unit(unit)
                ledger.record_observation(
                    unit.uow_id, "blocked", source=EXECUTOR_SOURCE, detail={"reason": reason}
                )

            self.ledger.atomic(blocked)
            return UnitResult(task.name, interval, "blocked", reason, uow_id=unit.uow_id,
                              error=f"{type(exc).__name__}: {redact(str(exc))}"), False

        run = _UnitRun(self, task, unit, upstream, deadline, settings)

        def claim(ledger: Ledger) -> tuple[LeaseResult, _Opening | None]:
            """One durable write records the unit, takes its lease, opens the run and, when
            nothing holds it back, begins its first attempt."""
            ledger.record_unit(unit)
            lease = ledger.acquire_lease(unit.uow_id, self.holder, self.lease_ttl)
            if not lease.acquired:
                return lease, None
            opening = run._open()
            opening.begun = run._begin_now(opening)
            return lease, opening

        # The claim may begin the attempt, which holds the file's writer: it is taken before
        # the claim if it is free (never waited for inside a ledger transaction, nor by a unit
        # that turns out to be skipped), and given back at once if no attempt began.
        held = self.writers.held_if_free(task.destination)
        run.may_begin = held is not None
        early = held if held is not None else contextlib.ExitStack()
        try:
            lease, opening = self.ledger.atomic(claim)
        except LedgerError as exc:
            early.close()
            if isinstance(exc, LedgerCommitUnknownError):
                raise  # the claim may be recorded: its attempt may have begun
            return _claim_not_recorded(task, interval, unit, exc), False
        except BaseException:
            early.close()
            raise
        if opening is None or opening.begun is None:
            early.close()
        if opening is None:  # the lease is held elsewhere: nothing was opened
            latest = self.ledger.latest_attempt(unit.uow_id)
            return UnitResult(
                task.name, interval, "leased-elsewhere",
                f"leased by {lease.holder} until {iso(lease.expires_at)}; not run",
                uow_id=unit.uow_id, holder=lease.holder, lease_expires_at=lease.expires_at,
                total_attempts=0 if latest is None else latest.number,
            ), False
        run.writer = early
        with _LeaseKeeper(self.ledger, unit.uow_id, self.holder, self.lease_ttl,
                          self._renewals, lease.expires_at) as keeper:
            run.token = lease.token
            run.lease_lost = lambda: keeper.expired(self.ledger.now())
            run.give_back_lease = keeper
            try:
                result = run.drive(opening)
            finally:
                early.close()  # normally already handed to the attempt and released there
        if lease.taken_over_from is not None:
            note = self._takeover_note(unit.uow_id, lease.taken_over_from, result)
            result = _with_notes(result, note)
        if keeper.lost:
            note = "the lease could not be renewed while running: another holder may have run it"
            result = _with_notes(result, note)
        return result, run.superseded

    def _takeover_note(self, uow_id: str, previous: str, result: UnitResult) -> str:
        """Say in the result what the ledger recorded when we took a lease over (expired, or
        its holder's process gone)."""
        from twice.ledger import LEASE_TAKEOVER_STATE

        takeovers = [
            o for o in self.ledger.observations(uow_id) if o.state == LEASE_TAKEOVER_STATE
        ]
        detail = takeovers[-1].detail if takeovers else {}
        unknown = detail.get("attempts_now_unknown")
        how = "lease of exited process" if detail.get("holder_exited") else "expired lease of"
        note = f"took over the {how} {previous}"
        if unknown:
            handled = (
                "left for reconciliation" if result.outcome == "unknown-needs-reconcile"
                else "reconciled before anything else"
            )
            note += (
                f"; attempt {', '.join(map(str, unknown))} was still running under it: recorded "
                f"unknown and {handled}, not blindly retried"
            )
        return note

    # -- pools and helpers used by _UnitRun ---------------------------------------------------

    def pool_for(self, task: Task) -> SlotPool | None:
        if task.pool is None:
            return None
        with self._pools_lock:
            pool = self._pools.get(task.pool)
            if pool is None:
                capacity = self.pipeline.pools[task.pool]
                pool = (
                    LedgerPool(task.pool, capacity, self.ledger, ttl=self.pool_ttl,
                               poll_interval=self.pool_poll_interval,
                               job_wait=self.observe_timeout)
                    if self.shared_pools
                    else Pool(task.pool, capacity)
                )
                self._pools[task.pool] = pool
            return pool

    def jitter(self, task: Task, attempts: int) -> float:
        with self._rng_lock:
            return jittered_delay(task.retry, attempts, self._rng)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._sleep(seconds)


def identify_unit(
    pipeline: Pipeline, ledger: Ledger, task_name: str, interval: Interval
) -> UnitOfWork:
    """The unit of work of ``task_name`` for ``interval`` as the ledger stands now (see
    ``Executor.unit_for``); drivers and plans use this so they name the units the engine runs."""
    base = pipeline.unit_of_work(task_name, interval)
    task = pipeline.get_task(task_name)
    deps = [dep for dep in task.depends_on if dep in pipeline]
    version = base.input_version
    if deps:
        versions = {dep: _output_version(pipeline, ledger, dep, base.interval) for dep in deps}
        digest = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]
        version = f"{version}+up:{digest}" if version else f"up:{digest}"
    if task.snapshot is not None:
        suffix = snapshots.input_version_suffix(ledger, pipeline.name, task_name, base.interval)
        version = f"{version}{suffix}" if version or not suffix else suffix[1:]
    if version == base.input_version:
        return base
    return pipeline.unit_of_work(task_name, interval, input_version=version)


def overwritten_by(ledger: Ledger, task: Task, unit: UnitOfWork) -> FingerprintRecord | None:
    """The latest recorded version of ``unit``'s destination partition when ANOTHER unit of
    the same task and interval wrote it (so ``unit``'s success no longer stands for its slot:
    e.g. a source reverted to an earlier version); None while the slot holds ``unit``'s output
    or the task owns no destination. Every driver applies it (the engine, ``twice worker``)."""
    if not task.owns_output:
        return None
    latest = ledger.latest_fingerprint(task.destination, unit.interval.label)
    if latest is None or latest.uow_id in (None, unit.uow_id):
        return None
    return latest


def _output_version(pipeline: Pipeline, ledger: Ledger, dep: str, interval: Interval) -> str:
    """What a dependency's output for ``interval`` is now: its partition's latest recorded
    fingerprint, or (no destination) its own unit id."""
    task = pipeline.get_task(dep)
    if task.owns_output:
        record = ledger.latest_fingerprint(task.destination, interval.label)
        if record is None:
            return "fp:none"
        version = f"fp:{record.algorithm}:{record.row_count}:{record.checksum}"
        shape = _reshaped(ledger, record)
        return version if shape is None else f"{version}:shape:{shape}"
    return f"unit:{identify_unit(pipeline, ledger, dep, interval).uow_id}"


def _reshaped(ledger: Ledger, record: FingerprintRecord) -> str | None:
    """A digest of ``record``'s columns when they differ from the partition's first recorded
    version's (a column renamed or retyped, the change accepted): the checksum hashes values
    only, so without it a renamed column would leave dependents on the old shape. None while
    the columns are as first recorded (or either version predates recorded columns): such a
    partition keeps the version string earlier releases gave it."""
    if record.version <= 1:
        return None
    first = ledger.fingerprints(record.destination, record.partition)[0]
    shape: object
    original: object
    if record.schema is not None and first.schema is not None:
        shape, original = record.schema, first.schema
    else:
        shape, original = record.columns, first.columns
    if shape is None or original is None or shape == original:
        return None
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:12]


def _is_schema_refusal(error: BaseException) -> bool:
    """The destination refused rows whose columns differ from the table's (a schema change
    the write could not apply): typed, never read out of a message. A ``SchemaChangeError``
    from verification is not one: ``_check_output`` already emitted its rejection."""
    from twice.destinations.columns import SchemaError

    return isinstance(error, SchemaError)


def _sqlalchemy_error() -> type[Exception]:
    from sqlalchemy.exc import SQLAlchemyError

    return SQLAlchemyError


#: A pool wait longer than this re-checks the deadlines before the attempt starts.
POOL_WAIT_RECHECK_SECONDS = 0.05


def _claim_not_recorded(task: Task, interval: Interval, unit: UnitOfWork,
                        exc: LedgerError) -> UnitResult:
    """The ledger refused the claim (disk full, read-only, locked past the retry window): its
    transaction rolled back, so no attempt began and nothing about the unit was recorded. Not
    an unknown outcome: nothing ran."""
    error = f"{type(exc).__name__}: {_first_line(exc)}"
    return UnitResult(
        task.name, interval, "blocked",
        f"the ledger could not record the claim ({error}); nothing ran and nothing about this "
        "unit was recorded: run it again once the ledger can be written",
        uow_id=unit.uow_id, error=error, ledger_failed=True,
    )


def _first_line(exc: BaseException) -> str:
    text = redact(str(exc)).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _mask_error(error: BaseException | None) -> None:
    """Mask passwords in an attempt's exception, in place, before anything records or shows it:
    a driver's error (psycopg's, SQLAlchemy's) can echo the connection string it was given
    (``twice.core.secrets.redact``). The exception keeps its class, so it is classified and
    reported as before."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:  # the error and what it chains
        seen.add(id(error))
        text = str(error)
        clean = redact(text)
        if clean != text:
            with contextlib.suppress(Exception):
                error.args = (clean,)
        notes = getattr(error, "__notes__", None)
        if isinstance(notes, list):
            error.__notes__ = [redact(n) if isinstance(n, str) else n for n in notes]
        error = error.__cause__ or error.__context__


def _error_classification(report: AttemptReport) -> ErrorClassification:
    """How the ledger classifies an attempt's error: a job that succeeded but whose output
    was rejected is ``unknown`` only if the ending stayed ``succeeded``."""
    ending = report.ending
    if ending == "succeeded":
        return "unknown"
    return ending


def _with_notes(result: UnitResult, *notes: str) -> UnitResult:
    return replace(result, notes=(*result.notes, *notes))




@dataclass(frozen=True)
class _Check:
    """What the validate-output step read (``_UnitRun._check_output``)."""

    rejected: BaseException | None = None  # the output is not accepted: why
    measured: MeasuredPartition | None = None  # the fingerprint to record as its next version
    assertions: tuple[Any, ...] = ()  # the acceptance criteria checked, for the events


@dataclass
class _Ended:
    """What the transaction that finished an attempt recorded (``_UnitRun._finish``)."""

    report: AttemptReport  # the attempt, its ending changed if its output was rejected
    diff: PartitionDiff | None = None  # the partition's version it recorded
    rejected: BaseException | None = None  # recording the version was refused: why
    released: bool = False  # the lease was given back


@dataclass
class _Opening:
    """What ``_UnitRun._open`` found and recorded before the loop (see there)."""

    prior: AttemptRecord | None  # the latest attempt when the run was claimed
    rerun_of: int | None = None  # the succeeded attempt this run repeats
    notes: list[str] = field(default_factory=list)
    stop: tuple[UnitOutcome, str] | None = None  # the run ends here: its outcome and reason
    skipped: bool = False
    opened: bool = False  # the run marker is recorded
    begun: _Begun | None = None  # the run's first attempt, begun in the same transaction


@dataclass(frozen=True)
class _Begun:
    """An attempt begun in the transaction that claimed its unit (``_UnitRun._begin_now``)."""

    evidence: UnitEvidence  # what the planner decided on, read in that transaction
    record: AttemptRecord
    generation: JobGenerationRecord
    token: int  # the attempt's fencing token
    timeout: float | None  # the attempt's timeout, capped by the workflow deadline


@dataclass(frozen=True)
class _CommitRead:
    """What the destination said of an unknown attempt's owned write (``_read_commit``)."""

    state: Commit
    commit: CommitRecord | None = None  # its record (None with PRESENT: only the marker)
    later: CommitRecord | None = None  # a later write that replaced its rows since
    sealed: bool = False  # the slice was sealed against it before concluding ABSENT
    acting: str | None = None  # MAY_COMMIT: why it may still commit
    error: str | None = None  # UNREADABLE: why


def _sealing(sealed: bool) -> str:
    """Why an absent commit record stays absent."""
    return ("the slice is sealed against it, so it never will" if sealed else
            "the slice could not be sealed (Spark; a table format before its table exists): "
            "should its process be paused rather than gone, a write it makes is refused once "
            "this unit's next write commits")


class _UnitRun:
    """One run of one unit of work under our lease: the decide/attempt/reconcile loop."""

    def __init__(
        self,
        executor: Executor,
        task: Task,
        unit: UnitOfWork,
        upstream: Mapping[str, Any],
        deadline: Deadline | None,
        settings: PlanSettings,
        token: int = 0,
    ) -> None:
        self.x = executor
        self.token = token  # the fencing token stamped on owned writes (fresh per attempt)
        self.supersede = False  # a deliberate rerun: take a new job generation once
        self.superseded = False  # the inputs changed under us: the driver re-identifies it
        self.lease_lost: Callable[[], bool] = lambda: False
        # Set by the driver that holds the lease: a success gives it back in the transaction
        # that finishes the attempt (then nothing more is written in this run).
        self.give_back_lease: _LeaseKeeper | None = None
        self._evidence_now: UnitEvidence | None = None  # see _evidence
        # the file's writer, taken before the claim when the claim begins the attempt
        self.writer = contextlib.ExitStack()
        self.may_begin = False  # the claim may begin the first attempt (its writer is held)
        self._waited_after: int | None = None  # the attempt whose backoff we already waited
        self.closed_elsewhere: str | None = None  # our attempt was settled by a taker
        # a reconciled attempt's commit record, rewritten since by a later write to the slice
        self.replaced_by: CommitRecord | None = None
        self.diff: Any = None
        self.ledger = executor.ledger
        self.task = task
        self.unit = unit
        self.uow_id = unit.uow_id
        self.upstream = upstream
        self.deadline = deadline
        self.settings = settings
        self.attempts = 0
        self.before: AttemptRecord | None = None  # the latest attempt when the run claimed it
        self.notes: list[str] = []
        self.error: str | None = None
        self.value: Any = None
        self.acceptance: tuple[str, ...] = ()
        self.nonfatal = 0  # non-fatal errors recorded by the attempt last checked
        # Pool slots held across an attempt and, while its job may still run, across the
        # observation of that job in this run (see _take_slots / _slots_after_attempt).
        self._pool: SlotPool | None = None
        self._pool_stack: contextlib.ExitStack | None = None
        self._pool_lease: PoolLease | None = None
        self._pool_worker: threading.Thread | None = None  # a timed-out attempt's thread

    # -- the loop -----------------------------------------------------------------------------

    def drive(self, opening: _Opening) -> UnitResult:
        """Run the unit; ``opening`` is what ``_open`` found in the claiming transaction."""
        try:
            return self._drive(opening)
        finally:
            self._leave_slots()

    def _open(self) -> _Opening:
        """Everything before the decide/attempt loop that only reads and writes the ledger,
        inside the transaction that claims the unit (one durable write with the lease): what
        the latest attempt means for this run, the ``held`` refusal, an orphaned attempt made
        ``unknown``, and the run marker. Re-runnable (``Ledger.atomic``): it changes nothing
        of this object, and says what it found."""
        recorded = self.ledger.attempts(self.uow_id)  # kept for the evidence read below
        prior = recorded[-1] if recorded else None
        opening = _Opening(prior)
        if prior is not None and prior.outcome == "succeeded":
            stale = self.x.reruns.get(self.uow_id)
            if stale is None and self.task.name in self.x.force:
                stale = self.x.forced_baseline(self.uow_id)
            overwritten = self._slot_overwritten() if stale is None else None
            if overwritten is not None:  # e.g. a source reverted to an earlier version
                stale = prior.number
                opening.notes.append(overwritten)
            if stale is None:
                opening.notes.append(
                    f"already succeeded in attempt {prior.number}; not run again "
                    "(a new input or transform version is a new unit of work)"
                )
                opening.stop = ("succeeded", "latest attempt succeeded in an earlier run"
                                + self._asserted_by(prior.number))
                opening.skipped = True
                return opening
            if prior.number > stale:
                opening.notes.append(
                    f"attempt {prior.number} (holder {prior.holder}) succeeded after the rerun "
                    f"was planned on attempt {stale or 'none'}; not run again"
                )
                opening.stop = ("succeeded", f"succeeded in attempt {prior.number} by "
                                f"{prior.holder} after this rerun was planned")
                return opening
            if self._held(opening, f"attempt {prior.number} of this unit succeeded"):
                return opening
            opening.rerun_of = prior.number
            opening.notes.append(
                f"attempt {prior.number} had succeeded; asked to run again: its next attempt "
                "takes a new job generation, so a remote job is really executed again"
            )
        elif prior is None and not (self.task.repeat_is_safe or self.task.name in self.x.repeat):
            earlier = self._slot_success()
            if earlier is not None and self._held(opening, earlier):
                return opening
        elif (prior is not None and prior.outcome.startswith("failed-")
              and self.task.effects_unseen
              and not (self.x.continue_run and self._has_run())
              and self._held_after_failure(opening, prior)):
            # a new run does not reset what the planner said of it: reconcile the effects
            # first (README: a failed attempt is retried only if transient and safe_repeat)
            return opening
        if prior is not None and prior.outcome == "running":
            opening.prior = prior = self._orphaned(prior, opening.notes)
        if prior is not None and prior.outcome in ("unknown", "running"):
            return opening  # reconciled first, outside any transaction (remote calls)
        if opening.rerun_of is not None or not (self.x.continue_run and self._has_run()):
            self._open_run(opening.rerun_of, latest=prior, notes=opening.notes)
            opening.opened = True
        return opening

    def _begin_now(self, opening: _Opening) -> _Begun | None:
        """Inside the claiming transaction, right after ``_open``: begin the run's first
        attempt there too when nothing can hold it back (no backoff to wait, no pool slots or
        cost estimate to take, the workflow deadline leaves room), so a unit that succeeds
        costs two durable writes: this one, and the one that finishes it. None: the loop
        decides and begins it the usual way. Re-runnable, like ``_open``."""
        if not self.may_begin or not opening.opened or opening.stop is not None:
            return None
        task = self.task
        if self.x.pool_for(task) is not None or (
            task.maximum_bytes_billed is not None and task.cost_estimate is not None
        ):
            return None
        budget = self.x.attempts_per_call
        if budget is not None and budget < 1:
            return None
        evidence = self._evidence()
        decision = plan_unit(evidence)
        if decision is None or evidence.attempts_in_run > 0 or decision.decision not in (
            Decision.RETRY_ELIGIBLE, Decision.WAIT_BACKOFF
        ):
            return None
        try:
            if self.deadline is not None:
                self.deadline.check(evidence.duration_seconds())
            timeout = self._attempt_timeout()
        except WorkflowTimeout:
            return None  # the loop records why it does not start
        record, generation, token = self._begin_in(self.ledger, opening.rerun_of is not None)
        return _Begun(evidence, record, generation, token, timeout)

    def _drive(self, opening: _Opening) -> UnitResult:
        self.notes.extend(opening.notes)
        self.before = opening.prior
        if opening.rerun_of is not None:
            self.supersede = True
        if opening.stop is not None:
            return self._result(*opening.stop, skipped=opening.skipped)
        prior = opening.prior
        if prior is not None and prior.outcome in ("unknown", "running"):
            evidence = self._evidence()
            decision = plan_unit(evidence)
            assert decision is not None
            stop = self._resolve_unknown(prior, decision, evidence)
            if stop is not None:
                return stop
            resolved = self.ledger.latest_attempt(self.uow_id)
            if resolved is not None and resolved.outcome == "succeeded":
                if self.replaced_by is None:
                    return self._result("succeeded", "reconcile found the earlier attempt's "
                                        "job succeeded; nothing resubmitted")
                # it committed, but the slice has been rewritten since: its output is gone
                if self._held(opening, f"attempt {resolved.number} of this unit succeeded"):
                    assert opening.stop is not None
                    return self._result(*opening.stop)
                opening.rerun_of = resolved.number
                self.supersede = True
                self._open_run(resolved.number, latest=resolved)
                opening.opened = True
        if not opening.opened and (
            opening.rerun_of is not None or not (self.x.continue_run and self._has_run())
        ):
            self._open_run(opening.rerun_of)
        if opening.begun is not None:
            stop = self._attempt(opening.begun.evidence, opening.begun)
            if stop is not None:
                return stop
        refreshes = 0
        while True:
            evidence = self._evidence()
            decision = plan_unit(evidence)
            assert decision is not None
            kind = decision.decision
            latest = evidence.latest
            if kind is Decision.VALIDATE_OUTPUT:
                return self._result("succeeded", "finished without error", decision,
                                    planned=(decision, evidence))
            if self.give_back_lease is not None and self.give_back_lease.released:
                # our success gave the lease back: whatever comes next is not ours to write
                return self._result("succeeded", f"finished without error; next: "
                                    f"{kind.value} ({decision.reason})", decision,
                                    planned=(decision, evidence))
            if kind in STOPPING_DECISIONS:
                self._record(decision, evidence)
                return self._result(STOPPING_DECISIONS[kind], decision.reason, decision)
            if kind in (Decision.RECONCILE_REMOTE, Decision.OBSERVE_RUNNING):
                assert latest is not None
                stop = self._resolve_unknown(latest, decision, evidence)
                if stop is not None:
                    return stop
                continue
            if kind is Decision.REFRESH_OBSERVATION:
                refreshes += 1
                if refreshes > 2:  # our own evidence cannot be this old: the clock is odd
                    return self._result("unknown-needs-reconcile", decision.reason, decision)
                self.ledger.record_observation(
                    self.uow_id, "refreshed", source=EXECUTOR_SOURCE,
                    attempt=None if latest is None else latest.number,
                    detail={"state": None if latest is None else latest.outcome},
                )
                continue
            # retry-eligible or wait-backoff: attempt 1 of the run, or a retry
            budget = self.x.attempts_per_call
            if budget is not None and self.attempts >= budget:
                self._record(decision, evidence, retry_owner="caller")
                return self._result(
                    "attempts-exhausted",
                    f"this call's budget of {budget} attempt(s) is used; the planner's next step "
                    f"is {kind.value} ({decision.reason}); the caller owns the retry loop",
                    decision,
                )
            waited_for = None if latest is None else latest.number
            if evidence.attempts_in_run > 0 and self._waited_after != waited_for:
                stop = self._wait_backoff(decision, evidence)
                if stop is not None:
                    return stop
                self._waited_after = waited_for
                continue  # plan again: the deadline check sees the real start
            stop = self._attempt(evidence)
            if stop is not None:
                return stop

    # -- steps --------------------------------------------------------------------------------

    def _held(self, opening: _Opening, why: str) -> bool:
        """A task not asserted ``safe_repeat`` that already succeeded is not executed again
        unless the operator named it (``repeat``): its effects (an email, an API call) would
        happen twice. Records the refusal in ``opening`` (True), or False when it may run."""
        if self.task.repeat_is_safe or self.task.name in self.x.repeat:
            return False
        reason = (
            f"held: {why}, and task {self.task.name!r} is not safe_repeat (running it again "
            f"may repeat its side effects); name it to execute it again (--repeat "
            f"{self.task.name})"
        )
        self.ledger.record_observation(
            self.uow_id, "held", source=EXECUTOR_SOURCE, detail={"reason": reason}
        )
        opening.stop = ("held", reason)
        return True

    def _held_after_failure(self, opening: _Opening, prior: AttemptRecord) -> bool:
        """A failed attempt of a task whose effects twice cannot see may have acted first, so
        it is held (``_held``) unless an operator resolved it and the rule for resolutions
        (``twice.core.resolution.next_run_after``, read from the resolution's typed outcome)
        lets the next run execute it: ``--as failed``, the effect did not happen."""
        resolved = self._resolution_of(prior.number)
        if resolved is None:
            return self._held(opening, f"attempt {prior.number} failed after it may have acted "
                              "(twice cannot see this task's effects)")
        said = (f"attempt {prior.number} was resolved by operator {resolved.operator} as "
                f"{resolved.outcome} ({resolution.CLAIMS[resolved.outcome]}; asserted with "
                "twice resolve, not observed by twice)")
        if resolution.next_run_after(resolved.outcome) is resolution.NextRun.EXECUTE:
            opening.notes.append(f"{said}: executed again, nothing to repeat")
            return False
        return self._held(opening, said)

    def _resolution_of(self, number: int) -> ResolutionRecord | None:
        """The operator's resolution of attempt ``number`` (``twice resolve``), if any."""
        for record in reversed(self.ledger.resolutions(self.uow_id)):
            if record.attempt.number == number:
                return record
        return None

    def _asserted_by(self, number: int) -> str:
        """`` (asserted by operator X ...)`` when attempt ``number``'s success is an
        operator's resolution (``twice resolve``), not something twice observed; else ""."""
        record = self._resolution_of(number)
        if record is not None and record.outcome == "succeeded":
            return (f" (asserted by operator {record.operator} with twice resolve, not "
                    "observed by twice)")
        return ""

    def _slot_overwritten(self) -> str | None:
        """Why this unit's success no longer stands for its slot: the destination partition's
        latest recorded version was written by ANOTHER unit of the same task and interval
        (another input or transform version ran after it), so its output is gone. None while
        the slot still holds this unit's output (or the task owns no destination)."""
        latest = overwritten_by(self.ledger, self.task, self.unit)
        if latest is None:
            return None
        return (
            f"the slot now holds the output of unit {latest.uow_id} (fingerprint "
            f"v{latest.version}), written after this unit succeeded: this unit runs again"
        )

    def _slot_success(self) -> str | None:
        """Another unit of the same task and interval (older input or transform version)
        that succeeded, described; None if there is none."""
        found = earlier_success(self.ledger, self.unit)
        if found is None:
            return None
        other, latest = found
        return (f"unit {other.uow_id} (input version {other.input_version or 'none'}) "
                f"succeeded for {self.unit.interval.label} in attempt {latest.number}")

    def _orphaned(self, prior: AttemptRecord, notes: list[str]) -> AttemptRecord:
        """A ``running`` attempt found while WE hold the lease has lost its process.

        This run has started nothing yet, and the holder that began the attempt no longer
        holds the lease: it crashed after the lease was released, or it is this holder's name
        restarted after a crash (taking over someone else's expired lease is handled by the
        ledger, which already recorded the attempt as unknown). Its work may have happened,
        so the outcome is unknown, not failed: record that and why, then reconcile.
        """
        if prior.holder == self.x.holder:
            how = (
                f"holder {prior.holder} (this worker's name, restarted) began it and no "
                "process of that name is running it now"
            )
        else:
            how = f"holder {prior.holder} began it and gave up the lease without finishing it"
        why = (
            f"attempt {prior.number} was still recorded running when {self.x.holder} got the "
            f"lease: {how}; its effects may exist, so the outcome is unknown (not failed) and "
            "is reconciled before anything else, never blindly retried"
        )
        record = self.ledger.finish_attempt(self.uow_id, prior.number, "unknown")
        self.ledger.record_observation(
            self.uow_id, "unknown", source=EXECUTOR_SOURCE, attempt=prior.number,
            detail={
                "why": why, "previous_holder": prior.holder, "job_id": prior.job_id,
                "started_at": iso(prior.started_at),
            },
        )
        notes.append(why)
        return record

    def _evidence(self) -> UnitEvidence:
        """The unit's evidence now (or as the transaction that finished a successful attempt
        read it, after which this run writes nothing)."""
        if self._evidence_now is not None:
            evidence, self._evidence_now = self._evidence_now, None
            return evidence
        return self._gathered()

    def _gathered(self) -> UnitEvidence:
        """The unit's evidence read from the ledger now, as the planner takes it."""
        return gather_evidence(
            self.ledger, self.uow_id, as_of=self.x.now(), settings=self.settings,
            include_workflow_deadline=True,
        )

    def _has_run(self) -> bool:
        return any(o.state == RUN_STARTED for o in self.ledger.observations(self.uow_id))

    def _open_run(self, rerun_of: int | None = None, *,
                  latest: AttemptRecord | Literal["read"] | None = "read",
                  notes: list[str] | None = None) -> None:
        """Record the run marker; ``rerun_of`` names the succeeded attempt this run repeats
        (``twice.engine.evidence`` then stops treating that success as the unit's state).
        ``latest``: the latest attempt, when the caller has just read it in this transaction;
        ``notes``: where to say the interval is open (default: the run's notes)."""
        if latest == "read":
            latest = self.ledger.latest_attempt(self.uow_id)
        if notes is None:
            notes = self.notes
        detail: dict[str, Any] = {
            "holder": self.x.holder,
            "first_attempt": (0 if latest is None else latest.number) + 1,
            "settings": self.settings.to_detail(),
        }
        if rerun_of is not None:
            detail["rerun_of"] = rerun_of
        now = self.x.now()
        if self.unit.interval.end > now:  # allowed (allow_open): say the output is partial
            detail["open_interval"] = {"as_of": iso(now), "ends": iso(self.unit.interval.end)}
            notes.append(
                f"the interval had not ended when run (it ends {iso(self.unit.interval.end)}): "
                "its output covers a partial interval"
            )
        self.ledger.record_observation(
            self.uow_id, RUN_STARTED, source=EXECUTOR_SOURCE, detail=detail
        )

    def _record(
        self, decision: DecisionResult, evidence: UnitEvidence, **extra: Any
    ) -> None:
        """Record a decision the executor acts on, with the numbers behind it."""
        detail: dict[str, Any] = {
            "evidence": {
                "state": None if evidence.state is None else evidence.state.value,
                "attempts_in_run": evidence.attempts_in_run,
                "observed_at": iso(evidence.observed_at),
                "source": evidence.source,
                "deadline": iso(evidence.deadline),
                "duration": evidence.duration_seconds(),
                "duration_basis": evidence.duration_basis(),
            },
            **extra,
        }
        if decision.backoff is not None:
            detail["backoff"] = decision.backoff / 1_000_000
        if decision.earliest_start is not None:
            detail["earliest_start"] = iso(micros_to_instant(decision.earliest_start))
        if decision.estimated_finish is not None:
            detail["estimated_finish"] = iso(micros_to_instant(decision.estimated_finish))
        latest = evidence.latest
        if decision.decision is Decision.DEADLINE_INFEASIBLE:
            self.ledger.record_attempt_not_started(
                self.uow_id, reason=decision.reason, decision="deadline-infeasible",
                as_of=evidence.as_of, detail=detail,
            )
        else:
            self.ledger.record_decision(
                self.uow_id, cast("DecisionName", decision.decision.value), reason=decision.reason,
                as_of=evidence.as_of, attempt=None if latest is None else latest.number,
                detail=detail,
            )

    def _not_started(self, reason: str, cause: str) -> UnitResult:
        self.ledger.record_attempt_not_started(
            self.uow_id, reason=reason, decision="deadline-infeasible", as_of=self.x.now(),
            detail={"cause": cause},
        )
        return self._result("deadline-infeasible", reason, decision_name="deadline-infeasible")

    def _wait_backoff(self, decision: DecisionResult, evidence: UnitEvidence
                      ) -> UnitResult | None:
        """Sleep the drawn backoff; a UnitResult instead when the attempt after it could not
        finish in time (``_infeasible_after``)."""
        attempts = evidence.attempts_in_run
        jittered = self.x.jitter(self.task, attempts)
        finished = evidence.last_finished_at or evidence.as_of
        wait_for = (finished + timedelta(seconds=jittered) - evidence.as_of).total_seconds()
        refused = self._infeasible_after(wait_for, evidence)
        if refused is not None:
            return refused
        self._record(
            decision, evidence,
            next_attempt=(evidence.latest.number if evidence.latest else 0) + 1,
            jitter=self.task.retry.jitter, jittered_delay=jittered, waits=max(0.0, wait_for),
        )
        self.x.sleep(wait_for)
        return None

    def _infeasible_after(self, wait_for: float, evidence: UnitEvidence) -> UnitResult | None:
        """The planner checks a backoff without its jitter; the delay drawn may be longer. An
        attempt that could not finish after it, validation included, before the workflow or
        the delivery deadline is refused now, not after sleeping past the deadline."""
        if wait_for <= 0:
            return None
        refused = self._workflow_refusal(evidence, after=wait_for)
        if refused is not None:
            return refused
        later = plan_unit(replace(evidence, as_of=evidence.as_of + timedelta(seconds=wait_for)))
        if later is None or later.decision is not Decision.DEADLINE_INFEASIBLE:
            return None
        self._record(later, evidence)
        return self._result(STOPPING_DECISIONS[later.decision], later.reason, later)

    def _cost_refusal(self) -> UnitResult | None:
        """The cost guard (``twice.engine.cost.guard_task``): an estimate over the task's
        ``maximum_bytes_billed`` refuses the attempt before anything is submitted. The limit is
        the task's own, so every retry or rerun is checked against the same number."""
        from twice.engine.cost import guard_task

        check = guard_task(self.task, self.unit.interval)
        if check is None:
            return None
        if check.allowed:
            self.notes.append(check.reason)
            return None
        self.ledger.record_attempt_not_started(
            self.uow_id, reason=check.reason, decision="repair-cause", as_of=self.x.now(),
            detail=check.to_detail(),
        )
        return self._result("failed-permanent", check.reason, decision_name="repair-cause")

    def _begin(self) -> tuple[AttemptRecord, JobGenerationRecord]:
        """One durable write begins the attempt (``_begin_in``)."""
        record, generation, self.token = self.ledger.atomic(
            lambda ledger: self._begin_in(ledger, self.supersede)
        )
        self.supersede = False
        return record, generation

    def _begin_in(self, ledger: Ledger, supersede: bool
                  ) -> tuple[AttemptRecord, JobGenerationRecord, int]:
        """Begin the attempt in the caller's transaction: its job generation (every task has
        one, its job id deterministic: the current one until it is confirmed failed, a new one
        once for a deliberate rerun, ``supersede``), a fresh fencing token (above the lease's:
        a timed-out attempt whose thread writes late is refused once its retry has committed)
        and the attempt itself."""
        generation = ledger.generation_for_attempt(self.uow_id, supersede=supersede)
        token = ledger.next_fencing_token()
        record = ledger.begin_attempt(
            self.uow_id, holder=self.x.holder, generation=generation.generation,
            job_id=generation.job_id,
        )
        return record, generation, token

    def _attempt(self, evidence: UnitEvidence, begun: _Begun | None = None
                 ) -> UnitResult | None:
        """Start, run and finish one attempt; a UnitResult if the unit stops right here.
        ``begun``: the claim began it (``_begin_now`` made the checks below)."""
        if begun is not None:
            self.supersede = False
            self.token = begun.token
            with contextlib.ExitStack() as slots:
                slots.enter_context(self.writer.pop_all())  # the file's writer, held since
                report = self._run_attempt(begun.record, begun.generation, begun.timeout)
            return self._after_attempt(begun.record, report)
        refused = self._workflow_refusal(evidence)
        if refused is None:
            refused = self._cost_refusal()
        if refused is not None:
            return refused
        changed = self._inputs_changed()
        if changed is not None:
            return changed
        if self.lease_lost():  # paused past the lease: another holder may be running it now
            reason = (
                "the lease was lost while this unit ran (renewal failed or expired): no new "
                "attempt starts; the holder that took it over settles it"
            )
            self.ledger.record_observation(
                self.uow_id, "lease-lost", source=EXECUTOR_SOURCE, detail={"reason": reason}
            )
            return self._result("leased-elsewhere", reason)
        waited_from = time.monotonic()
        refused = self._take_slots()
        if refused is not None:
            return refused
        refused = self._still_feasible(waited_from)
        if refused is not None:
            return refused
        with contextlib.ExitStack() as slots:
            waited_from = time.monotonic()
            slots.enter_context(self._guard())
            refused = self._still_feasible(waited_from)  # the file's writer was busy meanwhile
            if refused is not None:
                return refused
            try:
                timeout = self._attempt_timeout()
            except WorkflowTimeout as exc:
                self._give_back_slots()
                return self._not_started(f"not started: {exc}", "workflow-timeout")
            record, taken = self._begin()
            report = self._run_attempt(record, taken, timeout)
        return self._after_attempt(record, report)

    def _still_feasible(self, waited_from: float) -> UnitResult | None:
        """After a wait since ``waited_from`` (monotonic) longer than
        ``POOL_WAIT_RECHECK_SECONDS`` (for pool slots, or the destination file's writer), the
        checks made before it, again: the time spent waiting may leave too little to finish,
        validation included, before the delivery deadline or the workflow deadline (an attempt
        that cannot finish is never started). None when it can still start; when it cannot,
        its pool slots are given back."""
        if time.monotonic() - waited_from <= POOL_WAIT_RECHECK_SECONDS:
            return None
        evidence = self._gathered()
        decision = plan_unit(evidence)
        assert decision is not None
        refused: UnitResult | None
        if decision.decision in STOPPING_DECISIONS:
            self._record(decision, evidence)
            refused = self._result(STOPPING_DECISIONS[decision.decision], decision.reason,
                                   decision)
        else:
            refused = self._workflow_refusal(evidence)
        if refused is not None:
            self._give_back_slots()
        return refused

    def _workflow_refusal(self, evidence: UnitEvidence, after: float = 0.0
                          ) -> UnitResult | None:
        """Not started when the attempt, validation included, cannot finish before the
        workflow deadline if it starts ``after`` seconds from now; None when it can (or there
        is none)."""
        if self.deadline is not None:
            try:
                self.deadline.check(after + evidence.duration_seconds())
            except WorkflowTimeout as exc:
                return self._not_started(f"not started: {exc}", "workflow-timeout")
        return None

    def _attempt_timeout(self) -> float | None:
        """The next attempt's timeout: the task's own, capped by the workflow deadline
        (``WorkflowTimeout`` when no time is left)."""
        return self.task.timeout if self.deadline is None else self.deadline.cap(self.task.timeout)

    def _run_attempt(self, record: AttemptRecord, taken: JobGenerationRecord,
                     timeout: float | None) -> AttemptReport:
        """Run the begun attempt ``record`` (the file's writer held) and record how it ended."""
        generation, job_id = taken.generation, taken.job_id
        self.attempts += 1
        if self.task.reconcile is not None:  # its job is observable: key the slots by it
            self._keep_slots_for_job(record.number, "started")
        self.x.emit(AttemptStarted(self.uow_id, self.task.name, self.unit.interval,
                                   record.number, generation, job_id, self.token))
        ctx = self._context(record, generation)
        ctx, failed = self._with_snapshot(ctx, record.number)
        report = failed or call_attempt(
            self.task, ctx, timeout=timeout, isolation=self.x.isolation,
            source_file=self.x.pipeline.source_file,
        )
        _mask_error(report.error)  # before it is recorded, emitted or printed
        self._hold_while_running(report, record.number)
        self._finish(record, report)
        self._slots_after_attempt(report, record.number)
        return report

    def _after_attempt(self, record: AttemptRecord, report: AttemptReport) -> UnitResult | None:
        if self.closed_elsewhere is not None:
            return self._result("leased-elsewhere", self.closed_elsewhere)
        if report.interrupted:
            raise Interrupted(
                f"{self.task.name} for {self.unit.interval.label} was interrupted "
                f"(KeyboardInterrupt) in attempt {record.number}; the attempt is recorded "
                "unknown and is settled from the destination's commit record on the next run"
            )
        return None

    def _hold_while_running(self, report: AttemptReport, number: int) -> None:
        """A timed-out attempt whose thread still runs keeps its pool slots until that thread
        ends: the work really continues, and the pool's dependency is still loaded by it (the
        English lab text: never release local resources while the work remains active)."""
        still = getattr(report.error, "worker", None)
        if not isinstance(still, threading.Thread) or not still.is_alive():
            return
        outliving(self._attempt_key(number), still)  # it may still act: _still_acting
        if self._pool_stack is None:
            return
        self._pool_worker = still
        self.notes.append(
            f"attempt {number} timed out but its thread still runs: its pool slots stay held "
            "until it ends"
        )

    # -- pool slots: held until the work is confirmed ended ------------------------------------
    #
    # An attempt takes its slots before it starts. If it ends (succeeded or failed) they are
    # given back. If its outcome is unknown and a remote job may still run, the slots stay held:
    # in this process while this run observes the job, and in the ledger (a LedgerPool) under a
    # holder keyed by the unit and attempt, with no expiry, so they outlive the run and the
    # process; a task with a ``reconcile`` function has its holding keyed by its job from the
    # attempt's start, so a crash mid-attempt cannot lose it either. The ledger holding is
    # released when the job is confirmed ended (``_reconciled``: succeeded, failed, not found,
    # in this run or a later one), or once an operator resolves the attempt (``twice resolve``:
    # the next acquisition of the pool releases holdings of closed attempts). A pool that is not
    # shared (``shared_pools=False``) has no durable memory: it keeps the slots only while this
    # run observes the job.

    def _take_slots(self) -> UnitResult | None:
        """Hold the task's pool slots for the next attempt (already held: keep them)."""
        pool = self.x.pool_for(self.task)
        if pool is None or self._pool_stack is not None:
            return None
        wait_limit = None if self.deadline is None else self.deadline.remaining()
        stack = contextlib.ExitStack()
        try:
            lease = stack.enter_context(pool.acquire(self.task.slots, wait_limit))
        except PoolHeldByJob as exc:
            return self._held_by_jobs(pool, exc)
        except PoolTimeout as exc:
            return self._not_started(
                f"not started: pool {pool.name!r} had no {self.task.slots} free slot(s) "
                f"before the workflow deadline ({exc})", "pool-capacity",
            )
        self._pool, self._pool_stack, self._pool_lease = pool, stack, lease
        return None

    def _held_by_jobs(self, pool: SlotPool, exc: PoolHeldByJob) -> UnitResult:
        """Refused: the pool's slots are kept for remote jobs that may still run."""
        reason = f"not started: {exc}"
        self.ledger.record_observation(
            self.uow_id, "blocked", source=EXECUTOR_SOURCE,
            detail={"reason": reason, "cause": "pool-held-by-job", "pool": pool.name,
                    "slots": self.task.slots, "jobs": list(exc.jobs), "jobs_hold": exc.slots},
        )
        return self._result("blocked", reason)

    def _keep_slots_for_job(self, number: int, why: str) -> None:
        """Hand the ledger holding to attempt ``number``'s job (shared pools only)."""
        pool, lease = self._pool, self._pool_lease
        if not isinstance(pool, LedgerPool) or not isinstance(lease, LedgerLease):
            return
        if lease.handed.is_set():
            return
        from twice.ledger.lease import job_holder

        key = job_holder(self.uow_id, number)
        if pool.keep_for_job(lease, key):
            self.ledger.record_observation(
                self.uow_id, "pool-held", source=EXECUTOR_SOURCE, attempt=number,
                detail={"pool": pool.name, "slots": lease.slots, "holder": key, "why": why,
                        "released": "when the job is confirmed ended (reconcile) or the "
                                    "attempt is resolved by an operator (twice resolve)"},
            )

    def _slots_after_attempt(self, report: AttemptReport, number: int) -> None:
        """Give the slots back unless the attempt's work may go on (see the section comment)."""
        if report.ending != "unknown":
            self._job_ended(number, kept=self._handed_to_job())
            return
        remote = (
            self.task.reconcile is not None or report.remote is not None
            or isinstance(report.error, OutcomeUnknownError)
            or getattr(report.error, "job_id", None) is not None
        )
        if remote:
            self._keep_slots_for_job(number, "outcome unknown: the job may still run")
            return  # held while this run observes the job
        self._give_back_slots()  # a timed-out thread keeps them (_hold_while_running)

    def _handed_to_job(self) -> bool:
        """Whether this run handed its ledger pool holding to its job (only then is a holding
        keyed by the attempt kept in the ledger)."""
        lease = self._pool_lease
        return isinstance(lease, LedgerLease) and lease.handed.is_set()

    def _job_ended(self, number: int, *, kept: bool = True) -> None:
        """Attempt ``number``'s work is confirmed ended: release what was kept for it
        (``kept=False``: this run knows nothing was, so the ledger is not asked). While the
        attempt's timed-out thread still runs here, its slots are taken back from the job
        instead, and released once that thread ends (``_give_back_slots``)."""
        if kept and self._kept_while_running(number):
            self._give_back_slots()
            return
        released = self.ledger.release_job_pool_slots(self.uow_id, number) if kept else []
        for holding in released:
            self.ledger.record_observation(
                self.uow_id, "pool-released", source=EXECUTOR_SOURCE, attempt=number,
                detail={"pool": holding.pool, "slots": holding.slots,
                        "holder": holding.holder, "basis": "the job is confirmed ended"},
            )
        self._give_back_slots()

    def _kept_while_running(self, number: int) -> bool:
        """Take attempt ``number``'s slots back from its job when its thread still runs."""
        worker, pool, lease = self._pool_worker, self._pool, self._pool_lease
        if (worker is None or not worker.is_alive() or not isinstance(pool, LedgerPool)
                or lease is None):
            return False
        from twice.ledger.lease import job_holder

        taken = pool.take_back_from_job(lease, job_holder(self.uow_id, number))
        if taken:
            self.ledger.record_observation(
                self.uow_id, "pool-kept", source=EXECUTOR_SOURCE, attempt=number,
                detail={"pool": pool.name, "slots": taken, "holder": lease.holder,
                        "basis": "its job is confirmed ended, but the attempt's thread still "
                                 "runs in this process: held until it ends"},
            )
        return bool(taken)

    def _give_back_slots(self) -> None:
        """Leave the ``acquire`` block: local slots freed, the ledger holding too unless it was
        handed to a job; deferred until a timed-out attempt's thread ends."""
        stack, worker = self._pool_stack, self._pool_worker
        self._pool, self._pool_stack, self._pool_lease, self._pool_worker = None, None, None, None
        if stack is None:
            return
        if worker is None or not worker.is_alive():
            stack.close()
            return

        def release_when_done() -> None:
            worker.join()
            stack.close()

        threading.Thread(target=release_when_done, daemon=True,
                         name=f"twice-hold-{self.task.name}").start()

    def _leave_slots(self) -> None:
        """The unit's run ends: slots still held stay with a job that may still run."""
        if self._pool_stack is None:
            return
        try:
            latest = self.ledger.latest_attempt(self.uow_id)
            if latest is not None and latest.outcome in ("unknown", "running"):
                lease = self._pool_lease
                if isinstance(lease, LedgerLease) and not lease.handed.is_set() and (
                    self.task.reconcile is not None
                ):
                    self._keep_slots_for_job(latest.number, "run ended, job not confirmed ended")
        finally:
            self._give_back_slots()

    def _with_snapshot(self, ctx: TaskContext, number: int
                       ) -> tuple[TaskContext, AttemptReport | None]:
        """Attach the unit's input snapshot (taken now if it is the first attempt to need one;
        ``twice.engine.snapshots``). Failing to take it is this attempt's error, classified by
        the task's policy like any other: the source was not read, nothing was written."""
        if self.task.snapshot is None:
            return ctx, None
        try:
            view = snapshots.ensure(self.ledger, self.task, self.x.pipeline.name,
                                    self.unit.interval, root=self.x.snapshot_root)
        except Exception as exc:
            ending = classify(exc, self.task.retry, timeout_is_failure=True)
            return ctx, AttemptReport(ending=ending, error=exc)
        self.ledger.record_observation(
            self.uow_id, "snapshot-read", source=EXECUTOR_SOURCE, attempt=number,
            detail=view.to_detail(),
        )
        return replace(ctx, snapshot=view), None

    def _inputs_changed(self) -> UnitResult | None:
        """Input versions are recomputed before every attempt: if the unit's inputs changed
        since it was identified, this unit stops and the driver identifies the new one."""
        try:
            now = self.x.unit_for(self.task.name, self.unit.interval)
        except Exception:
            return None  # identified moments ago; a failing input_version shows on the next run
        if now.uow_id == self.uow_id:
            return None
        self.superseded = True
        reason = (
            f"inputs changed before the attempt (input version {self.unit.input_version or 'none'}"
            f" -> {now.input_version}): unit {now.uow_id} runs instead"
        )
        self.ledger.record_observation(
            self.uow_id, "superseded", source=EXECUTOR_SOURCE,
            detail={"reason": reason, "by": now.uow_id},
        )
        return self._result("blocked", reason)

    @property
    def _fence_key(self) -> str:
        """The slot every write of this task and interval is fenced on (``WriteStamp``)."""
        return f"{self.unit.pipeline}/{self.unit.task}/{self.unit.interval.label}"

    def _context(self, record: AttemptRecord, generation: int | None) -> TaskContext:
        number = record.number
        recorder = None
        if self.x.isolation == "thread":
            def recorder(event: NonFatal) -> None:
                self.ledger.record_nonfatal(
                    self.uow_id, event.message, count=event.count, attempt=number
                )
        stamp = WriteStamp(
            uow_id=self.uow_id,
            fence_key=self._fence_key,
            generation=generation or 1, attempt=number, token=self.token,
            input_version=self.unit.input_version, began_at=record.started_at.isoformat(),
            ledger=self.ledger.identity, ledger_at=self.ledger.url,
        )
        return self.x.pipeline.context(
            self.task.name, self.unit.interval, attempt=number, generation=generation or 1,
            upstream=self.upstream, params=self.x.params, recorder=recorder, unit=self.unit,
            stamp=stamp,
        )

    def _finish(self, record: AttemptRecord, report: AttemptReport) -> None:
        """Record how the attempt ended. The validate-output step reads the destination first,
        outside any ledger transaction; then one durable write records the partition's new
        version, the attempt's error, outcome, observation and job generation, and gives the
        lease back when the unit succeeded (nothing more is written for it in this run)."""

        number = record.number
        marked_early = (  # a job whose output twice cannot read: say it ran before checking
            report.ending == "succeeded" and record.generation is not None
            and self.task.acceptance is not None and not self.task.owns_output
        )
        if report.nonfatals or marked_early:  # the output check counts the non-fatal errors
            def before_check(ledger: Ledger) -> None:
                for event in report.nonfatals:
                    ledger.record_nonfatal(self.uow_id, event.message, count=event.count,
                                           attempt=number)
                if marked_early:
                    assert record.generation is not None
                    ledger.mark_generation(self.uow_id, record.generation, "succeeded")

            self.ledger.atomic(before_check)
        if report.remote is not None:
            self._record_remote(report.remote, number)
        detail: dict[str, Any] = {"job_id": record.job_id, "generation": record.generation}
        written = getattr(report.written, "commit", None)
        if written is not None:
            detail["commit"] = written.to_dict()
        refused = report.error.refused if isinstance(report.error, AcceptanceFailed) else None
        # the job did, whatever its output (twice refused to land it: it ran to the end)
        job_succeeded = report.ending == "succeeded" or refused == "output"
        check = _Check()
        if isinstance(report.error, AcceptanceFailed) and refused is not None:
            check = self._refused_before_landing(number, report.error, detail)
        elif job_succeeded:
            check = self._check_output(number, report.value, detail,
                                       commit=written, generation=record.generation)
            if check.rejected is not None:
                report = replace(report, ending="permanent", error=check.rejected)
        if report.ending == "unknown":
            detail["why"] = (
                "the attempt timed out or lost its acknowledgement; remote work may continue "
                "(a timed-out thread is not stopped), so the outcome is unknown, not failed"
            )
        release = (self.give_back_lease if report.ending == "succeeded"
                   and not self._handed_to_job() else None)
        if release is not None:
            release.stop_renewing()

        def finish(ledger: Ledger) -> _Ended | None:
            ended = _Ended(report)
            detail.pop("fingerprint", None)
            detail.pop("output_check", None)
            if check.measured is not None:
                try:
                    ended.diff = record_measured(
                        ledger, self.task, self.uow_id, number, check.measured,
                        accept_schema_change=self.x.accept_schema_change,
                    )
                except (SchemaChangeError, LedgerError) as exc:  # not verified
                    _mask_error(exc)
                    detail["output_check"] = f"{type(exc).__name__}: {exc}"
                    ended = _Ended(replace(report, ending="permanent", error=exc), rejected=exc)
                else:
                    detail["fingerprint"] = ended.diff.to_dict()
            if self.task.acceptance is None:  # the acceptance check read it already
                self.nonfatal = self._nonfatal_count(number)
            final, failed = ended.report, ended.report.error
            outcome = attempt_outcome(final.ending)
            if job_succeeded and record.generation is not None and not marked_early:
                ledger.mark_generation(self.uow_id, record.generation, "succeeded")
            if failed is not None:  # recorded first: it stays evidence whatever follows
                ledger.record_exception(
                    self.uow_id, failed, attempt=number, detail={"job_id": record.job_id},
                    classification=_error_classification(final),
                )
            if not self._finish_attempt(ledger, number, outcome, detail):
                return None
            if (
                isinstance(failed, JobFailed) and record.generation is not None
                and failed.job_id == record.job_id
            ):
                ledger.mark_generation(self.uow_id, record.generation, "confirmed-failed")
            ledger.record_observation(
                self.uow_id, outcome, source=EXECUTOR_SOURCE, attempt=number, detail=detail
            )
            if release is not None and outcome == "succeeded":
                ledger.release_lease(self.uow_id, self.x.holder)
                ended.released = True
                # what the loop plans on next, read in this transaction (nothing follows it)
                self._evidence_now = self._evidence()
            return ended

        self.closed_elsewhere = None
        self._evidence_now = None
        try:
            ended = self.ledger.atomic(finish)
        except LedgerError:
            if report.error is not None:  # the attempt's own error stays evidence
                with contextlib.suppress(LedgerError):
                    self.ledger.record_exception(
                        self.uow_id, report.error, attempt=number,
                        detail={"job_id": record.job_id},
                        classification=_error_classification(report))
            raise
        if release is not None:
            if ended is not None and ended.released:
                release.released = True
            else:
                release.resume_renewing()
        if ended is None:  # closed elsewhere
            return
        report = ended.report
        self._emit_checked(number, ended.diff, ended.rejected, check.assertions)
        if report.error is not None:
            self.error = report.error_text
            if _is_schema_refusal(report.error):
                self.x.emit(OutputRejected(self.uow_id, self.task.name, self.unit.interval,
                                           number, redact(str(report.error)),
                                           schema_change=True))
        if report.ending == "succeeded":
            self.value = report.value
        self._emit_finished(number, attempt_outcome(report.ending), report)

    def _nonfatal_count(self, number: int) -> int:
        """Non-fatal errors recorded for attempt ``number`` (read in the caller's transaction
        when there is one)."""
        return sum(record.count for record in self.ledger.nonfatal_errors(self.uow_id)
                   if record.attempt == number)

    def _finish_attempt(self, ledger: Ledger, number: int, outcome: str,
                        detail: dict[str, Any]) -> bool:
        """Record how our attempt ended; False if another holder has already closed it (it
        took our lease over while we were paused): then this run stops, and says so."""

        try:
            ledger.finish_attempt(self.uow_id, number, outcome)  # type: ignore[arg-type]
        except LedgerError:
            current = ledger.attempt(self.uow_id, number)
            if current is None or current.outcome in ("running", "unknown"):
                raise
            self.closed_elsewhere = (
                f"attempt {number} ended {outcome} here, but another holder had already "
                f"closed it as {current.outcome} after taking the lease over: that holder "
                "settles the unit"
            )
            ledger.record_observation(
                self.uow_id, "closed-elsewhere", source=EXECUTOR_SOURCE, attempt=number,
                detail={**detail, "ended_here": outcome, "recorded": current.outcome,
                        "why": self.closed_elsewhere},
            )
            return False
        return True

    def _emit_finished(self, number: int, outcome: str, report: AttemptReport) -> None:
        self.x.emit(AttemptFinished(self.uow_id, self.task.name, self.unit.interval, number,
                                    outcome, report.error_text))

    def _record_remote(self, status: JobStatus, attempt: int) -> None:
        """A JobStatus the task returned is evidence from the service, with its own time."""

        source = f"remote:{status.service}"
        detail = {"job_id": status.job_id, "state": status.state.value}
        try:
            self.ledger.record_observation(
                self.uow_id, status.remote_state().value, source=source,
                observed_at=status.observed_at, attempt=attempt, detail=detail,
            )
        except LedgerError:  # the service's clock is ahead of ours: keep its time as detail
            self.ledger.record_observation(
                self.uow_id, status.remote_state().value, source=source, attempt=attempt,
                detail={**detail, "remote_observed_at": iso(status.observed_at)},
            )
        for error in status.nonfatal_errors:
            self.ledger.record_nonfatal(
                self.uow_id, f"{error.reason}: {error.message}", attempt=attempt,
                detail={"source": source, "job_id": status.job_id, "reason": error.reason},
            )

    def _close_reconciled(self, number: int, job_id: str | None, error_class: str, message: str,
                          basis: str) -> None:
        """An unknown attempt that reconcile showed did not succeed: close it as transient."""
        self.ledger.finish_attempt(self.uow_id, number, "failed-transient")
        self.ledger.record_error(
            self.uow_id, error_class=error_class, message=message, classification="transient",
            attempt=number, detail={"source": "reconcile", "job_id": job_id, "basis": basis},
        )

    def _resolve_unknown(
        self, attempt: AttemptRecord, decision: DecisionResult, evidence: UnitEvidence
    ) -> UnitResult | None:
        """Settle an unknown/running attempt by the settlement rule (``twice.engine.settle``):
        gather the evidence it asks for, then carry out its verdict; a UnitResult if we must
        stop. ``safe_repeat=True`` never settles an unknown outcome (the lab reconciles
        first); ``safe_repeat="same-job-id"`` does, by sending again under the same id."""
        self._record(decision, evidence, job_id=attempt.job_id)
        read = self._read_commit(attempt) if self.task.owns_output else _CommitRead(
            Commit.NOT_OWNED)
        asked: list[ReconcileReport] = []

        def ask_remote() -> RemoteState:
            assert attempt.job_id is not None
            self._wait_for_thread(attempt.number)  # before the service is asked: _still_acting
            polls = max(1, int(self.x.observe_timeout / self.x.poll_interval))
            asked.append(reconcile_attempt(
                self.task, attempt.job_id, self._context(attempt, attempt.generation),
                ledger=self.ledger, attempt=attempt.number, poll_interval=self.x.poll_interval,
                max_polls=polls, sleep=self.x.sleep, deadline=self.deadline,
            ))
            return asked[-1].state

        known = Known(commit=read.state,
                      can_reconcile=self.task.reconcile is not None and attempt.job_id is not None,
                      same_job_id=self.task.repeats_under_job_id)
        settlement = settle(known, ask_remote=ask_remote,
                            still_acting=lambda: self._still_acting(attempt))
        return self._carry_out(settlement, attempt, read, asked[-1] if asked else None, decision)

    def _carry_out(self, settlement: Settlement, attempt: AttemptRecord, read: _CommitRead,
                   report: ReconcileReport | None, decision: DecisionResult
                   ) -> UnitResult | None:
        """Record the settlement's verdict on ``attempt`` (None: the loop plans again)."""
        number, job_id, verdict = attempt.number, attempt.job_id, settlement.verdict
        if verdict is Verdict.WRITTEN:
            self._settle_written(attempt, read)
            return None
        if verdict is Verdict.LEAVE_UNKNOWN:
            return self._result("unknown-needs-reconcile",
                                self._why_unknown(attempt, settlement, read, report))
        if verdict is Verdict.ASK_OPERATOR:
            what = f"job {job_id}" if job_id else "its effects"
            return self._result("unknown-needs-reconcile", (
                f"attempt {number} outcome unknown and twice cannot see the task's effects (no "
                f"owned write, no reconcile function, not safe_repeat='same-job-id'): inspect "
                f"{what}, then record it with `twice resolve {self.uow_id} --as "
                "succeeded|failed --note ...`; not retried"), decision)
        if verdict is Verdict.REMOTE_SUCCEEDED:
            if attempt.generation is not None:
                self.ledger.mark_generation(self.uow_id, attempt.generation, "succeeded")
            self.notes.append(f"reconcile found job {job_id} succeeded: not resubmitted")
            self._reconciled(attempt, "succeeded", f"reconcile({job_id})")
            detail: dict[str, Any] = {"job_id": job_id, "generation": attempt.generation,
                                      "reconcile": True}
            with self._guard():
                rejected = self._verify_now(number, detail, generation=attempt.generation)
            self._close_verified(attempt, rejected, detail, "output check after reconcile")
            return None
        if read.state is Commit.ABSENT:
            self._record_not_written(attempt, read)
        if verdict is Verdict.RETRY_NEW_GENERATION:
            self._reconciled(attempt, "failed", f"reconcile({job_id})")
            self._close_reconciled(
                number, job_id, "twice.engine.reconcile.RemoteJobFailed",
                f"reconcile found job {job_id} finished with an error",
                "confirmed failed: a new generation may be taken",
            )
            if attempt.generation is not None:
                self.ledger.mark_generation(self.uow_id, attempt.generation, "confirmed-failed")
            return None
        assert verdict is Verdict.RETRY_SAME_JOB_ID
        error_class, message, basis = self._not_done(attempt, settlement, read)
        if settlement.proof is Proof.REMOTE_JOB:
            self._reconciled(attempt, str(settlement.remote), f"reconcile({job_id})")
        else:
            self._reconciled(attempt, "not-found", basis)
        self._close_reconciled(number, job_id, error_class, message, basis)
        return None

    def _not_done(self, attempt: AttemptRecord, settlement: Settlement, read: _CommitRead
                  ) -> tuple[str, str, str]:
        """(error class, message, basis) of an unknown attempt closed as not done, to be
        retried under the same job id."""
        number, job_id = attempt.number, attempt.job_id
        if settlement.proof is Proof.SAME_JOB_ID:
            return ("twice.engine.reconcile.SentAgainUnderSameJobId",
                    f"attempt {number}'s effect is sent again under the same job id {job_id}: "
                    "its receiver deduplicates by that id (safe_repeat='same-job-id')",
                    "same job id: the receiver accepts it once")
        if settlement.remote is RemoteState.SUCCEEDED:
            return ("twice.engine.reconcile.OutputNotWritten",
                    f"reconcile found job {job_id} succeeded, but no commit record of attempt "
                    f"{number} is in {self.task.destination}: its output was never written; "
                    "the retry adopts the job by its id (not resubmitted) and writes it",
                    "job adopted by its id; commit record absent: the output is written again")
        if settlement.remote is RemoteState.NOT_FOUND:
            return ("twice.engine.reconcile.RequestNeverArrived",
                    f"no job {job_id}: the request never reached the service",
                    "the same job id may be resubmitted (same generation)")
        return ("twice.engine.reconcile.NoCommitRecord",
                f"no commit record of attempt {number} in {self.task.destination}: its write "
                f"never committed ({_sealing(read.sealed)})",
                "commit record absent: safe to retry")

    def _why_unknown(self, attempt: AttemptRecord, settlement: Settlement, read: _CommitRead,
                     report: ReconcileReport | None) -> str:
        """Why an attempt is left unknown (the result's reason; an observation too where the
        service was asked)."""
        number, job_id = attempt.number, attempt.job_id
        if read.state is Commit.UNREADABLE:
            return (f"attempt {number} outcome unknown and its destination cannot be read to "
                    f"find its commit record ({read.error}); not retried")
        if read.state is Commit.MAY_COMMIT:
            return (f"no commit record of attempt {number} yet, but it may still write: "
                    f"{read.acting}, and this destination cannot be sealed against it; outcome "
                    "left unknown, nothing rewritten (settled on the next run)")
        assert report is not None
        if settlement.acting is not None:
            reason = (
                f"job {job_id} not found, but attempt {number} may still send it: "
                f"{settlement.acting}; outcome left unknown, nothing resubmitted (the service "
                "is asked again on the next run)"
            )
            self.ledger.record_observation(
                self.uow_id, "unknown", source=EXECUTOR_SOURCE, attempt=number,
                detail={"job_id": job_id, "reconcile": "not-found", "why": reason},
            )
            return reason
        waited = format_duration(round(report.polls * self.x.poll_interval * 1_000_000))
        reason = (
            f"job {job_id} still {report.state.value} after {report.polls} look(s) "
            f"over about {waited}: observe it; nothing resubmitted"
        )
        if report.error:
            reason += f" (last reconcile error: {report.error})"
        return reason

    def _attempt_key(self, number: int) -> str:
        """Attempt ``number`` of this unit, as this process remembers its timed-out thread."""
        return f"{self.uow_id}#{number}"

    def _wait_for_thread(self, number: int) -> None:
        """Give attempt ``number``'s timed-out thread in this process (if it still runs) the
        observe budget to end, bounded by the deadline, as a running remote job is observed:
        the service's "not found" settles nothing while the thread can still send. (An owned
        write needs no wait: the seal refuses the thread's late commit.)"""
        worker = still_running(self._attempt_key(number))
        if worker is None:
            return
        budget = self.x.observe_timeout
        if self.deadline is not None:
            budget = min(budget, max(0.0, self.deadline.remaining()))
        worker.join(budget)

    def _still_acting(self, attempt: AttemptRecord) -> str | None:
        """Why ``attempt`` may still make its request, or None: its timed-out thread still
        runs in this process, or its holder is another process of this host that still
        exists (paused past its lease, say). From another host nothing can be seen; there a
        service that refuses a second job of the same id is what prevents a duplicate (the
        same job id is resubmitted)."""
        worker = still_running(self._attempt_key(attempt.number))
        if worker is not None:
            return f"its timed-out thread {worker.name!r} still runs in this process"
        pid = running_elsewhere(attempt.holder, attempt.started_at)
        if pid is not None:
            from twice.core import processes

            return (
                f"its holder {attempt.holder} (process {processes.look(pid).describe()}) "
                "still exists on this host"
            )
        return None

    def _read_commit(self, attempt: AttemptRecord) -> _CommitRead:
        """What the destination says of ``attempt``'s owned write. Before concluding that it
        never committed, the slice is sealed (``_seal``): its writer may be paused, not dead,
        and would otherwise commit after that conclusion. Only twice writes an owned slice
        (a task's remote job never does), so the seal is always right."""
        number = attempt.number
        try:
            commit = self._commit_record(number, attempt.generation)
            marked = commit is None and self._marked(attempt)
            sealed = commit is None and not marked and self._seal(attempt)
            if sealed:  # the attempt can no longer commit: its record (or none) is final
                commit = self._commit_record(number, attempt.generation)
                marked = commit is None and self._marked(attempt)
            later = None if commit is None else self._rewritten_after(commit)
        except Exception as exc:  # the destination cannot be read now: no evidence either way
            return _CommitRead(Commit.UNREADABLE, error=f"{type(exc).__name__}: "
                               f"{_first_line(exc)}")
        if commit is not None or marked:
            return _CommitRead(Commit.PRESENT, commit=commit, later=later)
        acting = None if sealed else self._still_acting(attempt)
        if acting is not None:
            return _CommitRead(Commit.MAY_COMMIT, acting=acting)
        return _CommitRead(Commit.ABSENT, sealed=sealed)

    def _record_not_written(self, attempt: AttemptRecord, read: _CommitRead) -> None:
        """The destination's evidence that ``attempt`` wrote nothing twice owns."""
        self.ledger.record_observation(
            self.uow_id, "not-found", source=self._destination_source, attempt=attempt.number,
            detail={"basis": "no commit record for this attempt: nothing twice owns was "
                             "written", "job_id": attempt.job_id, "sealed": read.sealed},
        )

    @property
    def _destination_source(self) -> str:
        return f"destination:{self.task.destination.partition(':')[0]}"

    def _settle_written(self, attempt: AttemptRecord, read: _CommitRead) -> None:
        """The attempt's commit record (or the unit's marker) is in the destination: it
        succeeded. Verified from the record, or, when a later write has replaced its rows
        since, closed succeeded and run again (``_settle_replaced``)."""
        number, commit = attempt.number, read.commit
        source = self._destination_source
        basis = "commit record found" if commit is not None else (
            "commit record pruned with the table's history (snapshot expiry, log "
            "retention); the unit's marker in the table's metadata names this attempt")
        found: dict[str, Any] = {"basis": basis}
        if commit is not None:
            found["commit"] = commit.to_dict()
            if read.later is not None:
                self._settle_replaced(attempt, commit, read.later, found, source)
                return
        self.ledger.record_observation(
            self.uow_id, "succeeded", source=source, attempt=number, detail=found)
        self._reconciled(attempt, "succeeded", f"{basis} in the destination"
                         if commit is not None else basis)
        if attempt.generation is not None:
            self.ledger.mark_generation(self.uow_id, attempt.generation, "succeeded")
        self.notes.append(
            f"attempt {number}'s write is in the destination ({basis}): it succeeded; "
            "nothing rewritten"
        )
        detail: dict[str, Any] = {"job_id": attempt.job_id, "generation": attempt.generation,
                                  "reconcile": True, **found}
        with self._guard():
            rejected = self._verify_now(number, detail, commit=commit,
                                        generation=attempt.generation)
        self._close_verified(attempt, rejected, detail, "output check after reconcile")

    def _seal(self, attempt: AttemptRecord) -> bool:
        """Seal the slice under a fresh token before concluding that ``attempt`` never
        committed (``Destination.seal``): its process may be paused, not dead, or its timed-out
        thread still running, and would otherwise commit after that conclusion. False where
        the destination cannot seal."""
        from twice.destinations import open_destination
        from twice.destinations.commits import FencedWriteError

        stamp = WriteStamp(
            uow_id=self.uow_id,
            fence_key=self._fence_key,
            generation=attempt.generation or 1, attempt=0,
            token=self.ledger.next_fencing_token(), input_version=self.unit.input_version,
            ledger=self.ledger.identity, ledger_at=self.ledger.url,
        )
        with open_destination(self.task.destination) as dest:
            try:
                return dest.seal(stamp)
            except FencedWriteError:
                return True  # a newer token holds the slice: the attempt cannot commit either

    def _rewritten_after(self, commit: CommitRecord) -> CommitRecord | None:
        """The destination's latest write that replaced ``commit``'s rows since: a later
        replace or upsert of the same slice (fence key). None while they are still there."""
        from twice.destinations import open_destination

        if commit.mode == "append":
            return None  # later appends add rows; they do not take these away
        with open_destination(self.task.destination) as dest:
            later = [record for record in dest.commit_records()
                     if record.fence_key == commit.fence_key and record.token > commit.token
                     and record.mode in ("replace", "upsert")]
        return later[-1] if later else None

    def _settle_replaced(self, attempt: AttemptRecord, commit: CommitRecord,
                         later: CommitRecord, found: dict[str, Any], source: str) -> None:
        """The attempt's write committed (its record proves it), but a later write has
        replaced its rows: the attempt succeeded, its output is gone. It is closed succeeded
        without recording its slice as the partition's version (the slice holds the later
        write's rows), and :meth:`_drive` runs the unit again."""
        number = attempt.number
        found["rewritten_by"] = {"uow_id": later.uow_id, "attempt": later.attempt,
                                 "token": later.token, "committed_at": later.committed_at}
        self.ledger.record_observation(
            self.uow_id, "succeeded", source=source, attempt=number, detail=found)
        self._reconciled(attempt, "succeeded", "commit record found in the destination, "
                         f"rewritten since by unit {later.uow_id}")
        if attempt.generation is not None:
            self.ledger.mark_generation(self.uow_id, attempt.generation, "succeeded")
        self.ledger.finish_attempt(self.uow_id, number, "succeeded")
        self.replaced_by = later
        self.notes.append(
            f"attempt {number}'s write committed (its commit record, token {commit.token}), "
            f"but unit {later.uow_id} rewrote the slice after it (token {later.token}): its "
            "output is gone, so this unit runs again"
        )

    def _verify_now(self, number: int, detail: dict[str, Any], *,
                    commit: CommitRecord | None = None, generation: int | None = None
                    ) -> BaseException | None:
        """The validate-output step for an attempt settled by reconcile: checked, and its
        partition's version recorded at once (the attempt is closed afterwards)."""
        check = self._check_output(number, None, detail, commit=commit, generation=generation)
        if check.measured is None:
            return check.rejected
        try:
            diff = record_measured(self.ledger, self.task, self.uow_id, number, check.measured,
                                   accept_schema_change=self.x.accept_schema_change)
        except Exception as exc:
            _mask_error(exc)
            detail["output_check"] = f"{type(exc).__name__}: {exc}"
            self._emit_checked(number, None, exc)
            return exc
        detail["fingerprint"] = diff.to_dict()
        self._emit_checked(number, diff, None, check.assertions)
        return None

    def _emit_checked(self, number: int, diff: PartitionDiff | None,
                      rejected: BaseException | None, assertions: tuple[Any, ...] = ()) -> None:
        """Tell the listeners how recording the partition's new version went: verified (the
        diff), or rejected (why; a refused schema change says so)."""
        if diff is not None:
            self.diff = diff
            self.x.emit(OutputVerified(self.uow_id, self.task.name, self.unit.interval, number,
                                       self.acceptance, diff, diff.source,
                                       assertions=assertions))
        elif rejected is not None:
            self.x.emit(OutputRejected(
                self.uow_id, self.task.name, self.unit.interval, number, str(rejected),
                schema_change=isinstance(rejected, SchemaChangeError)))

    def _close_verified(self, attempt: AttemptRecord, rejected: BaseException | None,
                        detail: dict[str, Any], during: str) -> None:
        number = attempt.number
        if rejected is None:
            self.ledger.finish_attempt(self.uow_id, number, "succeeded")
        else:
            self.error = f"{type(rejected).__name__}: {rejected}"
            self.ledger.finish_attempt(self.uow_id, number, "failed-permanent")
            self.ledger.record_exception(
                self.uow_id, rejected, classification="permanent", attempt=number,
                detail={"job_id": attempt.job_id, "during": during},
            )
        self.ledger.record_observation(
            self.uow_id, "succeeded" if rejected is None else "failed-permanent",
            source=EXECUTOR_SOURCE, attempt=number, detail=detail,
        )

    def _reconciled(self, attempt: AttemptRecord, state: str, basis: str) -> None:
        self._job_ended(attempt.number)  # confirmed ended: its pool slots are released
        self.x.emit(Reconciled(self.uow_id, self.task.name, self.unit.interval, attempt.number,
                               state, basis, attempt.job_id))

    def _guard(self) -> AbstractContextManager[object]:
        """One writer per embedded destination file, held around an attempt and its checks."""
        return self.x.writers.holding(self.task.destination)

    def _refused_before_landing(self, number: int, failed: AcceptanceFailed,
                                detail: dict[str, Any]) -> _Check:
        """The validate-output step of an attempt whose owned write acceptance refused before
        it committed (``verification.check_before_landing``): nothing landed, so nothing is
        read or recorded of the slice; the verdict goes into ``detail`` and the events as the
        check after the write would have put it."""
        verdict = failed.result
        self.nonfatal = self._nonfatal_count(number)
        self.acceptance = verdict.reasons
        detail["acceptance"] = {"passed": False, "checks": list(verdict.checks),
                                "refused_before_landing": failed.refused}
        self.x.emit(OutputRejected(self.uow_id, self.task.name, self.unit.interval, number,
                                   str(failed), assertions=verdict.assertions))
        return _Check(rejected=failed, assertions=verdict.assertions)

    def _check_output(
        self, number: int, returned: Any, detail: dict[str, Any], *,
        commit: CommitRecord | None = None, generation: int | None = None,
    ) -> _Check:
        """The validate-output step's reads (``twice.engine.verification``): acceptance
        criteria, then the slice's fingerprint (from the commit record when twice owned the
        write), which ``_finish`` records as the partition's next version.

        A rejection comes back as an exception to record; the checks made go into ``detail``
        (the attempt's observation) and the result.
        """
        criteria = self.task.acceptance  # Task checked it is AcceptanceCriteria + destination
        assertions: tuple[Any, ...] = ()  # the criteria checked, as data, for the events
        if criteria is not None:
            # imported only here: twice.define.acceptance loads the destinations (PyArrow)
            from twice.engine.verification import AcceptanceFailed, check_task_output

            self.nonfatal = self._nonfatal_count(number)
            try:
                verdict = check_task_output(
                    criteria, self.task.destination, self.unit.interval, returned,
                    self.nonfatal, landed=self.task.write is not None,
                )
            except Exception as exc:  # the destination cannot be read: not verified
                _mask_error(exc)
                detail["acceptance"] = {"passed": False, "checks": [], "error": str(exc)}
                return _Check(rejected=exc)
            self.acceptance = verdict.checks if verdict.passed else verdict.reasons
            detail["acceptance"] = {"passed": verdict.passed, "checks": list(verdict.checks)}
            assertions = verdict.assertions
            if not verdict.passed:
                failed = AcceptanceFailed(verdict)
                self.x.emit(OutputRejected(self.uow_id, self.task.name, self.unit.interval,
                                           number, str(failed), assertions=assertions))
                return _Check(rejected=failed)
        if not self.task.owns_output:  # nothing twice can read: acceptance was the check
            self.x.emit(OutputVerified(self.uow_id, self.task.name, self.unit.interval, number,
                                       self.acceptance, assertions=assertions))
            return _Check()
        if commit is None:
            commit = self._commit_record(number, generation)
        superseded = self._superseded(commit)
        if superseded is not None:
            detail["superseded"] = superseded
            self.notes.append(superseded)
            return _Check()  # its write happened; the slot already holds a newer writer's rows
        try:
            measured = measure_partition(self.task, self.unit.interval, commit=commit)
        except Exception as exc:
            _mask_error(exc)
            detail["output_check"] = f"{type(exc).__name__}: {exc}"
            self._emit_checked(number, None, exc)
            return _Check(rejected=exc)
        return _Check(measured=measured, assertions=assertions)

    def _superseded(self, commit: CommitRecord | None) -> str | None:
        """A commit of ours that a newer writer of the same slot has already replaced (we were
        paused past our lease after writing): recording its fingerprint as the partition's
        latest version would be false. Checked only when our lease may be lost (cheap path
        otherwise)."""
        if commit is None or not self.lease_lost():
            return None
        from twice.destinations import open_destination
        from twice.destinations.commits import newest_token

        with open_destination(self.task.destination) as dest:
            newest = newest_token(dest.commit_records(), commit.fence_key)
        if newest is None or newest <= commit.token:
            return None
        return (
            f"attempt {commit.attempt}'s write (token {commit.token}) was replaced by a newer "
            f"writer of the slot (token {newest}) before twice recorded it: succeeded, but its "
            "fingerprint is not recorded as the partition's latest version"
        )

    def _marked(self, attempt: AttemptRecord) -> bool:
        """Whether the destination's metadata names ``attempt`` as the unit's last write though
        its commit record is gone (``Destination.marked_attempt``)."""
        from twice.destinations import open_destination

        with open_destination(self.task.destination) as dest:
            marked = dest.marked_attempt(self.uow_id)
        return marked is not None and marked == (attempt.generation or 1, attempt.number)

    def _commit_record(self, number: int, generation: int | None) -> CommitRecord | None:
        """The destination's commit record of attempt ``number`` (this generation), if any,
        written by THIS ledger: the same task and interval is the same unit id under any
        ledger, so after ``twice adopt`` the previous ledger's record of an attempt with the
        same number is that ledger's write, not this attempt's (a record from before ledgers
        had an identity names none and still counts)."""
        from twice.destinations import open_destination

        ours = self.ledger.identity
        with open_destination(self.task.destination) as dest:
            for record in dest.commit_records(self.uow_id):
                if (record.attempt == number and generation in (None, record.generation)
                        and record.ledger in ("", ours)):
                    return record
        return None

    # -- result -------------------------------------------------------------------------------

    def _result(
        self,
        outcome: UnitOutcome,
        reason: str,
        decision: DecisionResult | None = None,
        *,
        decision_name: str | None = None,
        skipped: bool = False,
        planned: tuple[DecisionResult, UnitEvidence] | None = None,
    ) -> UnitResult:
        """The unit's result, with the planner's next decision on the ledger as it is now
        (``planned``: that decision and its evidence, just read, nothing written since)."""
        if planned is None:
            evidence = self._gathered()
            final = plan_unit(evidence)
        else:
            final, evidence = planned
        latest = evidence.latest
        next_decision = final.decision.value if final is not None else (
            decision_name or (decision.decision.value if decision else None)
        )
        return UnitResult(
            task=self.task.name,
            interval=self.unit.interval,
            outcome=outcome,
            reason=reason,
            uow_id=self.uow_id,
            attempts=self.attempts,
            total_attempts=0 if latest is None else latest.number,
            job_id=None if latest is None else latest.job_id,
            generation=None if latest is None else latest.generation,
            next_decision=next_decision,
            error=self.error,
            notes=tuple(self.notes),
            acceptance=self.acceptance,
            nonfatal=self.nonfatal,
            skipped=skipped,
            value=self.value,
            history=AttemptHistory(self.before, evidence.attempts),
        )
