"""The engine: ONE lifecycle for every unit of work, whichever driver chose it.

``twice run``, ``twice worker``, ``twice backfill`` and the Airflow runner only choose which
(task, interval) units run and when; the engine owns the rest, the same way on every path. This
module schedules the units of each interval and hands each to the lifecycle (``claim``, then
``drive``, moved only through ``lifecycle``'s declared transitions; docs/architecture.md, "The
lifecycle as a state machine"). The protocol, described once in docs/architecture.md ("One
lifecycle for every unit of work"): identify the unit (its input version covers its upstream
outputs, ``identify_unit``), claim its lease (with a fencing token), hold it if it is an
already-succeeded task not ``safe_repeat``, plan each attempt with the lab planner on ledger
evidence, run the attempt under its write stamp (owned writes commit a commit record with their
rows), verify (acceptance, then the slice's fingerprint recorded) before recording success,
settle unknown outcomes (commit record first, then the task's ``reconcile`` by the attempt's own
job id, else the operator), and emit typed events (``twice.engine.events``).

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
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import Executor as FuturesExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from twice.core.backoff import jittered_delay
from twice.core.interval import Interval
from twice.core.secrets import redact
from twice.core.unit import UnitOfWork
from twice.define.pipeline import Pipeline, Task
from twice.define.schedule import refuse_open_intervals
from twice.engine import snapshots
from twice.engine.attempt import Isolation
from twice.engine.claim import claim_and_drive
from twice.engine.eventlog import log_event
from twice.engine.events import Event, Listener, UnitSettled
from twice.engine.evidence import EXECUTOR_SOURCE
from twice.engine.leases import Renewals, default_holder
from twice.engine.phase import first_line
from twice.engine.pool import LedgerPool, Pool, SlotPool
from twice.engine.results import (
    AttemptHistory,
    RunResult,
    UnitResult,
    attempts_of_run,
    earlier_success,
    latest_attempt_before,
    unsettled,
)
from twice.engine.slots import FileWriters
from twice.engine.timeouts import Deadline
from twice.engine.units import identify_unit, overwritten_by
from twice.ledger.errors import LedgerError

if TYPE_CHECKING:
    from twice.ledger import Ledger

__all__ = [
    "AttemptHistory", "Executor", "FileWriters", "RunResult", "UnitResult", "attempts_of_run",
    "default_holder", "earlier_success", "identify_unit", "latest_attempt_before",
    "overwritten_by", "unsettled",
]

Clock = Callable[[], datetime]
Sleep = Callable[[float], None]
T = TypeVar("T")


class _InThread(FuturesExecutor):
    """A pool of one that runs each submitted call at once, in the calling thread; its
    future is already done (see ``unit_threads``)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed on by future.result(), as a pool's would be
            future.set_exception(exc)
        return future


def unit_threads(max_workers: int) -> FuturesExecutor:
    """Where the units of one ``Executor.run`` execute. On the main thread, a pool: the main
    thread stays free for signals (a unit's task may block in C code for minutes), and the
    pool lives for the whole run, not an interval (a thread started and joined per unit cost
    about half a millisecond a unit). In a driver's worker thread (a backfill's interval), no
    signal lands, so with one worker the units run in that thread."""
    if max_workers == 1 and threading.current_thread() is not threading.main_thread():
        return _InThread()
    return ThreadPoolExecutor(max_workers, thread_name_prefix="twice-unit")


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
    ``accept_schema_change`` lets a verified output change its destination's schema, and its
    owned writes to a SQL table add the output's new nullable columns (``WriteStamp.
    add_columns``). How a
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
        kept = [task.name for task in pipeline if task.intermediate is not None]
        if isolation == "process" and kept:
            raise ValueError(f"isolation='process' cannot run task {kept[0]!r} (intermediate=): "
                             "its reuse is decided and recorded in the ledger, which a child "
                             "process does not hold; use isolation='thread'")
        # an invalid definition (slots over a pool's capacity, a cycle, ...) is refused here,
        # listing every problem, as load_pipeline refuses it, not mid-run from deep inside
        pipeline.validate()
        self.pipeline = pipeline
        self._advised = False  # timeout advice is given once per executor (``_advise``)
        self.ledger = ledger
        self.holder = holder or default_holder()
        self._clock: Clock = clock or ledger.now
        self._injected_clock = clock is not None
        self._sleep: Sleep = sleep or time.sleep
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self.max_workers = max_workers
        self.lease_ttl = lease_ttl
        self.renewals = Renewals()  # one thread renews the leases of every unit it runs
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
        """Log ``event`` (``twice.engine.eventlog``, logger ``twice.engine``), then hand it to
        every listener; a failing listener never changes the outcome."""
        with contextlib.suppress(Exception):
            log_event(event, self.pipeline.name)
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

    def _advise(self) -> None:
        """Timeouts far above what the tasks' attempts take, as warnings (once per text:
        the CLI prints them as ``warning: ...``); never a refusal."""
        if self._advised:
            return
        self._advised = True
        import warnings

        from twice.define.load import DefinitionWarning
        from twice.engine.timeout_advice import timeout_advice

        for line in timeout_advice(self.pipeline, self.ledger):
            warnings.warn(line, DefinitionWarning, stacklevel=3)

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
        self._advise()
        plan = self.pipeline
        if tasks is not None:
            names = [tasks] if isinstance(tasks, str) else list(tasks)
            plan = self.pipeline.subset(names, with_dependents=False)
        order = plan.topological_order()
        started = self.now()
        self._began = started
        results: list[UnitResult] = []
        with unit_threads(self.max_workers) as workers:
            for interval in canonical:
                results.extend(self._run_interval(plan, order, interval, workers))
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
        self, plan: Pipeline, order: list[str], interval: Interval, workers: FuturesExecutor
    ) -> list[UnitResult]:
        deadline, wall_deadline = self._workflow_deadline()
        done: dict[str, UnitResult] = {}
        pending = list(order)
        running: dict[Future[UnitResult], str] = {}
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
                result, superseded = claim_and_drive(
                    self, task, interval, upstream, deadline, wall_deadline
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
                    f"{first_line(exc)}); {settles}",
                    error=f"{type(exc).__name__}: {first_line(exc)}", ledger_failed=True,
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

    # -- pools and helpers used by a unit's run ---------------------------------------------------

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


def _sqlalchemy_error() -> type[Exception]:
    from sqlalchemy.exc import SQLAlchemyError

    return SQLAlchemyError


