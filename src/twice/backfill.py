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

Execution is ``twice.executor``'s, so a backfill keeps every promise ``twice run`` makes: a
lease per unit (two backfills started at once execute each unit once; the other one says who
holds it), unknown outcomes left by an earlier run reconciled by the same job id before anything
else, only declared-transient errors retried and only when repeating is asserted safe, the
acceptance criteria checked, timeouts, pools and a deadline. The fingerprint of each partition
is the executor's ``check_output``: it is taken before the attempt is recorded succeeded, so a
refused schema change fails the unit and its dependents do not run on it.

Deadlines. The intervals of a backfill are past: their delivery deadlines are history and
planning against them would refuse every attempt. A backfill plans against its own
``deadline`` (one instant for the whole range) or none.

Reruns. A unit planned to run although it succeeded before (``--force``, a partition that no
longer matches its fingerprint, an upstream that reruns) is handed to the executor as a rerun
of the attempt the plan saw: if another process reran it after the plan, that newer success
stands and the unit is not executed again.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from twice.interval import Interval
from twice.pipeline import OutcomeUnknownError, Pipeline, Task

if TYPE_CHECKING:
    from twice.destinations.columns import Schema
    from twice.executor import UnitResult
    from twice.ledger import AttemptRecord, Ledger
    from twice.unit_of_work import UnitOfWork

__all__ = [
    "BackfillError", "BackfillPlan", "BackfillResult", "OutcomeUnknownError", "PartitionDiff",
    "PlanItem", "SchemaChangeError", "TaskRun", "plan_backfill", "record_partition",
    "run_backfill",
]

Action = Literal["run", "skip"]
Status = Literal["succeeded", "failed", "skipped", "blocked", "refused", "leased-elsewhere"]
EventSink = Callable[[str, Mapping[str, Any]], None]


class BackfillError(ValueError):
    """The backfill request itself is invalid (unknown task, empty range...)."""


class SchemaChangeError(RuntimeError):
    """A destination's schema differs inside the backfill range and the change was not accepted."""


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
    """What happened to one unit of work in this backfill (or why it did not run).

    ``attempts`` are the ledger's attempts this backfill made or resolved (an unknown attempt
    of an earlier run that it reconciled included), ``outcome`` the executor's word for the
    unit, ``duration`` the seconds its attempts took.
    """

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
    outcome: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task, "interval": self.interval.label, "uow_id": self.uow_id,
            "input_version": self.input_version, "status": self.status, "reason": self.reason,
            "outcome": self.outcome,
            "attempts": [{"number": n, "outcome": o} for n, o in self.attempts],
            "reconciled": self.reconciled, "acceptance": list(self.acceptance),
            "nonfatal": self.nonfatal, "duration_s": round(self.duration, 3),
            "new_input_version": self.new_input_version, "notes": list(self.notes),
            "diff": None if self.diff is None else self.diff.to_dict(),
        }


@dataclass(frozen=True)
class PlanItem:
    """One (interval, task) of a backfill plan: run it or skip it, and why.

    ``latest_attempt`` is the unit's latest attempt number when the plan was made: a success
    recorded after it (by another process) is not repeated.
    """

    interval: Interval
    task: str
    uow: UnitOfWork
    action: Action
    reason: str
    new_input_version: bool = False
    latest_attempt: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval": self.interval.label, "task": self.task, "uow_id": self.uow.uow_id,
            "input_version": self.uow.input_version, "action": self.action,
            "reason": self.reason, "new_input_version": self.new_input_version,
            "latest_attempt": self.latest_attempt,
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


def _verified(ledger: Ledger, task: Task, uow: UnitOfWork, interval: Interval,
              attempts: Sequence[AttemptRecord]) -> tuple[bool, str]:
    """Whether ``uow`` already succeeded (``attempts`` are its recorded ones) and its partition
    still holds what it recorded."""
    if ledger.unit(uow.uow_id) is None:
        return False, "not run with this input and transform version"
    if not any(a.outcome == "succeeded" for a in attempts):
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
            recorded = ledger.attempts(uow.uow_id)
            seen = known_inputs.get((name, interval.label), set())
            new_input = bool(seen) and uow.input_version not in seen
            ran_upstream = sorted(set(task.depends_on) & upstream_runs)
            if force:
                action, reason = "run", "--force"
            elif ran_upstream:
                action, reason = "run", f"upstream {', '.join(ran_upstream)} reruns"
            else:
                ok, reason = _verified(ledger, task, uow, interval, recorded)
                action = "skip" if ok else "run"
                if new_input:
                    reason = f"source changed: new input version {uow.input_version}"
            if action == "run":
                upstream_runs.add(name)
            items.append(PlanItem(interval, name, uow, action, reason, new_input,
                                  recorded[-1].number if recorded else None))
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


class _Locks:
    """One writer per destination file: embedded engines (DuckDB, SQLite files) take one
    writer at a time, so intervals in flight queue for the file instead of conflicting."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def for_spec(self, spec: str) -> threading.Lock:
        key = spec.split("?", 1)[0].split("#", 1)[0] or "-"
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    @contextmanager
    def holding(self, task: Task) -> Iterator[None]:
        """The executor's ``guard``: held around each attempt of ``task`` and its check."""
        if not task.destination:
            yield
            return
        with self.for_spec(task.destination):
            yield


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
    deadline: datetime | None = None,
    holder: str | None = None,
    clock: Callable[[], datetime] | None = None,
    sleep: Callable[[float], None] | None = None,
    rng: random.Random | None = None,
    lease_ttl: float = 300.0,
    poll_interval: float = 1.0,
    observe_timeout: float = 60.0,
) -> BackfillResult:
    """Backfill ``intervals`` (in order, ``concurrency`` in flight) and verify every partition.

    Each interval's planned units run through one :class:`twice.executor.Executor` (see the
    module docstring), its tasks in dependency order one at a time. ``accept_schema_change``
    implies ``force``: the new schema is applied to every interval of the range, never to some
    of them. A refused schema change stops new intervals from starting; intervals already
    running finish. ``deadline`` is the backfill's own (aware) deadline, default none;
    ``holder``, ``clock``, ``sleep``, ``rng``, ``lease_ttl``, ``poll_interval`` and
    ``observe_timeout`` go to the executor.
    """
    from twice.executor import Executor, default_holder

    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise BackfillError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if deadline is not None and (
        not isinstance(deadline, datetime) or deadline.utcoffset() is None
    ):
        raise BackfillError(f"deadline must be a timezone-aware datetime, got {deadline!r}")
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
    diffs: dict[str, PartitionDiff] = {}
    refused: dict[str, str] = {}  # uow_id -> why its schema change was refused
    diffs_lock = threading.Lock()

    def fingerprint_output(task: Task, unit: UnitOfWork, attempt: int) -> None:
        if not task.destination:
            return
        try:
            diff = record_partition(ledger, task, unit.uow_id, attempt, unit.interval,
                                    accept_schema_change=accept_schema_change)
        except SchemaChangeError as exc:  # the executor fails the unit with it
            with diffs_lock:
                refused[unit.uow_id] = str(exc)
            raise
        with diffs_lock:
            diffs[unit.uow_id] = diff

    executor = Executor(
        pipeline.with_deadline(None if deadline is None else _fixed(deadline)), ledger,
        clock=clock, sleep=sleep, rng=rng, holder=holder or default_holder(), max_workers=1,
        lease_ttl=lease_ttl, poll_interval=poll_interval, observe_timeout=observe_timeout,
        params=params, check_output=fingerprint_output, guard=locks.holding,
        reruns={item.uow.uow_id: item.latest_attempt or 0
                for item in plan.items if item.action == "run"},
    )
    started = time.monotonic()

    def one_interval(interval: Interval) -> list[TaskRun]:
        items = plan.for_interval(interval)
        _emit(emit, "interval-started", interval=interval.label)
        units: dict[str, UnitResult] = {}
        before: dict[str, AttemptRecord | None] = {}
        runnable = [item for item in items if item.action == "run"]
        if runnable and not stop.is_set():
            before = {item.task: ledger.latest_attempt(item.uow.uow_id) for item in runnable}
            result = executor.run(interval, [item.task for item in runnable])
            units = {unit.task: unit for unit in result.units}
        runs: list[TaskRun] = []
        for item in items:
            run = TaskRun(item.task, interval, item.uow.uow_id, item.uow.input_version,
                          "skipped", item.reason, new_input_version=item.new_input_version)
            unit = units.get(item.task)
            if item.action == "run" and unit is None:
                run.status = "blocked"
                run.reason = "backfill stopped: " + (refusal[0] if refusal else "")
            elif unit is not None:
                _describe(run, unit, pipeline.get_task(item.task), before.get(item.task),
                          ledger, diffs.get(item.uow.uow_id), refused.get(item.uow.uow_id),
                          emit)
                if run.status == "refused":
                    refusal.append(run.reason)
                    stop.set()
            runs.append(run)
            _emit(emit, "task-finished", **run.to_dict())
        failed = any(r.status in ("failed", "refused", "blocked", "leased-elsewhere")
                     for r in runs)
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


def _fixed(deadline: datetime) -> Callable[[Interval], datetime]:
    return lambda _interval: deadline


def _describe(run: TaskRun, unit: UnitResult, task: Task, before: AttemptRecord | None,
              ledger: Ledger, diff: PartitionDiff | None, refusal: str | None,
              emit: EventSink | None) -> None:
    """Fill ``run`` from the executor's result and the ledger's record of this backfill's
    attempts (emitting what they show: failed attempts, reconciliations). ``refusal`` is the
    schema change its fingerprint refused, if any."""
    from twice.reconcile import FINAL_STATES

    run.outcome, run.notes = unit.outcome, unit.notes
    run.acceptance, run.nonfatal, run.diff = unit.acceptance, unit.nonfatal, diff
    with ledger.snapshot():
        recorded = ledger.attempts(run.uow_id)
        recorded_errors = ledger.errors(run.uow_id)
        observations = ledger.observations(run.uow_id)
    ours: list[AttemptRecord] = []
    if unit.outcome != "leased-elsewhere":
        first = 1 if before is None else before.number + 1
        if before is not None and before.outcome in ("unknown", "running"):
            first = before.number  # resolved (or left) by this backfill
        ours = [a for a in recorded if a.number >= first]
    run.attempts = [(a.number, a.outcome) for a in ours]
    run.duration = sum(a.duration.total_seconds() for a in ours if a.duration is not None)
    numbers = {a.number for a in ours}
    errors = {e.attempt: e for e in recorded_errors if e.attempt in numbers}
    for attempt in ours:
        error = errors.get(attempt.number)
        if attempt.outcome.startswith("failed-") and error is not None:
            _emit(emit, "attempt-failed", task=run.task, interval=run.interval.label,
                  attempt=attempt.number,
                  error=f"{error.error_class.rsplit('.', 1)[-1]}: {error.message}",
                  transient=attempt.outcome == "failed-transient")
    answers: dict[int, tuple[str, str]] = {}
    for seen in observations:
        if (seen.source == "reconcile" and seen.attempt in numbers
                and seen.state in FINAL_STATES):
            answers[seen.attempt] = (str(seen.detail.get("job_id")), seen.state)
    for number, (job_id, state) in sorted(answers.items()):
        run.reconciled.append(f"{job_id}: {state}")
        _emit(emit, "reconciled", task=run.task, interval=run.interval.label, job_id=job_id,
              state=state, attempt=number)
    if unit.outcome == "succeeded":
        if ours or diff is not None:
            run.status, run.reason = "succeeded", run.reason or unit.reason
        else:  # another process finished it after this backfill planned it
            run.status, run.reason = "skipped", unit.reason
        return
    if unit.outcome in ("leased-elsewhere", "blocked"):
        run.status, run.reason = unit.outcome, unit.reason  # type: ignore[assignment]
        return
    error = unit.error or ""
    if refusal is not None:
        run.status, run.reason = "refused", refusal
    elif _is_schema_error(error):
        run.status = "refused"
        run.reason = (f"{task.destination}: {error}; a backfill across a schema change must "
                      "apply the new schema to every interval of the range (migrate the "
                      "table, then --accept-schema-change)")
    else:
        run.status = "failed"
        run.reason = f"{unit.outcome}: {unit.reason}"
        if error and error not in unit.reason:
            run.reason += f" (last error {error})"


def _emit(sink: EventSink | None, kind: str, **data: Any) -> None:
    if sink is not None:
        sink(kind, data)


def _is_schema_error(reason: str) -> bool:
    return reason.startswith("SchemaError:")
