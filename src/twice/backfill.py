"""Backfills: run a range of intervals in order, verify every partition written, rerun dependents.

Steps 5 and 6 of the protocol: intervals start in order with at most ``concurrency`` in flight;
after each interval every destination partition the tasks wrote is fingerprinted inside the
engine and compared with the ledger's previous version of that partition, and the difference
(rows before/after, checksum changed or not, schema changed or not) is recorded as the next
fingerprint version and reported. Dependents of the backfilled tasks are rerun for the same
intervals, because a table backfilled without its consumers leaves the warehouse inconsistent.

Resume: a unit of work (its id covers the input version and transform version) is *verified*
when it has a succeeded attempt, the latest fingerprint of its partition was recorded by that
same unit, and the partition still has that fingerprint now. Verified units are skipped unless
``force``; a changed source gives a new input version, hence a new unit, so it is never skipped
as an "equivalent" rerun. A task whose upstream ran in this backfill always runs.

Execution goes through :func:`run_unit`, a thin adapter (attempt bookkeeping, transient
retries, reconciliation of unknown outcomes, acceptance) used until ``twice.executor`` offers
an equivalent that also returns what was written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from twice.interval import Interval
from twice.pipeline import Pipeline, RemoteState, Task
from twice.remote.jobs import JobFailed, OutcomeUnknown

if TYPE_CHECKING:
    from twice.destinations.columns import Schema
    from twice.ledger import Ledger
    from twice.unit_of_work import UnitOfWork

Action = Literal["run", "skip"]
Status = Literal["succeeded", "failed", "skipped", "blocked", "refused"]
EventSink = Callable[[str, Mapping[str, Any]], None]


class BackfillError(ValueError):
    """The backfill request itself is invalid (unknown task, empty range...)."""


class SchemaChangeError(RuntimeError):
    """A destination's schema differs inside the backfill range and the change was not accepted."""


class OutcomeUnknownError(Exception):
    """Raised by a task when it cannot tell whether its write/job happened (lost ack, timeout).

    The adapter never blindly retries it: it asks ``task.reconcile(job_id, ctx)`` first.
    """


def partition_key(interval: Interval) -> str:
    """The ledger's partition name for an interval's slice (stable, ``START/END``)."""
    return interval.label


def schema_signature(schema: Schema | None) -> str:
    """Order-sensitive text of a destination's columns and types, stored with fingerprints."""
    if schema is None:
        return ""
    return ", ".join(f"{name} {ctype}" for name, ctype in schema.items())


# ------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class PartitionDiff:
    """One partition's new fingerprint against its previous recorded version."""

    task: str
    destination: str
    partition: str
    version: int
    rows_before: int | None
    rows_after: int
    checksum_before: str | None
    checksum_after: str
    schema_changed: bool | None

    @property
    def checksum_changed(self) -> bool | None:
        return None if self.checksum_before is None else self.checksum_before != self.checksum_after

    @property
    def verdict(self) -> str:
        if self.rows_before is None:
            return "new"
        if self.schema_changed:
            return "schema changed"
        if self.checksum_changed or self.rows_before != self.rows_after:
            return "changed"
        return "unchanged"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task, "destination": self.destination, "partition": self.partition,
            "version": self.version, "rows_before": self.rows_before,
            "rows_after": self.rows_after, "checksum_before": self.checksum_before,
            "checksum_after": self.checksum_after, "checksum_changed": self.checksum_changed,
            "schema_changed": self.schema_changed, "verdict": self.verdict,
        }


@dataclass
class TaskRun:
    """What happened to one unit of work in this backfill (or why it did not run)."""

    task: str
    interval: Interval
    uow_id: str
    input_version: str
    status: Status
    reason: str = ""
    attempts: list[tuple[int, str]] = field(default_factory=list)
    reconciled: list[str] = field(default_factory=list)
    acceptance: tuple[str, ...] = ()
    nonfatal: int = 0
    duration: float = 0.0
    diff: PartitionDiff | None = None
    new_input_version: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task, "interval": self.interval.label, "uow_id": self.uow_id,
            "input_version": self.input_version, "status": self.status, "reason": self.reason,
            "attempts": [{"number": n, "outcome": o} for n, o in self.attempts],
            "reconciled": self.reconciled, "acceptance": list(self.acceptance),
            "nonfatal": self.nonfatal, "duration_s": round(self.duration, 3),
            "new_input_version": self.new_input_version,
            "diff": None if self.diff is None else self.diff.to_dict(),
        }


@dataclass(frozen=True)
class PlanItem:
    """One (interval, task) of a backfill plan: run it or skip it, and why."""

    interval: Interval
    task: str
    uow: UnitOfWork
    action: Action
    reason: str
    new_input_version: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval": self.interval.label, "task": self.task, "uow_id": self.uow.uow_id,
            "input_version": self.uow.input_version, "action": self.action,
            "reason": self.reason, "new_input_version": self.new_input_version,
        }


@dataclass(frozen=True)
class BackfillPlan:
    """Intervals x tasks (requested tasks plus their dependents, in dependency order)."""

    pipeline: str
    intervals: tuple[Interval, ...]
    tasks: tuple[str, ...]
    dependents: tuple[str, ...]
    items: tuple[PlanItem, ...]
    force: bool

    def for_interval(self, interval: Interval) -> list[PlanItem]:
        return [item for item in self.items if item.interval == interval]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline, "intervals": [i.label for i in self.intervals],
            "tasks": list(self.tasks), "dependents": list(self.dependents),
            "force": self.force, "items": [item.to_dict() for item in self.items],
        }


@dataclass
class BackfillResult:
    """Everything a backfill did, in plan order; ``ok`` only if nothing failed or was refused."""

    plan: BackfillPlan
    runs: list[TaskRun]
    elapsed: float = 0.0
    refusal: str | None = None

    @property
    def ok(self) -> bool:
        return self.refusal is None and all(
            r.status in ("succeeded", "skipped") for r in self.runs
        )

    @property
    def diffs(self) -> list[PartitionDiff]:
        return [r.diff for r in self.runs if r.diff is not None]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.status] = counts.get(run.status, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "refusal": self.refusal, "elapsed_s": round(self.elapsed, 3),
            "counts": self.counts(), "plan": self.plan.to_dict(),
            "runs": [r.to_dict() for r in self.runs],
            "new_input_versions": [
                r.uow_id for r in self.runs if r.new_input_version and r.status != "skipped"
            ],
        }


# ------------------------------------------------------------------------------- planning


def selected_tasks(pipeline: Pipeline, tasks: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(tasks to run in dependency order, the dependents among them added by the backfill)."""
    order = pipeline.topological_order()
    if not tasks:
        return order, []
    for name in tasks:
        pipeline.get_task(name)  # PipelineError with a suggestion for unknown names
    dependents = pipeline.dependents_of(tasks) - set(tasks)
    chosen = set(tasks) | dependents
    return [n for n in order if n in chosen], [n for n in order if n in dependents]


def _verified(ledger: Ledger, pipeline: Pipeline, task: Task, uow: UnitOfWork,
              interval: Interval) -> tuple[bool, str]:
    """Whether ``uow`` already succeeded and its partition still holds what it recorded."""
    if ledger.unit(uow.uow_id) is None:
        return False, "not run with this input and transform version"
    outcomes = [a.outcome for a in ledger.attempts(uow.uow_id)]
    if "succeeded" not in outcomes:
        return False, "no succeeded attempt for this unit of work"
    if not task.destination:
        return True, "succeeded before with the same input and transform version"
    recorded = ledger.latest_fingerprint(task.destination, partition_key(interval))
    if recorded is None or recorded.uow_id != uow.uow_id:
        return False, "partition's latest fingerprint was written by another unit of work"
    current = _fingerprint(task.destination, interval, recorded.columns)
    if current is None or (current.row_count, current.checksum) != (
        recorded.row_count, recorded.checksum
    ):
        return False, "partition no longer matches its recorded fingerprint"
    return True, f"verified: same unit of work, fingerprint v{recorded.version} still matches"


def plan_backfill(
    pipeline: Pipeline,
    ledger: Ledger,
    intervals: Iterable[Interval],
    *,
    tasks: Sequence[str] | None = None,
    force: bool = False,
) -> BackfillPlan:
    """Decide, without writing anything, which units of work a backfill runs or skips.

    A skip assumes upstream units are skipped too; at run time a task whose upstream ran in
    this backfill is run even if it was planned as a skip.
    """
    spans = tuple(pipeline.schedule.canonical(i) for i in intervals)
    if not spans:
        raise BackfillError("the backfill range holds no interval")
    names, dependents = selected_tasks(pipeline, tasks)
    items: list[PlanItem] = []
    known_inputs: dict[tuple[str, str], set[str]] = {}
    for unit in ledger.units(pipeline=pipeline.name):
        known_inputs.setdefault((unit.task, unit.interval.label), set()).add(unit.input_version)
    for interval in spans:
        upstream_runs: set[str] = set()
        for name in names:
            task = pipeline.get_task(name)
            uow = pipeline.unit_of_work(name, interval)
            seen = known_inputs.get((name, interval.label), set())
            new_input = bool(seen) and uow.input_version not in seen
            ran_upstream = sorted(set(task.depends_on) & upstream_runs)
            if force:
                action, reason = "run", "--force"
            elif ran_upstream:
                action, reason = "run", f"upstream {', '.join(ran_upstream)} reruns"
            else:
                ok, reason = _verified(ledger, pipeline, task, uow, interval)
                action = "skip" if ok else "run"
                if new_input:
                    reason = f"source changed: new input version {uow.input_version}"
            if action == "run":
                upstream_runs.add(name)
            items.append(PlanItem(interval, name, uow, action, reason, new_input))
    return BackfillPlan(pipeline.name, spans, tuple(names), tuple(dependents), tuple(items),
                        force)


# ------------------------------------------------------------------------------- execution


def schema_conflicts(pipeline: Pipeline, ledger: Ledger, plan: BackfillPlan) -> list[str]:
    """Destinations whose schema is not one and the same across the range (checked up front).

    Compares the schema signatures recorded with the latest fingerprint of every partition in
    the range with each other and with the table's current schema (e.g. after a migration).
    """
    from twice.destinations import open_destination

    problems = []
    for name in plan.tasks:
        spec = pipeline.get_task(name).destination
        if not spec:
            continue
        recorded = {}
        for interval in plan.intervals:
            record = ledger.latest_fingerprint(spec, partition_key(interval))
            if record is not None and record.schema is not None:
                recorded.setdefault(record.schema, interval.label)
        if not recorded:
            continue
        with open_destination(spec) as dest:
            current = dest.schema()
        signatures = set(recorded)
        if current is not None:
            signatures.add(schema_signature(current))
        if len(signatures) > 1:
            shown = "; ".join(f"[{sig}]" for sig in sorted(signatures))
            problems.append(
                f"{spec}: schema differs across the backfill range ({shown}); a backfill across "
                "a schema change must apply the new schema to every interval of the range: "
                "rerun with --accept-schema-change to rewrite every interval"
            )
    return problems


def _fingerprint(spec: str, interval: Interval, columns: Sequence[str] | None = None) -> Any:
    """The partition's current fingerprint, or None when the table does not exist yet."""
    from twice.destinations import open_destination
    from twice.fingerprint import fingerprint

    dest = open_destination(spec)
    try:
        if dest.schema() is None:
            return None
        return fingerprint(dest, interval, list(columns) if columns else None)
    finally:
        dest.close()


def record_partition(ledger: Ledger, task: Task, uow_id: str, attempt: int | None,
                     interval: Interval, *, accept_schema_change: bool = False) -> PartitionDiff:
    """Fingerprint the partition ``task`` wrote for ``interval``, record it, return the diff.

    Raises :class:`SchemaChangeError` (recording nothing) when the schema signature differs
    from the previous version's and the change was not accepted.
    """
    from twice.destinations import open_destination
    from twice.fingerprint import fingerprint

    partition = partition_key(interval)
    before = ledger.latest_fingerprint(task.destination, partition)
    dest = open_destination(task.destination)
    try:
        signature = schema_signature(dest.schema())
        current = fingerprint(dest, interval)
    finally:
        dest.close()
    schema_changed = None
    if before is not None and before.schema is not None:
        schema_changed = before.schema != signature
        if schema_changed and not accept_schema_change:
            raise SchemaChangeError(
                f"{task.destination} partition {partition}: schema changed from "
                f"[{before.schema}] to [{signature}]; a backfill across a schema change must "
                "apply the new schema to every interval of the range (--accept-schema-change)"
            )
    record = ledger.record_fingerprint(
        task.destination, partition, current.row_count, current.checksum, uow_id=uow_id,
        attempt=attempt, columns=current.columns, algorithm=current.algorithm, schema=signature,
    )
    return PartitionDiff(
        task=task.name, destination=task.destination, partition=partition,
        version=record.version,
        rows_before=None if before is None else before.row_count, rows_after=current.row_count,
        checksum_before=None if before is None else before.checksum,
        checksum_after=current.checksum, schema_changed=schema_changed,
    )


def _acceptance(task: Task, interval: Interval, value: Any, nonfatal: int) -> tuple[bool, tuple]:
    from twice.acceptance import AcceptanceCriteria, evaluate, observe

    criteria = task.acceptance
    if not isinstance(criteria, AcceptanceCriteria) or not task.destination:
        return True, ()
    from twice.destinations import open_destination

    rejected = value.get("rejected_rows") if isinstance(value, Mapping) else None
    dest = open_destination(task.destination)
    try:
        outcome = observe(dest, interval, criteria, rejected_rows=rejected,
                          nonfatal_errors=nonfatal)
    finally:
        dest.close()
    result = evaluate(criteria, outcome)
    return result.passed, result.reasons or result.checks


def run_unit(
    pipeline: Pipeline,
    ledger: Ledger,
    task_name: str,
    interval: Interval,
    *,
    uow: UnitOfWork | None = None,
    params: Mapping[str, Any] | None = None,
    holder: str = "twice-backfill",
    sleep: Callable[[float], None] = time.sleep,
    emit: EventSink | None = None,
) -> TaskRun:
    """Run one unit of work with the task's retry policy, recording every attempt.

    Only errors the policy lists as transient are retried (after its backoff). An
    :class:`OutcomeUnknownError`, a ``TimeoutError`` or one of ``twice.remote``'s unknown
    outcomes (lost acknowledgement, 5xx answer to a submit) is reconciled through
    ``task.reconcile`` with the same job id before anything else: SUCCEEDED ends the unit,
    NOT_FOUND retries the same generation, FAILED takes a new one; without a reconciler the
    unit stays unknown. A ``JobFailed`` for the attempt's own job is a confirmed failure too:
    its retry takes a new generation (the same id would only find the failed job again).
    """
    task = pipeline.get_task(task_name)
    uow = uow or pipeline.unit_of_work(task_name, interval)
    ledger.record_unit(uow)
    run = TaskRun(task_name, uow.interval, uow.uow_id, uow.input_version, "failed")
    policy = task.retry
    generation = 1
    started = time.monotonic()
    tries = 0
    while True:
        tries += 1
        attempt = ledger.begin_attempt(uow.uow_id, holder=holder, generation=generation)
        ctx = pipeline.context(task_name, uow.interval, attempt=attempt.number,
                               generation=generation, params=params, unit=uow)
        outcome: str
        try:
            value = task.fn(ctx)
        except (OutcomeUnknownError, TimeoutError, OutcomeUnknown) as exc:
            ledger.record_exception(uow.uow_id, exc, classification="unknown",
                                    attempt=attempt.number)
            state = _reconcile(task, ctx)
            run.reconciled.append(f"{ctx.job_id}: {state.value}")
            _emit(emit, "reconciled", task=task_name, interval=uow.interval.label,
                  job_id=ctx.job_id, state=state.value, attempt=attempt.number)
            if state is RemoteState.SUCCEEDED:
                value = {}
            else:
                outcome = "failed-transient" if state is not RemoteState.UNKNOWN else "unknown"
                if state is RemoteState.UNKNOWN:
                    ledger.finish_attempt(uow.uow_id, attempt.number, "unknown")
                    run.attempts.append((attempt.number, "unknown"))
                    run.reason = f"outcome unknown for job {ctx.job_id}; reconcile later"
                    break
                ledger.finish_attempt(uow.uow_id, attempt.number, "failed-transient")
                run.attempts.append((attempt.number, "failed-transient"))
                if state is RemoteState.FAILED:
                    generation += 1
                if not policy.allows_another(tries):
                    run.reason = f"attempts exhausted after {tries}"
                    break
                continue
        except Exception as exc:
            transient = policy.is_transient(exc)
            outcome = "failed-transient" if transient else "failed-permanent"
            ledger.record_exception(uow.uow_id, exc,
                                    classification="transient" if transient else "permanent",
                                    attempt=attempt.number)
            ledger.finish_attempt(uow.uow_id, attempt.number, outcome)  # type: ignore[arg-type]
            run.attempts.append((attempt.number, outcome))
            if isinstance(exc, JobFailed) and exc.job_id == ctx.job_id:
                generation += 1
            _emit(emit, "attempt-failed", task=task_name, interval=uow.interval.label,
                  attempt=attempt.number, error=f"{type(exc).__name__}: {exc}",
                  transient=transient)
            if transient and policy.allows_another(tries):
                sleep(policy.backoff_after(tries))
                continue
            run.reason = f"{type(exc).__name__}: {exc}"
            break
        nonfatal = 0
        for event in ctx.nonfatals:
            ledger.record_nonfatal(uow.uow_id, event.message, count=event.count,
                                   attempt=attempt.number)
            nonfatal += event.count
        accepted, notes = _acceptance(task, uow.interval, value, nonfatal)
        run.acceptance, run.nonfatal = tuple(notes), nonfatal
        if not accepted:
            ledger.finish_attempt(uow.uow_id, attempt.number, "failed-permanent")
            run.attempts.append((attempt.number, "failed-permanent"))
            run.reason = "acceptance failed: " + "; ".join(notes)
            break
        ledger.finish_attempt(uow.uow_id, attempt.number, "succeeded")
        run.attempts.append((attempt.number, "succeeded"))
        run.status = "succeeded"
        break
    run.duration = time.monotonic() - started
    return run


def _reconcile(task: Task, ctx: Any) -> RemoteState:
    if task.reconcile is None:
        return RemoteState.UNKNOWN
    try:
        return RemoteState.parse(task.reconcile(ctx.job_id, ctx))
    except Exception:  # a reconciler that cannot answer gives no evidence either way
        return RemoteState.UNKNOWN


def _emit(sink: EventSink | None, kind: str, **data: Any) -> None:
    if sink is not None:
        sink(kind, data)


class _Locks:
    """One lock per destination file: embedded engines take one writer at a time."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def for_spec(self, spec: str) -> threading.Lock:
        key = spec.split("?", 1)[0].split("#", 1)[0] or "-"
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


def run_backfill(
    pipeline: Pipeline,
    ledger: Ledger,
    intervals: Iterable[Interval],
    *,
    tasks: Sequence[str] | None = None,
    concurrency: int = 1,
    force: bool = False,
    accept_schema_change: bool = False,
    params: Mapping[str, Any] | None = None,
    emit: EventSink | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> BackfillResult:
    """Backfill ``intervals`` (in order, ``concurrency`` in flight) and verify every partition.

    ``accept_schema_change`` implies ``force``: the new schema is applied to every interval of
    the range, never to some of them. A refused schema change stops new intervals from
    starting; intervals already running finish.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise BackfillError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    force = force or accept_schema_change
    plan = plan_backfill(pipeline, ledger, intervals, tasks=tasks, force=force)
    locks = _Locks()
    stop = threading.Event()
    refusal: list[str] = []
    if not accept_schema_change:
        conflicts = schema_conflicts(pipeline, ledger, plan)
        if conflicts:
            refusal.append(conflicts[0])
            stop.set()
    started = time.monotonic()

    def one_interval(interval: Interval) -> list[TaskRun]:
        runs: list[TaskRun] = []
        ran: set[str] = set()
        bad: set[str] = set()
        _emit(emit, "interval-started", interval=interval.label)
        for item in plan.for_interval(interval):
            task = pipeline.get_task(item.task)
            blocked = sorted(set(task.depends_on) & bad)
            upstream = set(task.depends_on) & ran
            base = TaskRun(item.task, interval, item.uow.uow_id, item.uow.input_version,
                           "skipped", item.reason, new_input_version=item.new_input_version)
            if blocked or stop.is_set():
                base.status = "blocked"
                base.reason = (f"upstream {', '.join(blocked)} did not succeed" if blocked
                               else "backfill stopped: " + (refusal[0] if refusal else ""))
                bad.add(item.task)
            elif item.action == "skip" and not upstream:
                pass
            else:
                with locks.for_spec(task.destination):
                    run = run_unit(pipeline, ledger, item.task, interval, uow=item.uow,
                                   params=params, sleep=sleep, emit=emit)
                    run.new_input_version = item.new_input_version
                    if run.status == "succeeded" and task.destination:
                        try:
                            run.diff = record_partition(
                                ledger, task, run.uow_id, run.attempts[-1][0], interval,
                                accept_schema_change=accept_schema_change,
                            )
                        except SchemaChangeError as exc:
                            run.status, run.reason = "refused", str(exc)
                            refusal.append(str(exc))
                            stop.set()
                run.reason = run.reason or item.reason
                if run.status != "succeeded" and _is_schema_error(run.reason):
                    run.status = "refused"
                    message = (f"{task.destination}: {run.reason}; a backfill across a schema "
                               "change must apply the new schema to every interval of the "
                               "range (migrate the table, then --accept-schema-change)")
                    refusal.append(message)
                    stop.set()
                base = run
                if run.status == "succeeded":
                    ran.add(item.task)
                else:
                    bad.add(item.task)
            runs.append(base)
            _emit(emit, "task-finished", **base.to_dict())
        failed = any(r.status in ("failed", "refused", "blocked") for r in runs)
        _emit(emit, "interval-finished", interval=interval.label, failed=failed)
        return runs

    results: dict[Interval, list[TaskRun]] = {}
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="twice-bf") as pool:
        pending: dict[Future[list[TaskRun]], Interval] = {}
        queue = list(plan.intervals)
        while queue or pending:
            while queue and len(pending) < concurrency:
                interval = queue.pop(0)
                pending[pool.submit(one_interval, interval)] = interval
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                results[pending.pop(future)] = future.result()
    runs = [run for interval in plan.intervals for run in results.get(interval, [])]
    return BackfillResult(plan, runs, time.monotonic() - started,
                          refusal[0] if refusal else None)


def _is_schema_error(reason: str) -> bool:
    return reason.startswith("SchemaError:")
