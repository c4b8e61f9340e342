"""Gather a ledger into one report model, as of one instant, marking how each fact is known.

The HTML page, the status update, the runbook and ``twice status`` all read this model, so they
cannot disagree about what happened. Each unit's state is a word of the one health vocabulary
(``twice.reports.health``, where the rule and the bases are defined); every fact carries its
*basis* (DESIGN.md, "Truthfulness"): decided, executed, observed, verified, assumed by the
caller, asserted by an operator.

The model is rebuilt from each unit's timeline, keeping only events at or before ``as_of`` (and
observations *recorded* by then), so ``--as-of`` shows what an operator could have known at
that moment, not what was learnt afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

from twice.engine.evidence import (
    DEFAULT_MAX_OBSERVATION_AGE,
    EXECUTOR_SOURCE,
    RUN_STARTED,
    AssumedDuration,
    aware_instant,
)
from twice.errors import InputError
from twice.ledger import lease_holders
from twice.ledger.records import (
    LEASE_SOURCE,
    OPERATOR_SOURCE_PREFIX,
    RESOLUTION_OUTCOMES,
    AttemptFacts,
    AttemptOutcome,
    DecisionRecord,
    ErrorRecord,
    FingerprintDiff,
    FingerprintRecord,
    GenerationState,
    NonfatalErrorRecord,
    ObservationRecord,
    ResolutionOutcome,
    TimelineEvent,
    UnitRecord,
    resolution_outcome,
)
from twice.reports import wording
from twice.reports.health import (
    AWAITING_ACTION,
    NEEDS_ATTENTION,
    NEEDS_FRESH_EVIDENCE,
    PROCESS_EXITED,
    Basis,
    Health,
    Status,
    assess,
)

if TYPE_CHECKING:
    from twice.ledger import LedgerReader

#: Observation states that say the output was checked (not merely that the job ended).
VALIDATED_STATES = frozenset({"validated", "accepted", "verified"})
#: Observation states a remote service uses for a job that ended with an error.
FAILED_STATES = frozenset({"failed", "failure", "error"})
#: Observation states that say a job is still going (queued or running).
RUNNING_STATES = frozenset({"running", "pending", "queued"})

# Decision ``detail`` keys the planner and executor may record, in both spellings in use (the
# lab's camelCase and Python's snake_case). Unknown keys are shown verbatim, never interpreted.
DEADLINE_KEYS = ("deadline",)
EARLIEST_START_KEYS = ("earliest_start", "earliestStart")
ESTIMATED_FINISH_KEYS = ("estimated_finish", "estimatedFinish")
BACKOFF_KEYS = ("backoff", "backoff_seconds")
MAX_AGE_KEYS = ("max_observation_age", "maxObservationAge")
SAFE_REPEAT_KEYS = ("safe_repeat", "safeRepeat")
DURATION_KEYS = ("duration", "estimated_duration")
VALIDATION_KEYS = ("validation", "validation_duration")
POLICY_KEYS = ("policy",)
MAX_ATTEMPTS_KEYS = ("max_attempts", "maxAttempts")

DeadlineSpec = datetime | Callable[[UnitRecord], datetime | None] | None


class ReportError(InputError):
    """A report cannot be built from what was given; the message names the input."""


def assertion_of(record: ObservationRecord) -> OperatorAssertion | None:
    """The operator's resolution an observation records (``twice resolve``), else None."""
    from twice.ledger.records import RESOLVED_ATTEMPT_OUTCOME

    outcome = resolution_outcome(record.state, record.source)
    if outcome is None:
        return None
    return _assertion(record.source, record.detail, record.observed_at,
                      RESOLVED_ATTEMPT_OUTCOME[outcome], outcome)


def _event_assertion(event: TimelineEvent, outcome: AttemptOutcome) -> OperatorAssertion | None:
    """The resolution an ``attempt-finished`` event records (its ``resolved_by`` detail, and
    ``asserted``: the resolution's outcome; a ledger written before it was kept knew only
    ``succeeded`` and ``failed``, one per attempt outcome)."""
    source = event.detail.get("resolved_by")
    if not isinstance(source, str) or not source.startswith(OPERATOR_SOURCE_PREFIX):
        return None
    asserted = event.detail.get("asserted")
    if asserted not in RESOLUTION_OUTCOMES:
        asserted = "succeeded" if outcome == "succeeded" else "failed"
    return _assertion(source, event.detail, event.at, outcome,
                      cast(ResolutionOutcome, asserted))


def _assertion(source: str, detail: Mapping[str, Any], at: datetime,
               outcome: AttemptOutcome, asserts: ResolutionOutcome) -> OperatorAssertion:
    """An operator's resolution from ``operator:<name>`` and its recorded detail (the operator's
    name there wins over the source's, and the note)."""
    operator = detail.get("operator") or source[len(OPERATOR_SOURCE_PREFIX):]
    return OperatorAssertion(str(operator), str(detail.get("note", "")), at, outcome, asserts)


# -- reading recorded detail ---------------------------------------------------------------------


def detail_value(detail: Mapping[str, Any], keys: Iterable[str]) -> Any:
    """The first of ``keys`` present in ``detail`` (None if none is)."""
    for key in keys:
        if key in detail and detail[key] is not None:
            return detail[key]
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def detail_instant(detail: Mapping[str, Any], keys: Iterable[str]) -> datetime | None:
    """An aware instant recorded as ISO-8601 text; teaching-clock numbers have no date, so None."""
    return aware_instant(detail_value(detail, keys))


def detail_span(detail: Mapping[str, Any], keys: Iterable[str]) -> timedelta | None:
    """A duration recorded as seconds (a number) or ISO-8601 text (``PT4M``)."""
    from twice.core.timescale import TimeValueError, parse_duration

    value = detail_value(detail, keys)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except TimeValueError:
            try:
                return timedelta(seconds=float(value))
            except ValueError:
                return None
    return None


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


# -- the model -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperatorAssertion:
    """An operator's resolution of an attempt (``twice resolve``): asserted, not observed."""

    operator: str
    note: str
    at: datetime
    outcome: AttemptOutcome
    asserts: ResolutionOutcome  # what the operator said (``--as``): the next run acts on it

    @property
    def said(self) -> str | None:
        """``--as failed (its effect did not happen)`` when the outcome does not tell."""
        return wording.resolution_said(self.asserts, self.outcome)

    @property
    def label(self) -> str:
        """``asserted by an operator (alice): checked the table by hand``; for a failure, which
        one: ``asserted by an operator (bob), --as failed (its effect did not happen): ...``."""
        return wording.asserted_by(self.operator, self.note, self.said)


@dataclass(frozen=True)
class OutcomeChange:
    """An attempt's outcome as recorded at ``at``: by finishing it, by a lease takeover, or by
    an operator's resolution (``asserted`` set)."""

    at: datetime
    outcome: AttemptOutcome
    cause: str
    asserted: OperatorAssertion | None = None


@dataclass(frozen=True)
class Attempt(AttemptFacts):
    """One attempt as known at the report's ``as_of`` (executed: twice ran it)."""

    changes: tuple[OutcomeChange, ...] = ()
    gap_before: timedelta | None = None
    basis: Basis = "executed"

    @property
    def asserted(self) -> OperatorAssertion | None:
        """The operator's resolution that set the current outcome, if one did."""
        return self.changes[-1].asserted if self.changes else None

    @property
    def ended_at(self) -> datetime | None:
        """When twice stopped running it (finished, timed out, or its lease was taken over)."""
        return self.changes[0].at if self.changes else None

    @property
    def unknown_since(self) -> datetime | None:
        return next((c.at for c in self.changes if c.outcome == "unknown"), None)

    @property
    def resolved_at(self) -> datetime | None:
        """When later evidence settled an outcome that had been unknown."""
        if self.unknown_since is None or self.outcome == "unknown":
            return None
        return self.changes[-1].at


@dataclass(frozen=True)
class Observation:
    """A recorded status (observed by ``record.source``), with its age at the report's as_of.

    ``kinds`` tags what it shows: ``duplicate`` (the service already had the job id),
    ``done-with-error`` (ended, but with an error result), ``reconcile`` (looked up after an
    outcome became unknown), ``validated`` / ``validation-failed``, ``lease-takeover``,
    ``commit-record`` (the destination's commit record read by reconcile, source
    ``destination:<engine>``), ``operator-resolution`` (an operator's resolution: basis
    ``asserted``, not observed).
    """

    record: ObservationRecord
    age: timedelta
    stale: bool | None
    stale_at: datetime | None
    kinds: frozenset[str] = frozenset()
    basis: Basis = "observed"

    @property
    def asserted(self) -> OperatorAssertion | None:
        """The resolution this observation records, if it is an operator's."""
        return assertion_of(self.record)


@dataclass(frozen=True)
class RecordedDecision:
    """A planner decision with the times it recorded; ``current`` if no evidence came after it.

    ``assumed`` names what the decision rests on that the caller asserted or estimated
    (``safeRepeat``, ``estimated durations``): decided from assumptions, not from evidence.
    """

    record: DecisionRecord
    current: bool
    deadline: datetime | None = None
    earliest_start: datetime | None = None
    estimated_finish: datetime | None = None
    backoff: timedelta | None = None
    assumed: tuple[str, ...] = ()
    basis: Basis = "decided"
    #: what the decision assumed an attempt takes, and why (recorded with its evidence)
    duration: AssumedDuration | None = None


@dataclass(frozen=True)
class PlannedDecision:
    """The planner's decision over the ledger's evidence as of the report's ``as_of``, for a
    unit that needs an action but has no current *recorded* decision (evidence came after the
    last one, or none was recorded). Decided by the report, recorded nowhere, executes nothing.

    ``settings`` says what the planner planned with: ``recorded`` (the latest run's plan
    settings) or ``default`` (none recorded: the engine's defaults, used only for a running or
    unknown attempt, whose next step does not depend on the retry policy).
    """

    decision: str
    reason: str
    as_of: datetime
    settings: Literal["recorded", "default"]
    earliest_start: datetime | None = None
    estimated_finish: datetime | None = None
    basis: Basis = "decided"
    #: what the decision assumed an attempt takes, and why (when it timed one)
    duration: AssumedDuration | None = None


@dataclass(frozen=True)
class Generation:
    """A remote job id taken for the unit, and what the ledger says became of it."""

    generation: int
    job_id: str
    state: GenerationState
    taken_at: datetime
    state_at: datetime


@dataclass(frozen=True)
class StatedDeadline:
    """When the unit's output is due, and where that number comes from."""

    at: datetime
    origin: str
    basis: Basis


@dataclass(frozen=True)
class Assumption:
    """Something the report rests on that nobody verified, or a question the evidence leaves."""

    subject: str
    text: str
    origin: str


@dataclass(frozen=True)
class UnitReport:
    """Everything recorded about one unit of work up to the report's as_of."""

    unit: UnitRecord
    attempts: tuple[Attempt, ...]
    observations: tuple[Observation, ...]
    decisions: tuple[RecordedDecision, ...]
    generations: tuple[Generation, ...]
    errors: tuple[ErrorRecord, ...]
    nonfatal_errors: tuple[NonfatalErrorRecord, ...]
    fingerprints: tuple[FingerprintRecord, ...]
    status: Status
    deadline: StatedDeadline | None = None
    max_observation_age: timedelta | None = None
    policy: Mapping[str, Any] = field(default_factory=dict)
    left_out: int = 0
    settings: Mapping[str, Any] = field(default_factory=dict)
    recorded_seq: int = 0  # when the engine first recorded the unit, in ledger order
    #: Where ``max_observation_age`` comes from: ``recorded`` (the run's plan settings or a
    #: decision), ``given`` (the caller), ``default`` (the engine's default, 600 s).
    max_age_origin: Literal["recorded", "given", "default"] = "default"
    #: The planner's decision as of the report's as_of when no recorded one is current.
    planned: PlannedDecision | None = None

    @property
    def uow_id(self) -> str:
        return self.unit.uow_id

    @property
    def health(self) -> Health:
        """The unit's state in the one health vocabulary (``twice.reports.health``)."""
        return self.status.state

    @property
    def attempts_in_latest_run(self) -> int:
        """Attempts begun since the latest run took the unit up (its ``run-started``
        marker): what ``max_attempts`` limits. All of them when no run left a marker."""
        starts = [o.record.observed_at for o in self.observations
                  if o.record.state == RUN_STARTED and o.record.source == EXECUTOR_SOURCE]
        if not starts:
            return len(self.attempts)
        since = max(starts)
        return sum(1 for attempt in self.attempts if attempt.started_at >= since)

    @property
    def label(self) -> str:
        """``funds.load 2026-12-01``: how people name the unit in a meeting."""
        unit = self.unit
        return f"{unit.pipeline}.{unit.task} {wording.interval(unit.interval)}"

    @property
    def asserted(self) -> OperatorAssertion | None:
        """The operator's resolution the unit's state rests on, if it rests on one."""
        if self.status.basis != "asserted" or not self.attempts:
            return None
        return self.attempts[-1].asserted

    @property
    def outcome_label(self) -> str:
        """The latest attempt's outcome (the attempt vocabulary, not the unit's health), plus
        who asserted it when an operator did: ``succeeded (asserted by an operator (alice))``."""
        if not self.attempts:
            return "no attempt"
        latest = self.attempts[-1]
        if latest.asserted is None:
            return latest.outcome
        return (f"{latest.outcome} "
                f"({wording.asserted_by(latest.asserted.operator, said=latest.asserted.said)})")

    @property
    def latest_decision(self) -> RecordedDecision | None:
        return self.decisions[-1] if self.decisions else None

    @property
    def downstream(self) -> tuple[str, ...]:
        """The tasks that wait on this unit (transitively), as its latest run recorded them:
        the consumers a missed deadline reaches."""
        for observation in reversed(self.observations):
            record = observation.record
            if record.state == RUN_STARTED and record.source == EXECUTOR_SOURCE:
                return tuple(record.detail.get("downstream") or ())
        return ()

    @property
    def current_decision(self) -> RecordedDecision | None:
        latest = self.latest_decision
        return latest if latest is not None and latest.current else None

    @property
    def latest_observation(self) -> Observation | None:
        return max(self.observations, key=lambda o: (o.record.observed_at, o.record.seq),
                   default=None)

    @property
    def max_attempts(self) -> int | None:
        value = self.policy.get("max_attempts", self.policy.get("maxAttempts"))
        return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class PartitionHistory:
    """Every fingerprint version of one partition (verified: computed inside the database)."""

    destination: str
    partition: str
    versions: tuple[FingerprintRecord, ...]

    @property
    def diffs(self) -> tuple[FingerprintDiff, ...]:
        """Each version against the one before it (the first against nothing)."""
        previous: FingerprintRecord | None = None
        found = []
        for version in self.versions:
            found.append(FingerprintDiff(before=previous, after=version))
            previous = version
        return tuple(found)


@dataclass(frozen=True)
class Evidence:
    """The report model: units, partitions, and what is assumed or still open."""

    ledger: str
    as_of: datetime
    pipeline: str | None
    units: tuple[UnitReport, ...]
    partitions: tuple[PartitionHistory, ...]
    assumptions: tuple[Assumption, ...]
    open_questions: tuple[Assumption, ...]
    left_out: int = 0

    def in_state(self, *states: Health | str) -> list[UnitReport]:
        return [unit for unit in self.units if unit.status.state in states]

    def unit(self, uow_id: str) -> UnitReport:
        for unit in self.units:
            if unit.uow_id == uow_id:
                return unit
        raise KeyError(uow_id)


def group_assumptions(items: Iterable[Assumption]) -> list[tuple[str, list[str], str]]:
    """``(text, subjects, origin)`` with each distinct text once, in first-seen order.

    The same assertion recorded for ten units reads better as one line naming the ten.
    """
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for item in items:
        subjects, origins = groups.setdefault(item.text, ([], []))
        if item.subject not in subjects:
            subjects.append(item.subject)
        if item.origin not in origins:
            origins.append(item.origin)
    return [
        (text, subjects,
         "; ".join(origins) if len(origins) <= 2 else f"{origins[0]} and {len(origins) - 1} more")
        for text, (subjects, origins) in groups.items()
    ]


# -- gathering -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitsRead:
    """A pipeline's units (every pipeline's when ``pipeline`` is None) as recorded by ``at``,
    with their timelines: read once, so that reports built as of the same instant (``twice
    status`` and ``twice decide --ledger``: their rows, then their health) share one read of a
    large ledger instead of each reading it whole."""

    at: datetime
    pipeline: str | None
    recorded: tuple[UnitRecord, ...]  # all of them, also those recorded after ``at``
    units: tuple[UnitRecord, ...]  # those recorded by ``at``
    timelines: Mapping[str, list[TimelineEvent]]


def read_units(ledger: LedgerReader, at: datetime, pipeline: str | None = None, *,
               task: str | None = None, starting: datetime | None = None) -> UnitsRead:
    """The units (narrowed as :func:`gather` narrows them) and their timelines, as of ``at``."""
    recorded = tuple(ledger.units(pipeline=pipeline, task=task, starting=starting))
    units = tuple(u for u in recorded if u.created_at <= at)
    return UnitsRead(at, pipeline, recorded, units,
                     ledger.timelines([unit.uow_id for unit in units]))


def gather(
    ledger: LedgerReader,
    *,
    as_of: datetime | None = None,
    pipeline: str | None = None,
    deadline: DeadlineSpec = None,
    max_observation_age: timedelta | None = None,
    live: bool | None = None,
    task: str | None = None,
    starting: datetime | None = None,
    read: UnitsRead | None = None,
) -> Evidence:
    """Read the ledger into an :class:`Evidence` model as of ``as_of`` (default: its clock now).

    ``task`` and ``starting`` narrow it to one task, and to the intervals that start at
    ``starting``: one unit's slot, all a unit's health depends on (``twice explain`` reads no
    more of a large ledger than that).

    ``deadline`` (one instant, or a function of the unit) fills in for units whose decisions
    recorded none; it is marked as given by the caller. ``max_observation_age`` likewise fills
    in for decisions that recorded none; without either, staleness is left unstated.
    ``live`` (default: ``as_of`` not given): the report is of the present, so it may look at
    this host's processes (``twice.engine.evidence.gather_evidence``). ``read``: the units
    and timelines already read as of ``as_of`` for ``pipeline`` (:func:`read_units`).
    """
    moment = ledger.now() if as_of is None else as_of
    live = as_of is None if live is None else live
    if moment.utcoffset() is None:
        raise ReportError(f"as_of {moment.isoformat()} must be timezone-aware")
    if read is None:
        read = read_units(ledger, moment, pipeline, task=task, starting=starting)
    elif (read.at, read.pipeline, task, starting) != (moment, pipeline, None, None):
        raise ReportError("gather: the units read are of another instant or pipeline")
    recorded, units, timelines = read.recorded, list(read.units), read.timelines
    replaced = _superseded(units, timelines, moment)
    reports = [
        _with_plan(moment, _unit_report(unit, timelines[unit.uow_id], moment, deadline,
                                        max_observation_age, replaced.get(unit.uow_id), live),
                   timelines[unit.uow_id], live)
        for unit in units
    ]
    narrowed = task is not None or starting is not None
    partitions, later_versions = _partitions(ledger, moment, pipeline, units, narrowed)
    assumptions, open_questions = _assumptions(reports, partitions, deadline, moment)
    return Evidence(
        ledger=ledger.url,
        as_of=moment,
        pipeline=pipeline,
        units=tuple(reports),
        partitions=tuple(partitions),
        assumptions=tuple(assumptions),
        open_questions=tuple(open_questions),
        left_out=sum(r.left_out for r in reports) + later_versions
        + len(recorded) - len(units),
    )


def _superseded(units: list[UnitRecord], timelines: Mapping[str, list[TimelineEvent]],
                as_of: datetime) -> dict[str, str]:
    """``{uow_id: newer uow_id}`` for units another unit of the same task and interval replaced.

    A changed input or transform version is a new unit (``identify_unit``); the one the engine
    took up last is the current one: the latest to be recorded, to have a run start on it or
    an attempt begin, by ``as_of``. What follows from an earlier start (an attempt finishing,
    its errors, a reconcile) does not count: a process paused past its lease whose late write
    was fenced records its refusal after the newer unit's success, and is not current for it.
    """
    groups: dict[tuple[str, str, str], list[UnitRecord]] = {}
    for unit in units:
        groups.setdefault((unit.pipeline, unit.task, unit.interval.label), []).append(unit)
    replaced: dict[str, str] = {}
    for group in groups.values():
        if len(group) < 2:
            continue

        def last_activity(unit: UnitRecord) -> tuple[datetime, int]:
            known = [e for e in timelines[unit.uow_id] if _known_by(e, as_of) and _takes_up(e)]
            latest = max(known, key=lambda e: (e.at, e.seq), default=None)
            return (unit.created_at, 0) if latest is None else (latest.at, latest.seq)

        current = max(group, key=last_activity)
        for unit in group:
            if unit.uow_id != current.uow_id:
                replaced[unit.uow_id] = current.uow_id
    return replaced


def _takes_up(event: TimelineEvent) -> bool:
    """Whether ``event`` is the engine taking its unit up: recording it, starting a run on it,
    beginning an attempt (see ``_superseded``)."""
    if event.kind in ("unit-recorded", "attempt-started"):
        return True
    record = event.record
    return (event.kind == "observation" and isinstance(record, ObservationRecord)
            and record.state == RUN_STARTED)


def _known_by(event: TimelineEvent, as_of: datetime) -> bool:
    if event.at > as_of:
        return False
    record = event.record
    return not isinstance(record, ObservationRecord) or record.recorded_at <= as_of


@dataclass
class _AttemptDraft:
    number: int
    holder: str
    started_at: datetime
    generation: int | None
    job_id: str | None
    changes: list[OutcomeChange] = field(default_factory=list)


def _unit_report(
    unit: UnitRecord,
    timeline: list[TimelineEvent],
    as_of: datetime,
    deadline: DeadlineSpec,
    max_age: timedelta | None,
    superseded_by: str | None = None,
    live: bool = False,
) -> UnitReport:
    drafts: dict[int, _AttemptDraft] = {}
    observations: list[ObservationRecord] = []
    decisions: list[DecisionRecord] = []
    errors: list[ErrorRecord] = []
    nonfatal: list[NonfatalErrorRecord] = []
    fingerprints: list[FingerprintRecord] = []
    generations: dict[int, Generation] = {}
    last_evidence: datetime | None = None
    known = [e for e in timeline if _known_by(e, as_of)]
    for event in known:
        kind, detail, record = event.kind, event.detail, event.record
        if kind not in ("decision", "unit-recorded"):
            last_evidence = event.at if last_evidence is None else max(last_evidence, event.at)
        if kind == "attempt-started" and event.attempt is not None:
            drafts[event.attempt] = _AttemptDraft(
                event.attempt, str(detail.get("holder", "")), event.at,
                detail.get("generation"), detail.get("job_id"),
            )
        elif kind == "attempt-finished" and event.attempt in drafts:
            outcome = cast(AttemptOutcome, detail.get("outcome", "unknown"))
            asserted = _event_assertion(event, outcome)
            cause = "finished" if asserted is None else asserted.label
            drafts[event.attempt].changes.append(
                OutcomeChange(event.at, outcome, cause, asserted)
            )
        elif kind in ("observation", "lease-takeover") and isinstance(record, ObservationRecord):
            observations.append(record)
            for number in detail_value(record.detail, ("attempts_now_unknown",)) or ():
                if number in drafts:
                    drafts[number].changes.append(
                        OutcomeChange(event.at, "unknown", "lease taken over")
                    )
        elif kind == "decision" and isinstance(record, DecisionRecord):
            decisions.append(record)
        elif kind == "error" and isinstance(record, ErrorRecord):
            errors.append(record)
        elif kind == "nonfatal-error" and isinstance(record, NonfatalErrorRecord):
            nonfatal.append(record)
        elif kind == "fingerprint" and isinstance(record, FingerprintRecord):
            fingerprints.append(record)
        elif kind in ("job-generation", "generation-marked"):
            _track_generation(generations, event)
    attempts = _attempts(drafts, as_of if live else None)
    settings = _run_settings(observations)
    recorded_max_age = (_latest_detail_span(decisions, MAX_AGE_KEYS)
                        or detail_span(settings, MAX_AGE_KEYS))
    age_limit = recorded_max_age or max_age or timedelta(seconds=DEFAULT_MAX_OBSERVATION_AGE)
    age_origin: Literal["recorded", "given", "default"] = (
        "recorded" if recorded_max_age is not None
        else "given" if max_age is not None else "default")
    seen = tuple(_observation(o, attempts, as_of, age_limit) for o in observations)
    decided = tuple(_decision(d, last_evidence) for d in decisions)
    policy = _latest_policy(decisions) or _settings_policy(settings)
    status = assess(unit, attempts, seen, decided, errors, fingerprints, as_of, age_limit,
                    superseded_by)
    return UnitReport(
        unit=unit,
        attempts=attempts,
        observations=seen,
        decisions=decided,
        generations=tuple(generations[n] for n in sorted(generations)),
        errors=tuple(errors),
        nonfatal_errors=tuple(nonfatal),
        fingerprints=tuple(fingerprints),
        status=status,
        deadline=_deadline(unit, decided, deadline),
        max_observation_age=age_limit,
        policy=policy,
        left_out=len(timeline) - len(known),
        settings=settings,
        recorded_seq=next((e.seq for e in known if e.kind == "unit-recorded"), 0),
        max_age_origin=age_origin,
    )


def _with_plan(as_of: datetime, unit: UnitReport, timeline: Sequence[TimelineEvent],
               live: bool = False) -> UnitReport:
    """Add the planner's decision as of ``as_of`` to a unit that needs an action and has no
    current recorded decision (the planner's view of evidence, ``twice.engine.evidence``, as
    ``twice status`` shows it): what to do next is never left unsaid while something runs."""
    from dataclasses import replace

    from twice.core.policy import RetryPolicy
    from twice.core.timescale import micros_to_instant
    from twice.engine.evidence import PlanSettings, evidence_from_timeline, plan_unit

    state = unit.status.state
    if unit.current_decision is not None or state not in AWAITING_ACTION:
        return unit
    evidence = evidence_from_timeline(unit.unit, timeline, as_of, live=live)
    origin: Literal["recorded", "default"] = "recorded"
    if evidence.settings is None:
        if state not in NEEDS_FRESH_EVIDENCE:
            return unit  # a retry's timing needs the policy: not invented here
        # A running or unknown attempt's next step (refresh, observe, reconcile) does not
        # depend on the retry policy, only on the observation age limit.
        age = (unit.max_observation_age or timedelta(seconds=DEFAULT_MAX_OBSERVATION_AGE))
        settings = PlanSettings(policy=RetryPolicy(), max_observation_age=age.total_seconds())
        evidence = replace(evidence, settings=settings, settings_source="pipeline")
        origin = "default"
    result = plan_unit(evidence)
    if result is None:
        return unit

    def instant(value: int | float | None) -> datetime | None:
        return None if value is None else micros_to_instant(int(value))

    planned = PlannedDecision(
        decision=result.decision.value, reason=result.reason, as_of=as_of, settings=origin,
        earliest_start=instant(result.earliest_start),
        estimated_finish=instant(result.estimated_finish),
        duration=None if result.estimated_finish is None else evidence.assumed_duration(),
    )
    return replace(unit, planned=planned)


def _run_settings(observations: list[ObservationRecord]) -> Mapping[str, Any]:
    """The plan settings the latest executor run recorded with its ``run-started`` marker
    (``twice.engine.evidence.PlanSettings.to_detail``): policy, estimates, safe_repeat, age
    limit."""
    for record in reversed(observations):
        if record.state == RUN_STARTED and record.source == EXECUTOR_SOURCE:
            settings = record.detail.get("settings")
            if isinstance(settings, Mapping):
                return dict(settings)
    return {}


def _settings_policy(settings: Mapping[str, Any]) -> Mapping[str, Any]:
    policy = settings.get("policy")
    return dict(policy) if isinstance(policy, Mapping) else {}


def _track_generation(generations: dict[int, Generation], event: TimelineEvent) -> None:
    detail = event.detail
    number = detail.get("generation")
    if not isinstance(number, int):
        return
    if event.kind == "job-generation":
        generations[number] = Generation(
            number, str(detail.get("job_id", "")), "active", event.at, event.at
        )
    elif number in generations:
        state = cast(GenerationState, detail.get("state", generations[number].state))
        previous = generations[number]
        generations[number] = Generation(number, previous.job_id, state, previous.taken_at,
                                         event.at)


def _attempts(drafts: Mapping[int, _AttemptDraft], now: datetime | None = None
              ) -> tuple[Attempt, ...]:
    """The attempts, each with its outcome changes in time order. ``now``: the report is of
    the present, so a running attempt whose process has exited is unknown from ``now``
    (``twice.engine.evidence.gather_evidence``, ``live``)."""
    built: list[Attempt] = []
    for number in sorted(drafts):
        draft = drafts[number]
        changes = tuple(sorted(draft.changes, key=lambda c: c.at))
        if not changes and now is not None and lease_holders.exited(draft.holder):
            changes = (OutcomeChange(now, "unknown", PROCESS_EXITED),)
        previous_end = built[-1].ended_at if built else None
        gap = None
        if previous_end is not None and draft.started_at >= previous_end:
            gap = draft.started_at - previous_end
        asserted = changes[-1].asserted if changes else None
        built.append(Attempt(
            number=number,
            holder=draft.holder,
            started_at=draft.started_at,
            outcome=changes[-1].outcome if changes else "running",
            generation=draft.generation,
            job_id=draft.job_id,
            changes=changes,
            gap_before=gap,
            basis="executed" if asserted is None else "asserted",
        ))
    return tuple(built)


def _text_of(detail: Mapping[str, Any]) -> str:
    return " ".join(str(v) for v in detail.values() if isinstance(v, str)).lower()


def _observation_kinds(
    record: ObservationRecord, attempts: tuple[Attempt, ...]
) -> frozenset[str]:
    detail = record.detail
    state = record.state.strip().lower()
    kinds: set[str] = set()
    if assertion_of(record) is not None:
        return frozenset({"operator-resolution"})  # a person's word: it shows nothing else
    if record.source == LEASE_SOURCE:
        kinds.add("lease-takeover")
    if record.source.startswith("destination:"):
        kinds.add("commit-record")
    status_code = detail_value(detail, ("http_status", "status_code", "code"))
    text = _text_of(detail)
    if ("duplicate" in state or _flag(detail.get("duplicate")) or status_code == 409
            or "duplicate" in text or "already exists" in text):
        kinds.add("duplicate")
    remote_state = str(detail.get("state", state)).strip().lower()
    error_result = detail_value(detail, ("errorResult", "error_result"))
    if (remote_state == "done" or state == "done") and error_result:
        kinds.add("done-with-error")
    elif state in FAILED_STATES and record.source != LEASE_SOURCE:
        kinds.add("done-with-error")
    acceptance = detail.get("acceptance")
    passed = acceptance.get("passed") if isinstance(acceptance, Mapping) else None
    if passed is False or state in ("rejected", "validation-failed"):
        kinds.add("validation-failed")
    elif state in VALIDATED_STATES or passed is True or _flag(detail.get("validated")):
        kinds.add("validated")
    if "lease-takeover" not in kinds:
        started = [a for a in attempts if a.started_at <= record.observed_at]
        latest = started[-1] if started else None
        since = latest.unknown_since if latest is not None else None
        if ("reconcil" in record.source.lower() or _flag(detail.get("reconcile"))
                or (since is not None and since <= record.observed_at)):
            kinds.add("reconcile")
    return frozenset(kinds)


def _observation(
    record: ObservationRecord,
    attempts: tuple[Attempt, ...],
    as_of: datetime,
    max_age: timedelta | None,
) -> Observation:
    stale_at = None if max_age is None else record.observed_at + max_age
    return Observation(
        record=record,
        age=as_of - record.observed_at,
        stale=None if stale_at is None else as_of > stale_at,
        stale_at=stale_at,
        kinds=_observation_kinds(record, attempts),
        basis="observed" if assertion_of(record) is None else "asserted",
    )


def _decision(record: DecisionRecord, last_evidence: datetime | None) -> RecordedDecision:
    detail = record.detail
    assumed = []
    if _flag(detail_value(detail, SAFE_REPEAT_KEYS)):
        assumed.append("safeRepeat")
    if detail_value(detail, (*DURATION_KEYS, *VALIDATION_KEYS)) is not None:
        assumed.append("estimated durations")
    return RecordedDecision(
        record=record,
        current=last_evidence is None or record.as_of >= last_evidence,
        # the engine records the deadline with the evidence it decided on
        deadline=detail_instant(detail, DEADLINE_KEYS) or detail_instant(
            _mapping(detail.get("evidence")), DEADLINE_KEYS),
        earliest_start=detail_instant(detail, EARLIEST_START_KEYS),
        estimated_finish=detail_instant(detail, ESTIMATED_FINISH_KEYS),
        backoff=detail_span(detail, BACKOFF_KEYS),
        assumed=tuple(assumed),
        duration=AssumedDuration.from_detail(detail),
    )


def _latest_detail_span(decisions: list[DecisionRecord], keys: tuple[str, ...]) -> timedelta | None:
    for record in reversed(decisions):
        found = detail_span(record.detail, keys)
        if found is not None:
            return found
    return None


def _latest_policy(decisions: list[DecisionRecord]) -> Mapping[str, Any]:
    """The retry policy the latest decision recorded (a mapping, as ``RetryPolicy.to_dict``)."""
    for record in reversed(decisions):
        policy = detail_value(record.detail, POLICY_KEYS)
        if isinstance(policy, Mapping):
            return dict(policy)
        limit = detail_value(record.detail, MAX_ATTEMPTS_KEYS)
        if isinstance(limit, int) and not isinstance(limit, bool):
            return {"max_attempts": limit}
    return {}


def _deadline(unit: UnitRecord, decisions: tuple[RecordedDecision, ...],
              given: DeadlineSpec) -> StatedDeadline | None:
    """The deadline the decisions used wins: it is what they were decided against."""
    for decision in reversed(decisions):
        if decision.deadline is not None:
            return StatedDeadline(
                decision.deadline,
                f"recorded with decision {decision.record.decision} (seq {decision.record.seq})",
                "decided",
            )
    at = given(unit) if callable(given) else given
    if at is None:
        return None
    return StatedDeadline(at, "given by the caller, not recorded in the ledger", "assumed")


def _partitions(
    ledger: LedgerReader, as_of: datetime, pipeline: str | None, units: list[UnitRecord],
    narrowed: bool = False,
) -> tuple[list[PartitionHistory], int]:
    """Fingerprint histories known at ``as_of``, and how many later versions were left out.

    With a pipeline filter, a partition belongs to it through a unit's destination or a version
    recorded by one of its units (a backfill may record fingerprints without a unit).
    ``narrowed`` (a task or interval filter): only the units' own partitions.
    """
    uow_ids = {u.uow_id for u in units}
    destinations = {u.destination for u in units}
    slots = {(u.destination, u.interval.label) for u in units}
    found = []
    later = 0
    for latest in ledger.latest_fingerprints():
        if narrowed and (latest.destination, latest.partition) not in slots:
            continue
        every = ledger.fingerprints(latest.destination, latest.partition)
        ours = latest.destination in destinations or any(v.uow_id in uow_ids for v in every)
        if pipeline is not None and not ours:
            continue
        versions = tuple(v for v in every if v.recorded_at <= as_of)
        later += len(every) - len(versions)
        if versions:
            found.append(PartitionHistory(latest.destination, latest.partition, versions))
    return found, later


def _assumptions(
    units: list[UnitReport], partitions: list[PartitionHistory], deadline: DeadlineSpec,
    as_of: datetime,
) -> tuple[list[Assumption], list[Assumption]]:
    """Caller assertions and estimates (assumed), and the questions the evidence leaves open."""
    assumed: dict[tuple[str, str], Assumption] = {}
    open_questions: list[Assumption] = []
    for unit in units:
        for decision in unit.decisions:
            _decision_assumptions(unit, decision, assumed)
        _settings_assumptions(unit, assumed)
        if unit.deadline is not None and unit.deadline.basis == "assumed":
            key = (unit.label, "deadline")
            assumed[key] = Assumption(
                unit.label,
                f"deadline {wording.instant(unit.deadline.at)} was given by the caller; no "
                "recorded decision used it",
                "command line" if isinstance(deadline, datetime) else "pipeline definition",
            )
        open_questions.extend(_open_questions(unit, as_of))
    for history in partitions:
        for diff in history.diffs:
            if diff.before is not None and not diff.comparable:
                open_questions.append(Assumption(
                    f"{history.destination}/{history.partition}",
                    f"fingerprint v{diff.before.version} and v{diff.after.version} used different "
                    "key columns or algorithms: their checksums cannot be compared",
                    "fingerprints",
                ))
    return list(assumed.values()), open_questions


#: The one sentence for a task's ``safe_repeat`` (``safeRepeat`` in the lab), however recorded.
SAFE_REPEAT_TEXT = (
    "safe_repeat (safeRepeat) is asserted by the caller: repeating the task is assumed to have "
    "no extra effect; twice did not prove it"
)


def _task_name(unit: UnitReport) -> str:
    """Task-level assertions name the task once, not each of its units."""
    return f"{unit.unit.pipeline}.{unit.unit.task}"


def _settings_assumptions(unit: UnitReport, found: dict[tuple[str, str], Assumption]) -> None:
    """What the latest executor run recorded that the caller asserted or estimated."""
    settings = unit.settings
    if not settings:
        return
    task = _task_name(unit)
    origin = "task definition, recorded with each run (run-started)"
    if _flag(settings.get("safe_repeat")):
        found.setdefault((task, "safe_repeat"), Assumption(task, SAFE_REPEAT_TEXT, origin))
    duration = detail_span(settings, ("estimated_duration",))
    if duration is not None:
        validation = detail_span(settings, ("validation_duration",)) or timedelta(0)
        found.setdefault((task, "estimated_duration"), Assumption(
            task,
            f"estimated duration {wording.span(duration)} (validation "
            f"{wording.span(validation)}) is the caller's estimate, used for deadline "
            "decisions; not measured",
            origin,
        ))


def _decision_assumptions(
    unit: UnitReport, decision: RecordedDecision, found: dict[tuple[str, str], Assumption]
) -> None:
    record = decision.record
    detail = record.detail
    origin = f"decision {record.decision} (seq {record.seq})"
    if _flag(detail_value(detail, SAFE_REPEAT_KEYS)):
        found[(_task_name(unit), "safe_repeat")] = Assumption(
            _task_name(unit), SAFE_REPEAT_TEXT, origin)
    duration = detail_span(detail, DURATION_KEYS)
    validation = detail_span(detail, VALIDATION_KEYS)
    if decision.estimated_finish is not None and (duration or validation) is not None:
        parts = []
        if duration is not None:
            parts.append(f"execution {wording.span(duration)}")
        if validation is not None:
            parts.append(f"validation {wording.span(validation)}")
        found[(unit.label, f"estimate-{record.seq}")] = Assumption(
            unit.label,
            f"estimated finish {wording.instant(decision.estimated_finish)} rests on estimated "
            f"durations ({', '.join(parts)}), not measurements; queues, capacity and future "
            "failures are not modelled",
            origin,
        )


def _open_questions(unit: UnitReport, unit_as_of: datetime) -> list[Assumption]:
    questions = []
    state = unit.status.state
    asserted = unit.attempts[-1].asserted if unit.attempts else None
    if unit.status.basis == "asserted" and asserted is not None:
        questions.append(Assumption(
            unit.label,
            f"attempt {unit.attempts[-1].number}'s outcome ({asserted.outcome}) is "
            f"{asserted.label}; neither twice nor a service observed it",
            f"{OPERATOR_SOURCE_PREFIX}{asserted.operator}",
        ))
    elif state == Health.UNKNOWN:
        questions.append(Assumption(
            unit.label,
            "the outcome is unknown: a retry may duplicate work until it is settled (commit "
            "record, the job looked up by its id, or an operator's resolution)",
            "attempts",
        ))
    elif state == Health.UNVERIFIED:
        questions.append(Assumption(
            unit.label,
            "'succeeded' means the attempt finished without error; nothing verified its output "
            "(no acceptance or fingerprint recorded by that attempt)",
            "attempts",
        ))
    if state == Health.STALE_EVIDENCE or (state in NEEDS_FRESH_EVIDENCE and unit.status.stale_at
                                          is not None and unit.status.stale_at < unit_as_of):
        questions.append(Assumption(
            unit.label,
            f"the freshest evidence ({unit.status.source or 'attempt record'}) went stale at "
            f"{wording.instant(unit.status.stale_at or unit_as_of)}, over the "
            f"{wording.span(unit.max_observation_age or timedelta(0))} limit: refresh it "
            "before relying on it",
            "observations",
        ))
    needs_action = state in NEEDS_ATTENTION or state in (Health.WAITING, Health.RUNNING)
    if unit.latest_decision is not None and unit.current_decision is None and needs_action:
        questions.append(Assumption(
            unit.label,
            "evidence was recorded after the latest decision: no current planner decision",
            "decisions",
        ))
    return questions
