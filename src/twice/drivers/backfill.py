"""Backfills: run a range of intervals in order, verify every partition written, follow with
the dependents whose inputs changed.

Intervals start in order with at most ``concurrency`` in flight. Each interval's units run
through the engine (``twice.engine.executor``: one lifecycle, the same rules as ``twice run``):
every partition a task writes is fingerprinted and recorded as the partition's next version before
the attempt counts as succeeded, and the difference with the previous version (rows before/after,
checksum changed or not, schema changed or not) comes back as an event and is reported.

Plan and resume: a unit of work (its id covers the input version, which covers the upstream
outputs it reads, and the transform version) is *verified* when its latest attempt succeeded
and the latest fingerprint of its partition was recorded by that same unit; with
``verify_untouched`` the partition must also still have that fingerprint now (measured in the
destination, one read a partition: what ``twice verify`` checks for every partition). The
plan reads these facts a window of intervals at a time (``twice.ledger.ranges``), so a restart
or a rerun over tens of thousands of verified units reaches new work after a few statements
per window, not several per unit. Verified units are skipped unless ``force`` (the named
tasks, or all); a changed source gives a new input version, hence a new unit, so it is never
skipped as an "equivalent" rerun. A dependent of a task that runs is identified again after
that task settles: it executes only if the output it reads changed.

Deadlines. The intervals of a backfill are past: their delivery deadlines are history and
planning against them would refuse every attempt. A backfill plans against its own
``deadline`` (one instant for the whole range) or none.

Drift. Before an interval's units write, each partition they will rewrite (and, with
``verify_untouched``, each partition a verified unit would leave untouched) is measured against
its latest recorded fingerprint version (recomputed with that version's algorithm and columns;
the plan's own measurement is reused when recent). A difference is *drift*: the partition was
changed behind twice's back (rows deleted by hand, values edited). It is recorded in the ledger
as a ``drift`` observation (source ``fingerprint``, the recorded and current counts and
checksums in its detail) of the unit that recorded that version, and carried into the
partition's diff (``rows_now``/``checksum_now``/``drifted``), so "rows 10 -> 10, unchanged"
(new output against the last record) never hides that the partition held 8 rows before the
rerun ("drift: 10 -> 8 rows behind twice's back; change: 8 -> 10").

Key diffs. Where the destination keeps table versions (Delta, Iceberg), each verified write's
key diff (keys added, removed and changed against the table version before it, with up to
``KEY_DIFF_SAMPLES`` keys of each kind: ``twice.destinations.diff.commit_diff``) is carried into
the partition's diff and recorded in the ledger as a ``rows-changed`` observation (source
``twice.destinations.diff``) of the unit and attempt that wrote, with a one-line summary
(``+1 -1 ~1``, sample keys) for timelines. It is evidence for operators (``twice explain``,
``twice report``): the planner reads only its time (the destination's log, read after the
attempt finished, is the unit's freshest evidence), never its state.

Reruns. A unit planned to run although it succeeded before (``--force``, a partition that no
longer matches its fingerprint) is handed to the engine as a rerun of the attempt the plan saw
(a new job generation): if another process reran it after the plan, that newer success stands.
A task not ``safe_repeat`` is held instead unless named in ``repeat``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, cast

from twice.core.interval import Interval
from twice.core.outcomes import PASSED_THROUGH, RunStatus
from twice.define.pipeline import Pipeline, Task
from twice.engine.verification import (
    Drift,
    PartitionDiff,
    SchemaChangeError,
    measure_drift,
    partition_key,
    record_partition,
    schema_signature,
)
from twice.errors import InputError, OutcomeUnknownError

if TYPE_CHECKING:
    from twice.core.unit import UnitOfWork
    from twice.destinations.diff import CommitDiff
    from twice.engine.events import Event
    from twice.engine.evidence import AssumedDuration
    from twice.engine.executor import UnitResult
    from twice.ledger import AttemptRecord, FingerprintRecord, Ledger
    from twice.ledger.ranges import RangeFacts, WindowAttempt

__all__ = [
    "BackfillError", "BackfillPlan", "BackfillResult", "Drift", "OutcomeUnknownError",
    "PartitionDiff", "PlanItem", "SchemaChangeError", "TaskRun", "iter_plan", "plan_backfill",
    "record_partition", "run_backfill",
]

DRIFT_STATE = "drift"  # observation state of a partition found changed behind twice's back
DRIFT_SOURCE = "fingerprint"
#: observation state of a verified write's key diff (Delta, Iceberg: see "Key diffs" above)
ROWS_CHANGED_STATE = "rows-changed"
ROWS_CHANGED_SOURCE = "twice.destinations.diff"
KEY_DIFF_SAMPLES = 3  # keys of each kind (added, removed, changed) shown and recorded
REUSE_DRIFT_SECONDS = 60.0  # a plan's measurement older than this is taken again before writing

PlanAction = Literal["run", "skip"]
EventSink = Callable[[str, Mapping[str, Any]], None]
Identify = Callable[[str, Interval], "UnitOfWork"]


class BackfillError(InputError):
    """The backfill request itself is invalid (unknown task, empty range...)."""


# ------------------------------------------------------------------------------- results


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
    status: RunStatus
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
    drift: Drift | None = None  # the partition before this backfill wrote it, vs its record
    assumed: AssumedDuration | None = None  # as in ``UnitResult``

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
            "drift": None if self.drift is None else self.drift.to_dict(),
            **(self.assumed.to_dict() if self.assumed is not None
               else {"assumed_duration": None, "duration_basis": None}),
        }


@dataclass(frozen=True)
class PlanItem:
    """One (interval, task) of a backfill plan: run it or skip it, and why.

    ``latest_attempt`` is the unit's latest attempt number when the plan was made: a success
    recorded after it (by another process) is not repeated. ``latest_seen`` is the latest
    attempt the plan read for a unit it did not skip on the window's facts (what running it
    needs; a skipped unit's is only its number, ``latest_attempt``).
    """

    interval: Interval
    task: str
    uow: UnitOfWork
    action: PlanAction
    reason: str
    new_input_version: bool = False
    latest_attempt: int | None = None
    rerun: bool = True  # a deliberate rerun of a success (False: follows its upstream)
    drift: Drift | None = None  # the partition vs its latest record, when the plan measured it
    latest_seen: AttemptRecord | None = field(default=None, compare=False, repr=False)
    #: Input versions the ledger had units of this task and interval for, when planned.
    earlier_inputs: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    #: For a unit to run: what the engine will do instead, as the plan can already tell
    #: (``held``: not safe_repeat and already succeeded, not named by ``repeat``;
    #: ``blocked``: a dependency not selected has not succeeded), with ``reason`` saying why.
    expected: Literal["held", "blocked"] | None = None
    #: Other units of the slot whose latest attempt the plan saw unsettled: settled before
    #: the slot is measured (``twice.engine.siblings``).
    unsettled_siblings: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval": self.interval.label, "task": self.task, "uow_id": self.uow.uow_id,
            "input_version": self.uow.input_version, "action": self.action,
            "reason": self.reason, "new_input_version": self.new_input_version,
            "latest_attempt": self.latest_attempt, "rerun": self.rerun,
            "drift": None if self.drift is None else self.drift.to_dict(),
            "expected": self.expected,
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


NOT_RUN = "not run with this input and transform version"


def _verified(ledger: Ledger, task: Task, uow: UnitOfWork, interval: Interval,
              attempts: Sequence[AttemptRecord], *, measure: bool = False
              ) -> tuple[bool, str, Drift | None]:
    """Whether ``uow`` already succeeded (``attempts`` are its recorded ones) and its
    partition's latest recorded fingerprint is its own. With ``measure`` (``verify_untouched``)
    the partition is also measured against that record, and must still hold it; the
    measurement (the drift) is carried into the backfill's diff."""
    from twice.destinations import DestinationError

    if ledger.unit(uow.uow_id) is None:
        return False, NOT_RUN, None
    if not attempts or attempts[-1].outcome != "succeeded":
        seen = "no attempt" if not attempts else f"latest attempt {attempts[-1].outcome}"
        return False, f"not settled as succeeded ({seen})", None
    if not task.owns_output:
        return True, "succeeded before with the same input and transform version", None
    recorded = ledger.latest_fingerprint(task.destination, partition_key(interval))
    if recorded is None or recorded.uow_id != uow.uow_id:
        return False, "partition's latest fingerprint was written by another unit of work", None
    if not measure:
        return True, _recorded_reason(recorded), None
    try:
        drift = measure_drift(task.destination, interval, recorded)
    except DestinationError as exc:
        return False, f"partition cannot be checked against its recorded fingerprint: {exc}", None
    if drift.drifted:
        return False, ("partition no longer matches its recorded fingerprint "
                       f"v{recorded.version} ({drift.describe()} behind twice's back)"), drift
    return (True, f"verified: same unit of work, fingerprint v{recorded.version} still matches",
            drift)


def _recorded_reason(recorded: FingerprintRecord) -> str:
    """Why a unit is skipped when its partition was not measured (no ``verify_untouched``)."""
    return f"verified: same unit of work recorded fingerprint v{recorded.version}"


def plan_backfill(
    pipeline: Pipeline,
    ledger: Ledger,
    intervals: Iterable[Interval],
    *,
    tasks: Sequence[str] | None = None,
    force: bool = False,
    repeat: Collection[str] = (),
    verify_untouched: bool = False,
) -> BackfillPlan:
    """Decide, without writing anything, which units of work a backfill runs or skips.

    ``force`` reruns the requested tasks (every task when none is named). A dependent whose
    upstream runs is planned ``run`` but is a deliberate rerun only if its own output no longer
    verifies: otherwise its unit of work is identified again after the upstream settles (its
    input version covers the upstream output, ``twice.engine.executor.identify_unit``), and it
    executes only if that output changed. ``verify_untouched``: measure the partition of every
    unit that would be skipped as verified against its recorded fingerprint, and run it again
    if it drifted (one destination read a unit; by default a verified unit is decided from the
    ledger alone).

    The whole plan at once; :func:`iter_plan` gives the same items one at a time.
    """
    spans = tuple(pipeline.schedule.canonical(i) for i in intervals)
    if not spans:
        raise BackfillError("the backfill range holds no interval")
    names, dependents = selected_tasks(pipeline, tasks)
    items = tuple(iter_plan(pipeline, ledger, spans, tasks=tasks, force=force, repeat=repeat,
                            verify_untouched=verify_untouched))
    return BackfillPlan(pipeline.name, spans, tuple(names), tuple(dependents), items, force)


def iter_plan(
    pipeline: Pipeline,
    ledger: Ledger,
    intervals: Iterable[Interval],
    *,
    tasks: Sequence[str] | None = None,
    force: bool = False,
    repeat: Collection[str] = (),
    verify_untouched: bool = False,
) -> Iterator[PlanItem]:
    """:func:`plan_backfill`'s items as a generator: each interval is taken from ``intervals``
    (which may be lazy, e.g. ``Schedule.iter_intervals``) and planned only when its first item
    is asked for, so the first item of a plan of any length is ready at once.

    The ledger is read a window of intervals at a time (``PLAN_WINDOW``, :class:`_Window`): the
    units of the window's intervals, their latest attempts and their partitions' latest
    fingerprints, in a few statements. A unit the ledger did not hold then is planned without
    reading the ledger again (no unit, no attempt), and a unit those facts show verified is
    skipped without reading it again either, so the cost per unit stays flat over 100,000
    intervals and a rerun of verified units issues a few statements per window, not several
    per unit. Only the other units (to run, forced, or not settled as succeeded) are read one
    by one. An empty ``intervals`` raises ``BackfillError`` when the iteration finds it empty.
    """
    names, _ = selected_tasks(pipeline, tasks)
    window = _Window(pipeline, ledger, names)
    return (item for _interval, items in _plan_intervals(pipeline, ledger, intervals, names,
                                                         tasks, force, window, repeat=repeat,
                                                         verify_untouched=verify_untouched)
            for item in items)


#: How far ahead of the interval being planned the ledger is read at once, in intervals of
#: its length: a year of hourly intervals is read in 18 windows.
PLAN_WINDOW = 500


class _Window:
    """The ledger's facts (``twice.ledger.ranges.range_facts``) for the intervals that start
    within ``PLAN_WINDOW`` interval lengths of the one being planned, read when planning first
    reaches an interval outside the window read last. Only one window is held at a time, so
    planning's memory does not grow with the range.

    The facts are as the ledger stood when the window was read, as the plan once read every
    unit when the backfill began: a unit they show verified is skipped (another process that
    reruns it later does so after this plan), one they do not show is planned to run and the
    engine, which claims it, finds any success recorded since."""

    def __init__(self, pipeline: Pipeline, ledger: Ledger, names: Sequence[str]) -> None:
        self.pipeline, self.ledger = pipeline, ledger
        destinations: set[str] = set()
        for name in names:
            task = pipeline.get_task(name)
            for owner in (task, *(pipeline.get_task(dep) for dep in task.depends_on
                                  if dep in pipeline)):
                if owner.owns_output:
                    destinations.add(owner.destination)
        self.destinations = frozenset(destinations)
        self.first: datetime | None = None
        self.last: datetime | None = None
        self.facts: RangeFacts | None = None
        self.known: dict[tuple[str, str], set[str]] = {}
        self.unit_ids: set[str] = set()
        #: (task, label) -> its units whose latest attempt is unsettled (running, unknown)
        self.unsettled: dict[tuple[str, str], set[str]] = {}

    def covering(self, interval: Interval) -> RangeFacts:
        """The facts of the window holding ``interval`` (read now if it is not the last one)."""
        from twice.core.outcomes import UNSETTLED_OUTCOMES
        from twice.ledger.ranges import range_facts

        start = interval.start
        if (self.facts is None or self.first is None or self.last is None
                or not self.first <= start <= self.last):
            try:
                last = start + PLAN_WINDOW * (interval.end - start)
            except OverflowError:  # a whole-relation interval (a dbt table) ends far ahead
                last = datetime.max.replace(tzinfo=UTC)
            self.first, self.last = start, last
            self.facts = range_facts(self.ledger, self.pipeline.name, self.first, self.last,
                                     self.destinations, self.pipeline.tasks)
            self.known, self.unit_ids, self.unsettled = {}, set(), {}
            latest = self.facts.latest_attempts
            for unit in self.facts.units:
                self.known.setdefault((unit.task, unit.label), set()).add(unit.input_version)
                self.unit_ids.add(unit.uow_id)
                attempt = latest.get(unit.uow_id)
                if attempt is not None and attempt.outcome in UNSETTLED_OUTCOMES:
                    self.unsettled.setdefault((unit.task, unit.label), set()).add(unit.uow_id)
        return self.facts

    def unsettled_siblings(self, task: Task, uow: UnitOfWork, interval: Interval) -> list[str]:
        """The other units of ``uow``'s slot whose latest attempt the window shows unsettled:
        the engine settles them before it judges the slot (``twice.engine.siblings``), so a
        unit they would otherwise leave skipped as verified is handed to it."""
        if not task.owns_output:
            return []
        return sorted(self.unsettled.get((task.name, interval.label), set()) - {uow.uow_id})

    def upstream(self, task: Task, interval: Interval
                 ) -> dict[str, FingerprintRecord | None] | None:
        """``task``'s upstream partitions' latest fingerprints for ``interval`` from the
        window (as ``identify_unit``'s ``upstream``), or None where the window did not read
        them (no unit of the pipeline for that interval)."""
        facts = self.facts
        label = partition_key(interval)
        if facts is None or label not in facts.partitions:
            return None
        out: dict[str, FingerprintRecord | None] = {}
        for dep in task.depends_on:
            if dep in self.pipeline and self.pipeline.get_task(dep).owns_output:
                out[dep] = facts.fingerprints.get((self.pipeline.get_task(dep).destination,
                                                   label))
        return out


def _plan_intervals(
    pipeline: Pipeline, ledger: Ledger, intervals: Iterable[Interval], names: Sequence[str],
    tasks: Sequence[str] | None, force: bool, window: _Window,
    identify: Identify | None = None, began: datetime | None = None,
    repeat: Collection[str] = (), verify_untouched: bool = False, canonical: bool = False,
) -> Iterator[tuple[Interval, list[PlanItem]]]:
    """Each interval (canonical) with its plan items, computed when taken. ``identify`` names
    a task's unit for an interval (default ``identify_unit``; a backfill that refreshes
    snapshots passes its executor's, which reads the sources first). ``began``: when the
    backfill began; a rerun repeats the latest attempt made before it, so a success another
    process made since stands (racing forced backfills execute each unit once). ``window``:
    the ledger's facts, read a window of intervals at a time (see :func:`iter_plan`).
    ``canonical``: the caller made every interval canonical already (a range longer than the
    schedule's memo of canonical intervals would otherwise be searched again)."""
    empty = True
    for given in intervals:
        interval = given if canonical else pipeline.schedule.canonical(given)
        empty = False
        yield interval, _plan_interval(pipeline, ledger, interval, names, tasks, force, window,
                                       identify, began, repeat, verify_untouched)
    if empty:
        raise BackfillError("the backfill range holds no interval")


def _is_new_input(earlier: frozenset[str], input_version: str) -> bool:
    """Whether ``input_version`` is new for its task and interval: the ledger held earlier
    units of them, none of this version (a first run has nothing to be new against)."""
    return bool(earlier) and input_version not in earlier


def _verified_in_window(task: Task, uow: UnitOfWork, interval: Interval, facts: RangeFacts,
                        began: datetime | None) -> tuple[WindowAttempt, str] | None:
    """The unit's latest attempt and the skip reason, when the window's facts show it
    verified (its latest attempt succeeded, before ``began``, and its partition's latest
    fingerprint is its own): what :func:`_verified` decides without measuring, with no
    read of its own. None: read the unit itself."""
    latest = facts.latest_attempts.get(uow.uow_id)
    if latest is None or latest.outcome != "succeeded" or (
        began is not None and latest.started_at > began
    ):
        return None
    if not task.owns_output:
        return latest, "succeeded before with the same input and transform version"
    recorded = facts.fingerprints.get((task.destination, partition_key(interval)))
    if recorded is None or recorded.uow_id != uow.uow_id:
        return None
    return latest, _recorded_reason(recorded)


def _plan_interval(
    pipeline: Pipeline, ledger: Ledger, interval: Interval, names: Sequence[str],
    tasks: Sequence[str] | None, force: bool, window: _Window,
    identify: Identify | None = None, began: datetime | None = None,
    repeat: Collection[str] = (), verify_untouched: bool = False,
) -> list[PlanItem]:
    from twice.engine.executor import identify_unit, latest_attempt_before

    facts = window.covering(interval)
    items: list[PlanItem] = []
    upstream_runs: set[str] = set()
    stopped: dict[str, str] = {}  # planned to run, but held or blocked: which
    for name in names:
        task = pipeline.get_task(name)
        upstream = None if identify is not None else window.upstream(task, interval)
        if identify is not None:
            uow = identify(name, interval)
        elif upstream:  # read by the window
            uow = identify_unit(pipeline, ledger, name, interval, upstream=upstream)
        else:
            uow = identify_unit(pipeline, ledger, name, interval)
        unknown = uow.uow_id not in window.unit_ids  # no unit, no attempt
        seen = frozenset(window.known.get((name, interval.label), ()))
        ran_upstream = sorted(set(task.depends_on) & upstream_runs)
        forced = force and (not tasks or name in tasks)
        siblings = window.unsettled_siblings(task, uow, interval)
        found = (None if unknown or forced or verify_untouched or ran_upstream or siblings
                 else _verified_in_window(task, uow, interval, facts, began))
        if found is not None:  # verified by the window's facts: nothing more to read
            latest, reason = found
            items.append(PlanItem(interval, name, uow, "skip", reason, False,
                                  latest.number, True, None, None, frozenset(), None))
            continue
        if upstream:  # named from the window's upstream versions: name it as the ledger is now
            uow = identify_unit(pipeline, ledger, name, interval)
            unknown = uow.uow_id not in window.unit_ids
        new_input = _is_new_input(seen, uow.input_version)
        recorded = [] if unknown else ledger.attempts(uow.uow_id)
        rerun = True
        drift = None
        action: PlanAction
        if forced:
            action, reason = "run", "--force"
        else:
            ok, reason, drift = ((False, NOT_RUN, None) if unknown
                                 else _verified(ledger, task, uow, interval, recorded,
                                                measure=verify_untouched))
            action = "skip" if ok else "run"
            if new_input:
                reason = f"source changed: new input version {uow.input_version}"
            elif ok and ran_upstream:
                action, rerun = "run", False
                reason = (f"follows upstream {', '.join(ran_upstream)}: executes only if "
                          "its output changes")
            elif ok and siblings:
                action, rerun = "run", False
                reason = (f"another unit of this slot is unsettled ({', '.join(siblings)}): "
                          "it is settled first; executes only if its write replaced the slice")
        expected = None
        if action == "run":
            expected, why = _expected(pipeline, ledger, task, interval, uow, recorded, names,
                                      repeat, stopped, others=bool(seen - {uow.input_version}),
                                      follows=not rerun)
            if expected is not None:
                reason = f"{reason}; {why}"
                if rerun:  # the engine blocks the dependents of either
                    stopped[name] = expected
                # else skipped or held: either way it does not run, nothing follows it
            else:
                upstream_runs.add(name)
        baseline = latest_attempt_before(recorded, began)
        items.append(PlanItem(interval, name, uow, action, reason, new_input,
                              None if baseline is None else baseline.number, rerun, drift,
                              recorded[-1] if recorded else None, seen, expected,
                              tuple(siblings)))
    return items


def _expected(
    pipeline: Pipeline, ledger: Ledger, task: Task, interval: Interval, uow: UnitOfWork,
    recorded: Sequence[AttemptRecord], names: Sequence[str], repeat: Collection[str],
    stopped: Mapping[str, str], *, others: bool = True, follows: bool = False,
) -> tuple[Literal["held", "blocked"] | None, str]:
    """What the engine will do instead of running a planned unit, where the plan can tell
    (the engine's rules: ``twice.engine.executor``'s hold of a task that is not
    ``safe_repeat``, and its block on a dependency): a dry run says so, not "would run".
    ``follows``: the unit follows its upstream (it runs only if its input changes, which the
    plan cannot know): one that is not ``safe_repeat`` and already succeeded for the interval
    is then either skipped or held, never run, so it is foreseen held "if its input changes".
    ``others``: the ledger held other units of the task and interval when planning began
    (else nothing is read to look for them)."""
    from twice.engine.executor import earlier_success, identify_unit, unsettled

    for dep in task.depends_on:
        if dep not in pipeline:
            continue
        if dep in stopped:
            return "blocked", f"blocked: dependency {dep} is {stopped[dep]} in this run"
        if dep in names:
            continue
        seen = unsettled(ledger, identify_unit(pipeline, ledger, dep, interval).uow_id)
        if seen is not None:
            return "blocked", (f"blocked: dependency {dep} is not selected and the ledger "
                               f"shows {seen}")
    if task.repeat_is_safe or task.name in repeat:
        return None, ""
    if recorded and recorded[-1].outcome == "succeeded":
        why = f"attempt {recorded[-1].number} of this unit succeeded"
    elif (not follows and recorded and recorded[-1].outcome.startswith("failed-")
          and task.effects_unseen):
        why = (f"attempt {recorded[-1].number} failed after it may have acted (twice cannot "
               "see this task's effects)")
    elif (recorded and not follows) or not others:
        # the engine holds on another unit's success only before a unit's first attempt (a
        # follower's new unit has none yet); ``others``: the slot has other units
        return None, ""
    else:
        found = earlier_success(ledger, uow)
        if found is None:
            return None, ""
        why = f"unit {found[0].uow_id} succeeded for this interval"
    held = "held if its input changes" if follows else "held"
    return "held", (f"{held}: {why} and {task.name!r} is not safe_repeat (pass --repeat "
                    f"{task.name} to run it again)")


# ------------------------------------------------------------------------------- execution


def schema_conflicts(pipeline: Pipeline, ledger: Ledger, plan: BackfillPlan, *,
                     accept_schema_change: bool = False) -> list[str]:
    """Destinations whose schema is not one and the same across what the backfill touches,
    checked up front, each with every schema shown and where it was recorded.

    Without ``accept_schema_change``: the schema recorded with the latest fingerprint of every
    partition in the range, and the table's current schema (e.g. after a migration), must all
    agree. With it, the change must cover the whole destination: a partition outside the range
    recorded under another schema than the one the range moves to refuses the backfill, since
    rewriting only part of a destination would leave the rest on the old schema.
    """
    from twice.destinations import open_destination
    from twice.ledger.ranges import recorded_schemas

    problems = []
    keys = {partition_key(interval): interval for interval in plan.intervals}
    for name in plan.tasks:
        task = pipeline.get_task(name)
        if not task.owns_output:
            continue
        spec = task.destination
        with open_destination(spec) as dest:
            current = dest.schema()
        now = schema_signature(current) if current is not None else None
        if accept_schema_change:
            if now is None:
                continue
            outside = [record for record in ledger.latest_fingerprints(spec)
                       if record.partition not in keys and record.schema is not None
                       and record.schema != now]
            if outside:
                problems.append(_partial_change(spec, outside, now, plan))
            continue
        ever = recorded_schemas(ledger, spec) - {None}
        if len(ever) <= 1 and (now is None or ever <= {now}):
            continue  # no partition's latest schema can differ: none to read one by one
        recorded: dict[str, list[str]] = {}
        for key, schema in _latest_in_range(ledger, spec, list(keys)):
            if schema is not None:
                recorded.setdefault(schema, []).append(keys[key].label)
        if not recorded:
            continue
        shown = [f"{_where(labels)} [{signature or 'no columns'}]"
                 for signature, labels in sorted(recorded.items())]
        if now is not None and now not in recorded:
            shown.append(f"the destination now [{now or 'no columns'}]")
        if len(shown) > 1:
            problems.append(
                f"{spec}: schema differs across the backfill range: {'; '.join(shown)}. A "
                "backfill across a schema change must apply the new schema to every interval of "
                "the range: rerun with --accept-schema-change to rewrite every interval"
            )
    return problems


def _latest_in_range(ledger: Ledger, spec: str, keys: Sequence[str]
                     ) -> Iterator[tuple[str, str | None]]:
    """The schema recorded with the latest fingerprint of each of ``spec``'s partitions
    ``keys`` that has one, in ``keys`` order: one batched read per ``PLAN_WINDOW`` partitions,
    not one a partition."""
    from twice.ledger.ranges import latest_schemas_of

    for first in range(0, len(keys), PLAN_WINDOW):
        batch = keys[first:first + PLAN_WINDOW]
        found = latest_schemas_of(ledger, spec, batch)
        for key in batch:
            if key in found:
                yield key, found[key]


def _where(labels: Sequence[str]) -> str:
    first = labels[0]
    return f"recorded for {first}" + (f" and {len(labels) - 1} more" if len(labels) > 1 else "")


def _partial_change(spec: str, outside: Sequence[FingerprintRecord], now: str,
                    plan: BackfillPlan) -> str:
    """The refusal of a schema change accepted over part of a destination."""
    partitions = sorted(record.partition for record in outside)
    old = sorted({record.schema or "no columns" for record in outside})
    listed = ", ".join(partitions[:5]) + (f" and {len(partitions) - 5} more"
                                          if len(partitions) > 5 else "")
    return (
        f"{spec}: --accept-schema-change would leave {len(partitions)} partition(s) outside the "
        f"range on the old schema ({listed}): recorded [{'] or ['.join(old)}], the destination "
        f"now [{now}]. A schema change applies to the whole destination: extend the backfill to "
        f"cover them (the range is {plan.intervals[0].label} .. {plan.intervals[-1].label})"
    )


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
    repeat: Iterable[str] = (),
    allow_open: bool = False,
    refresh_snapshots: bool = False,
    listeners: Iterable[Callable[[Event], None]] = (),
    verify_untouched: bool = False,
) -> BackfillResult:
    """Backfill ``intervals`` (in order, ``concurrency`` in flight) and verify every partition.

    Each interval's planned units run through one :class:`twice.engine.executor.Executor` (see the
    module docstring), its tasks in dependency order one at a time. ``accept_schema_change``
    implies ``force``: the new schema is applied to every interval of the range, never to some
    of them. A refused schema change stops new intervals from starting; intervals already
    running finish. ``deadline`` is the backfill's own (aware) deadline, default none;
    ``holder``, ``clock``, ``sleep``, ``rng``, ``lease_ttl``, ``poll_interval`` and
    ``observe_timeout`` go to the executor; ``repeat`` names tasks that are not
    ``safe_repeat`` to execute again anyway (otherwise their successes are ``held``);
    ``listeners`` receive the engine's events too (OpenLineage: ``twice.engine.lineage``).
    ``verify_untouched`` measures the partition of every unit the plan would skip as verified
    and reruns it if it drifted (see :func:`plan_backfill`); by default only the partitions
    the backfill rewrites are measured (before writing: drift), and ``twice verify`` checks
    the others.

    An interval that has not ended (by ``clock``, default the ledger's) refuses the backfill
    before anything is recorded (``OpenIntervalError``) unless ``allow_open``; its runs are then
    recorded as run on an open interval. Each interval is planned just before it starts (the
    plan streams: see :func:`iter_plan`), against the ledger as read a window of intervals at
    a time; the result's plan holds every item, in order, as :func:`plan_backfill`'s (equal
    to them; without ``latest_seen`` and ``earlier_inputs``, read only to run them).
    """
    from twice.define.schedule import refuse_open_intervals
    from twice.engine.executor import Executor, default_holder
    from twice.engine.siblings import settle_slot

    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise BackfillError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if deadline is not None and (
        not isinstance(deadline, datetime) or deadline.utcoffset() is None
    ):
        raise BackfillError(f"deadline must be a timezone-aware datetime, got {deadline!r}")
    force = force or accept_schema_change
    names, dependents = selected_tasks(pipeline, tasks)
    spans = tuple(pipeline.schedule.canonical(i) for i in intervals)
    if not spans:
        raise BackfillError("the backfill range holds no interval")
    refuse_open_intervals(spans, clock() if clock is not None else ledger.now(),
                          allow_open=allow_open)
    window = _Window(pipeline, ledger, names)  # the ledger, read a window at a time
    began = ledger.now()
    # The range and tasks, before any item is planned (the items follow, interval by interval).
    plan = BackfillPlan(pipeline.name, spans, tuple(names), tuple(dependents), (), force)
    stop = threading.Event()
    refusal: list[str] = []
    conflicts = schema_conflicts(pipeline, ledger, plan, accept_schema_change=accept_schema_change)
    if conflicts:
        refusal.append(conflicts[0])
        stop.set()
    diffs: dict[str, PartitionDiff] = {}
    drifts: dict[tuple[str, str], Drift] = {}  # (task, interval label) -> before it was written
    refused: dict[str, str] = {}  # uow_id -> why its schema change was refused
    key_diffs: dict[str, _KeyDiffSeen] = {}  # uow_id -> its verified write's key diff
    reconciled: dict[str, list[tuple[str | None, str]]] = {}  # uow_id -> (job id, state)
    diffs_lock = threading.Lock()

    def listen(event: Event) -> None:
        """Collect what the engine verified or refused (no re-reading of the ledger)."""
        from twice.engine.events import OutputRejected, OutputVerified, Reconciled

        if isinstance(event, OutputVerified) and event.diff is not None:
            # The destination is read outside the lock (other intervals' events wait on it);
            # the key diff is recorded by the backfill thread once the engine returns
            # (one_interval), never from inside this engine callback.
            found = _key_diff(pipeline.get_task(event.task), event)
            keys = None if found is None else found.keys.to_dict()
            seen = None if found is None else _KeyDiffSeen(
                event.attempt, ledger.now(), _rows_changed_detail(event, found))
            with diffs_lock:
                drift = drifts.get((event.task, event.interval.label))
                diffs[event.uow_id] = event.diff.with_drift(drift).with_keys(keys)
                if seen is not None:
                    key_diffs[event.uow_id] = seen
            return
        with diffs_lock:
            if isinstance(event, OutputRejected) and event.advised:
                refused[event.uow_id] = event.reason
            elif isinstance(event, OutputRejected) and event.schema_change:
                refused[event.uow_id] = (
                    f"{pipeline.get_task(event.task).destination}: {event.reason}; a backfill "
                    "across a schema change must apply the new schema to every interval of the "
                    "range (migrate the table, then --accept-schema-change)"
                )
            elif isinstance(event, Reconciled):
                reconciled.setdefault(event.uow_id, []).append((event.job_id, event.state))

    executor = Executor(
        pipeline.with_deadline(None if deadline is None else _fixed(deadline)), ledger,
        clock=clock, sleep=sleep, rng=rng, holder=holder or default_holder(), max_workers=1,
        lease_ttl=lease_ttl, poll_interval=poll_interval, observe_timeout=observe_timeout,
        params=params, accept_schema_change=accept_schema_change,
        listeners=[listen, *listeners],
        repeat=repeat, allow_open=allow_open, refresh_snapshots=refresh_snapshots,
    )
    reruns: dict[str, int] = {}  # filled as each interval is planned, before it starts
    executor.reruns = reruns
    started = time.monotonic()

    def one_interval(interval: Interval, items: list[PlanItem]) -> list[TaskRun]:
        _emit(emit, "interval-started", interval=interval.label)
        units: dict[str, UnitResult] = {}
        runnable = [item for item in items if item.action == "run"]
        measured: dict[str, Drift] = {}
        settled: dict[str, list[str]] = {}
        if runnable and not stop.is_set():
            for item in runnable:
                if item.unsettled_siblings:  # before the slot is measured: not drift
                    settled[item.task] = settle_slot(executor, item.task, interval)
                drift = _drift_before_write(pipeline.get_task(item.task), item, ledger, emit)
                if drift is not None:
                    measured[item.task] = drift
                    with diffs_lock:
                        drifts[(item.task, interval.label)] = drift
            _rerun_readers_of_drift(pipeline, runnable, measured, reruns)
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
                actual = unit.uow_id or item.uow.uow_id
                before = item.latest_seen
                if actual != item.uow.uow_id:  # its upstream output is not what was planned
                    run.uow_id = actual
                    record = ledger.unit(actual)
                    if record is not None:
                        run.input_version = record.input_version
                    # a first run's dependents are planned before their upstream has output
                    run.new_input_version = _is_new_input(item.earlier_inputs, run.input_version)
                    before = None
                run.drift = measured.get(item.task)
                if (run.drift is not None and run.drift.drifted and run.drift.uow_id is None
                        and ledger.unit(actual) is not None):
                    _record_drift(ledger, run.drift, actual, None)  # recorded by no unit
                _describe(run, unit, pipeline.get_task(item.task), before,
                          ledger, diffs.get(actual), refused.get(actual), emit,
                          reconciled.get(actual, []))
                run.notes = (*settled.get(item.task, ()), *run.notes)
                with diffs_lock:
                    seen = key_diffs.pop(actual, None)
                if seen is not None:
                    _record_key_diff(ledger, actual, seen)
                if run.status == "refused":
                    refusal.append(run.reason)
                    stop.set()
            runs.append(run)
            _emit(emit, "task-finished", **run.to_dict())
        # failed: a unit failed or was refused; held: a unit waits for an operator or for
        # another process (held, blocked, leased elsewhere), which is not a failure
        failed = any(r.status in ("failed", "refused") for r in runs)
        held = any(r.status in ("blocked", "leased-elsewhere", "held") for r in runs)
        _emit(emit, "interval-finished", interval=interval.label, failed=failed, held=held)
        return runs

    results: dict[Interval, list[TaskRun]] = {}
    planned: list[PlanItem] = []
    # An interval is planned when a slot is free for it, so planning never waits for the range.
    upcoming = _plan_intervals(pipeline, ledger, spans, names, tasks, force, window,
                               executor.unit_for if refresh_snapshots else None, began,
                               tuple(repeat), verify_untouched, canonical=True)
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="twice-bf") as pool:
        pending: dict[Future[list[TaskRun]], Interval] = {}
        more = True
        while more or pending:
            while more and len(pending) < concurrency:
                taken = next(upcoming, None)
                if taken is None:
                    more = False
                    break
                interval, items = taken
                # kept for the result without what only running them needs (the attempt
                # records read): a year of hourly units keeps 26,280 items
                planned.extend(item if item.latest_seen is None and not item.earlier_inputs
                               else replace(item, latest_seen=None, earlier_inputs=frozenset())
                               for item in items)
                reruns.update((item.uow.uow_id, item.latest_attempt or 0)
                              for item in items if item.action == "run" and item.rerun
                              and _planned_on_success(item))
                if not pending and all(item.action == "skip" for item in items):
                    # nothing to run and nothing running before it: reported here, in order,
                    # without a thread handoff (a rerun of verified units is mostly these)
                    results[interval] = one_interval(interval, items)
                    continue
                pending[pool.submit(one_interval, interval, items)] = interval
            if not pending:
                continue
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                results[pending.pop(future)] = future.result()
    runs = [run for interval in spans for run in results.get(interval, [])]
    plan = replace(plan, items=tuple(planned))
    return BackfillResult(plan, runs, time.monotonic() - started,
                          refusal[0] if refusal else None)


def _planned_on_success(item: PlanItem) -> bool:
    """Whether the plan saw the unit's baseline attempt succeeded: only such a success is
    run again (``Executor.reruns``). An attempt that was running, or none at all, when the
    plan read the unit may succeed in another process before this one reaches it: that
    success is new and stands (running it again would repeat it, an append twice)."""
    seen = item.latest_seen
    return (seen is not None and seen.number == item.latest_attempt
            and seen.outcome == "succeeded")


def _rerun_readers_of_drift(pipeline: Pipeline, runnable: Sequence[PlanItem],
                            measured: Mapping[str, Drift], reruns: dict[str, int]) -> None:
    """Run again the direct dependents of a partition found drifted: they may have read the
    rows changed behind twice's back, and its rewrite brings back its recorded fingerprint,
    so their input version (that fingerprint) would not change and they would be skipped as
    verified. Their own dependents follow them as usual (they run if the output changed)."""
    drifted = {task for task, drift in measured.items() if drift.drifted}
    for item in runnable:
        if (not item.rerun and drifted & set(pipeline.get_task(item.task).depends_on)
                and _planned_on_success(item)):
            reruns[item.uow.uow_id] = item.latest_attempt or 0


def _drift_before_write(task: Task, item: PlanItem, ledger: Ledger, emit: EventSink | None
                        ) -> Drift | None:
    """The partition ``item`` is about to rewrite, as it is now, against its latest recorded
    version (None: nothing recorded, or no output twice can read). The plan's measurement is
    reused when it is of the same version and recent; a drift is recorded in the ledger as a
    ``drift`` observation (source ``fingerprint``) of the unit that recorded the version."""
    from twice.destinations import DestinationError

    if not task.owns_output:
        return None
    record = ledger.latest_fingerprint(task.destination, partition_key(item.interval))
    if record is None:
        return None
    drift = item.drift
    if drift is None or drift.version != record.version or (
        time.monotonic() - drift.measured_at > REUSE_DRIFT_SECONDS
    ):
        try:
            drift = measure_drift(task.destination, item.interval, record)
        except DestinationError as exc:
            _emit(emit, "drift-unknown", task=item.task, interval=item.interval.label,
                  reason=str(exc))
            return None
    if drift.drifted:
        if drift.uow_id is not None:
            _record_drift(ledger, drift, drift.uow_id, drift.attempt)
        _emit(emit, "drift", task=item.task, interval=item.interval.label, **drift.to_dict())
    return drift


def _record_drift(ledger: Ledger, drift: Drift, uow_id: str, attempt: int | None) -> None:
    ledger.record_observation(uow_id, DRIFT_STATE, source=DRIFT_SOURCE, attempt=attempt,
                              detail={**drift.to_dict(), "observed_by": "backfill"})


@dataclass(frozen=True)
class _KeyDiffSeen:
    """A verified write's key diff as read in the engine's callback (at ``observed_at``), to
    be recorded as a ``rows-changed`` observation of the attempt that wrote."""

    attempt: int
    observed_at: datetime
    detail: dict[str, Any]


def _record_key_diff(ledger: Ledger, uow_id: str, seen: _KeyDiffSeen) -> None:
    """Record ``seen`` at the time it was read, with a timeline summary of its counts."""
    detail = seen.detail
    keys = "; ".join(
        f"{what} {', '.join(map(_key_text, detail[name]))}"
        for what, name in (("added", "added_keys"), ("removed", "removed_keys"),
                           ("changed", "changed_keys"))
        if detail.get(name)
    )
    summary = (
        f"rows changed in {detail.get('partition')} by attempt {seen.attempt}: "
        f"+{detail.get('added', 0)} -{detail.get('removed', 0)} ~{detail.get('changed', 0)} "
        f"({detail.get('unchanged', 0)} unchanged)" + (f"; keys {keys}" if keys else "")
    )
    ledger.record_observation(uow_id, ROWS_CHANGED_STATE, source=ROWS_CHANGED_SOURCE,
                              observed_at=seen.observed_at, attempt=seen.attempt,
                              detail=detail, summary=summary)


def _key_text(key: Any) -> str:
    """``{"id": 7}`` as ``id=7`` (a key of several columns: ``a=1,b=2``)."""
    if isinstance(key, Mapping):
        return ",".join(f"{name}={value}" for name, value in key.items())
    return str(key)


def _rows_changed_detail(event: Any, found: CommitDiff) -> dict[str, Any]:
    """The ``rows-changed`` observation's detail: where, the key diff's counts and sampled
    keys, the table versions compared (``from_version`` None: the write created the table)
    and who observed it."""
    return {
        "destination": event.diff.destination, "partition": event.diff.partition,
        "fingerprint_version": event.diff.version, **found.keys.to_dict(),
        "sample_limit": KEY_DIFF_SAMPLES, "from_version": found.from_version,
        "to_version": found.to_version, "observed_by": "backfill",
    }


def _fixed(deadline: datetime) -> Callable[[Interval], datetime]:
    return lambda _interval: deadline


def _key_diff(task: Task, event: Any) -> CommitDiff | None:
    """Keys the verified write added, removed and changed, and the table versions compared,
    where the destination keeps versions (Delta, Iceberg); None elsewhere
    (twice.destinations.diff.commit_diff)."""
    from twice.core.schemes import VERSIONED_SCHEMES, scheme_of

    if not task.owns_output or scheme_of(task.destination) not in VERSIONED_SCHEMES:
        return None
    from twice.destinations.diff import commit_diff

    return commit_diff(task.destination, event.uow_id, event.attempt, event.interval,
                       samples=KEY_DIFF_SAMPLES)


def _describe(run: TaskRun, unit: UnitResult, task: Task, before: AttemptRecord | None,
              ledger: Ledger, diff: PartitionDiff | None, refusal: str | None,
              emit: EventSink | None,
              reconciled: Sequence[tuple[str | None, str]] = ()) -> None:
    """Fill ``run`` from the executor's result and this backfill's attempts, as the engine
    read them (``UnitResult.history``) or else from the ledger after ``before``, the latest
    attempt the plan saw (emitting what they show: failed attempts). ``refusal`` is the schema
    change the engine refused, ``reconciled`` the unknown outcomes it settled (job id,
    state)."""
    run.outcome, run.notes, run.assumed = unit.outcome, unit.notes, unit.assumed
    run.acceptance, run.nonfatal, run.diff = unit.acceptance, unit.nonfatal, diff
    from twice.engine.executor import attempts_of_run

    ours: list[AttemptRecord] = []  # none when another holder has the lease
    if unit.outcome != "leased-elsewhere":
        # as the engine read them (no read here); else it never claimed the unit, or the
        # ledger failed under it
        ours = (unit.history.ours() if unit.history is not None
                else attempts_of_run(ledger.attempts(run.uow_id), before))
    run.attempts = [(a.number, a.outcome) for a in ours]
    run.duration = sum(a.duration.total_seconds() for a in ours if a.duration is not None)
    numbers = {a.number for a in ours if a.outcome.startswith("failed-")}
    recorded_errors = ledger.errors(run.uow_id) if numbers else []
    errors = {e.attempt: e for e in recorded_errors if e.attempt in numbers}
    for attempt in ours:
        error = errors.get(attempt.number)
        if attempt.outcome.startswith("failed-") and error is not None:
            _emit(emit, "attempt-failed", task=run.task, interval=run.interval.label,
                  attempt=attempt.number,
                  error=f"{error.error_class.rsplit('.', 1)[-1]}: {error.message}",
                  transient=attempt.outcome == "failed-transient",
                  retried=any(later.number > attempt.number for later in ours))
    for job_id, state in reconciled:
        run.reconciled.append(f"{job_id}: {state}")
        _emit(emit, "reconciled", task=run.task, interval=run.interval.label, job_id=job_id,
              state=state)
    if unit.outcome == "succeeded":
        if ours or diff is not None:
            run.status, run.reason = "succeeded", run.reason or unit.reason
        else:  # another process finished it after this backfill planned it
            run.status, run.reason = "skipped", unit.reason
        return
    if unit.outcome in PASSED_THROUGH:
        run.status, run.reason = cast(RunStatus, unit.outcome), unit.reason
        return
    last_error = unit.error or ""
    if refusal is not None:
        run.status, run.reason = "refused", refusal
    else:
        run.status = "failed"
        run.reason = f"{unit.outcome}: {unit.reason}"
        if last_error and last_error not in unit.reason:
            run.reason += f" (last error {last_error})"


def _emit(sink: EventSink | None, kind: str, **data: Any) -> None:
    if sink is not None:
        sink(kind, data)
