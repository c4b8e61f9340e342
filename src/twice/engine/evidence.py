"""Turn what the ledger recorded about a unit of work into the planner's ``TaskEvidence``.

The executor (before every retry), ``twice status`` and ``twice decide --ledger`` all build
evidence here, so the decision the executor acted on is the decision an operator recomputes
from the ledger afterwards. Evidence is taken *as of* an instant: records made later are
ignored (an attempt that finished after ``as_of`` was still running then), so "what would the
planner have said at 05:40" is a question the ledger can answer.

Runs and budgets: every executor run of a unit starts with a ``run-started`` observation that
records the attempt number it began at and the planning numbers it used (``PlanSettings``: the
policy, estimated and validation durations, the caller's safeRepeat assertion, the deadlines).
The attempt budget counts the attempts of the latest run, and backoff restarts with it; attempt
numbers in the ledger keep growing, so the full history stays true. This is the one rule
Airflow breaks by clearing: a fresh budget while ``try_number`` keeps counting backoff up.

Times reach the planner as integer microseconds (``twice.core.timescale``), so the arithmetic is
exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from twice.core.decision import (
    Decision,
    DecisionResult,
    DecisionWindow,
    TaskEvidence,
    TaskState,
    decide_task,
)
from twice.core.outcomes import ATTEMPT_OUTCOMES, UNSETTLED_OUTCOMES, AttemptOutcome, task_state
from twice.core.policy import PolicyError, RetryPolicy
from twice.core.timescale import (
    MICROS,
    duration_to_micros,
    format_duration,
    format_instant,
    instant_to_micros,
)

if TYPE_CHECKING:
    from twice.core.interval import Interval
    from twice.define.pipeline import Pipeline, Task
    from twice.ledger import (
        AttemptRecord,
        DecisionRecord,
        LedgerReader,
        ObservationRecord,
        TimelineEvent,
        UnitRecord,
    )
    from twice.ledger.history import History

EXECUTOR_SOURCE = "executor"
RECONCILE_SOURCE = "reconcile"
#: Observation state that opens an executor run; its detail holds the run's plan settings.
RUN_STARTED = "run-started"
#: ``cause`` of a refusal the cost guard recorded (``twice.engine.cost.CostCheck.to_detail``).
COST_GUARD = "cost-guard"
DEFAULT_MAX_OBSERVATION_AGE = 600.0
# Stands in for "no deadline": far enough never to bind, printed as "none".
_NO_DEADLINE_YEARS = 100



def iso(value: datetime | None) -> str | None:
    """UTC ISO-8601 with ``Z``, the one way reports write instants."""
    if value is None:
        return None
    return format_instant(instant_to_micros(value.astimezone(UTC)))


def aware_instant(value: object) -> datetime | None:
    """An aware instant recorded as a datetime or ISO-8601 text; anything else (a naive time,
    a teaching-clock number, which has no date) is None."""
    if isinstance(value, datetime):
        return value if value.utcoffset() is not None else None
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.utcoffset() is not None else None


@dataclass(frozen=True)
class PlanSettings:
    """The planning numbers of one run: recorded with it, so status can decide without the file.

    ``duration`` is the task's ``estimated_duration`` (None: use the last attempt's measured
    duration, else 0). ``deadline`` is the delivery deadline, ``workflow_deadline`` the end of
    the run's workflow timeout; the executor plans against the earlier of the two.
    """

    policy: RetryPolicy
    duration: float | None = None
    validation: float = 0.0
    safe_repeat: bool = False
    deadline: datetime | None = None
    workflow_deadline: datetime | None = None
    max_observation_age: float = DEFAULT_MAX_OBSERVATION_AGE
    transient: tuple[str, ...] = ()

    @classmethod
    def for_task(
        cls,
        pipeline: Pipeline,
        task: Task,
        interval: Interval,
        *,
        max_observation_age: float = DEFAULT_MAX_OBSERVATION_AGE,
        workflow_deadline: datetime | None = None,
    ) -> PlanSettings:
        return cls(
            policy=task.retry,
            duration=task.estimated_duration,
            validation=task.validation_duration or 0.0,
            safe_repeat=task.repeat_is_safe,
            deadline=pipeline.deadline_for(interval),
            workflow_deadline=workflow_deadline,
            max_observation_age=max_observation_age,
            transient=tuple(error.__name__ for error in task.retry.transient),
        )

    def effective_deadline(self, *, include_workflow: bool = True) -> datetime | None:
        candidates = [self.deadline]
        if include_workflow:
            candidates.append(self.workflow_deadline)
        known = [value for value in candidates if value is not None]
        return min(known) if known else None

    def to_detail(self) -> dict[str, Any]:
        return {
            "policy": {**self.policy.to_dict(), "transient": list(self.transient)},
            "estimated_duration": self.duration,
            "validation_duration": self.validation,
            "safe_repeat": self.safe_repeat,
            "deadline": iso(self.deadline),
            "workflow_deadline": iso(self.workflow_deadline),
            "max_observation_age": self.max_observation_age,
        }

    @classmethod
    def from_detail(cls, detail: Mapping[str, Any]) -> PlanSettings | None:
        """Rebuild from a run marker's detail; None if it is missing or malformed."""
        raw = detail.get("policy")
        if not isinstance(raw, Mapping):
            return None
        try:
            policy = RetryPolicy(
                max_attempts=int(raw["max_attempts"]),
                initial_delay=float(raw["initial_delay"]),
                multiplier=float(raw["multiplier"]),
                max_delay=float(raw["max_delay"]),
                jitter=raw.get("jitter", "none"),
                attempt_timeout=raw.get("attempt_timeout"),
            )
            duration = detail.get("estimated_duration")
            return cls(
                policy=policy,
                duration=None if duration is None else float(duration),
                validation=float(detail.get("validation_duration") or 0.0),
                safe_repeat=bool(detail.get("safe_repeat", False)),
                deadline=aware_instant(detail.get("deadline")),
                workflow_deadline=aware_instant(detail.get("workflow_deadline")),
                max_observation_age=float(
                    detail.get("max_observation_age", DEFAULT_MAX_OBSERVATION_AGE)
                ),
                transient=tuple(str(name) for name in raw.get("transient", ())),
            )
        except (KeyError, TypeError, ValueError, PolicyError):
            return None


@dataclass(frozen=True)
class UnitEvidence:
    """Everything the ledger knew about one unit of work at ``as_of``."""

    unit: UnitRecord
    as_of: datetime
    settings: PlanSettings | None
    settings_source: str  # "pipeline", "ledger" (the latest run's marker) or "none"
    attempts: tuple[AttemptRecord, ...]
    run_first_attempt: int
    observation: ObservationRecord | None
    not_started: DecisionRecord | None
    include_workflow_deadline: bool = False
    rerun_of: int | None = None  # the succeeded attempt the latest run repeats, if any
    run_started_at: datetime | None = None  # when the latest run opened the unit
    #: the latest attempt was recorded running but its holder's process has exited (``live``):
    #: seen unknown now, in this host's process table
    exited_seen: bool = False

    @property
    def standing_refusal(self) -> DecisionRecord | None:
        """A cost-guard refusal of the latest run, with no attempt since: it stands until the
        plan or the budget changes (the next run checks the guard again), so the unit is not
        retry-eligible meanwhile."""
        refusal = self.not_started
        if refusal is None or refusal.detail.get("cause") != COST_GUARD:
            return None
        if self.run_started_at is not None and refusal.recorded_at < self.run_started_at:
            return None
        return refusal

    @property
    def uow_id(self) -> str:
        return self.unit.uow_id

    @property
    def latest(self) -> AttemptRecord | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def attempts_in_run(self) -> int:
        """Attempts of the latest run (what the budget counts)."""
        return sum(1 for attempt in self.attempts if attempt.number >= self.run_first_attempt)

    @property
    def state(self) -> TaskState | None:
        latest = self.latest
        return None if latest is None else task_state(latest.outcome)

    @property
    def observed_at(self) -> datetime | None:
        """The freshest evidence time: an observation, or an attempt's own start/finish."""
        times = []
        if self.observation is not None:
            times.append(self.observation.observed_at)
        latest = self.latest
        if latest is not None:
            times.append(latest.finished_at or latest.started_at)
        if self.exited_seen:
            times.append(self.as_of)
        return max(times) if times else None

    @property
    def source(self) -> str | None:
        """Who supplied the freshest evidence."""
        if self.exited_seen:
            return PROCESS_TABLE
        observation, latest = self.observation, self.latest
        attempt_time = None if latest is None else (latest.finished_at or latest.started_at)
        if observation is not None and (
            attempt_time is None or observation.observed_at >= attempt_time
        ):
            return observation.source
        return None if latest is None else f"{EXECUTOR_SOURCE} (attempt record)"

    @property
    def last_finished_at(self) -> datetime | None:
        latest = self.latest
        if latest is None or latest.outcome in UNSETTLED_OUTCOMES:
            return None
        return latest.finished_at

    @property
    def deadline(self) -> datetime | None:
        if self.settings is None:
            return None
        return self.settings.effective_deadline(include_workflow=self.include_workflow_deadline)

    def duration_seconds(self) -> float:
        """Estimated execution time (see ``duration_basis`` for where it comes from)."""
        return self._duration()[0]

    def assumed_duration(self) -> AssumedDuration:
        """The duration the planner assumes for an attempt and its basis, as commands show
        them (:class:`AssumedDuration`)."""
        return AssumedDuration(*self._duration())

    def duration_basis(self) -> str:
        """Where the estimate comes from: ``declared`` (estimated_duration), ``assumed: the
        task's timeout`` (no estimate: an attempt may take up to its timeout, so the planner
        never starts one that could not finish), ``measured`` (the last attempt), or ``none``
        (no estimate, no timeout: 0 s, which pipeline validation warns about)."""
        return self._duration()[1]

    def _duration(self) -> tuple[float, str]:
        settings = self.settings
        if settings is not None and settings.duration is not None:
            return settings.duration, "declared"
        if settings is not None and settings.policy.attempt_timeout is not None:
            return settings.policy.attempt_timeout, "assumed: the task's timeout"
        for attempt in reversed(self.attempts):
            if attempt.duration is not None and attempt.outcome != "unknown":
                return attempt.duration.total_seconds(), "measured"
        return 0.0, "none"

    def window(self) -> DecisionWindow:
        """The planner's frame in microseconds; needs ``settings``."""
        if self.settings is None:
            raise ValueError(f"{self.uow_id}: no plan settings (policy) recorded or given")
        as_of = instant_to_micros(self.as_of)
        deadline = self.deadline
        return DecisionWindow(
            as_of=as_of,
            deadline=_no_deadline(as_of) if deadline is None else instant_to_micros(deadline),
            max_observation_age=_micros(self.settings.max_observation_age),
            policy=_policy_in_micros(self.settings.policy),
        )

    def task_evidence(self) -> TaskEvidence | None:
        """The planner's view of the latest attempt; None before any attempt of this run
        (then ``plan_unit`` checks the first attempt itself)."""
        latest, state = self.latest, self.state
        if latest is None or state is None or self.settings is None:
            return None
        # Running, unknown and succeeded describe the unit whichever run they belong to;
        # a failed attempt of an earlier run leaves the new run at its first attempt, and so
        # does the success a rerun was opened to repeat.
        carried = state in (TaskState.RUNNING, TaskState.UNKNOWN) or (
            state is TaskState.SUCCEEDED
            and (self.rerun_of is None or latest.number > self.rerun_of)
        )
        in_run = self.attempts_in_run
        if in_run == 0 and not carried:
            return None
        observed = self.observed_at
        assert observed is not None
        finished = self.last_finished_at
        return TaskEvidence(
            id=self.uow_id,
            state=state,
            safe_repeat=self.settings.safe_repeat,
            attempts=max(in_run, 1),
            observed_at=instant_to_micros(observed),
            last_finished_at=None if finished is None else instant_to_micros(finished),
            duration=_micros(self.duration_seconds()),
            validation=_micros(self.settings.validation),
        )


#: ``UnitEvidence.duration_basis`` -> where a command says the assumed duration came from
#: (issue 39: a finish time says what it assumed an attempt takes, and why)
BASIS_WORDS: dict[str, str] = {
    "declared": "from its estimate",
    "assumed: the task's timeout": "from its timeout",
    "measured": "from its last measured attempt",
    "none": "no estimate, timeout or measurement",
}


@dataclass(frozen=True)
class AssumedDuration:
    """What the planner assumed one attempt takes (``seconds``) and why (``basis``, one of
    :data:`BASIS_WORDS`: the task's ``estimated_duration``, else its timeout, else the last
    measured attempt, else 0 s). Every command prints it through :meth:`text`, and its JSON
    through :meth:`to_dict`, so a planned finish time always says what it rests on."""

    seconds: float
    basis: str

    def text(self) -> str:
        """``assumed 2 min per attempt from its last measured attempt``, ``assumed 0 s per
        attempt: no estimate, timeout or measurement``: one phrase per decision."""
        words = BASIS_WORDS.get(self.basis, f"({self.basis})")
        said = f": {words}" if self.basis == "none" else f" {words}"  # 0 s: from nothing
        return f"assumed {spoken(self.seconds)} per attempt{said}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON keys: ``assumed_duration`` (seconds) and ``duration_basis``."""
        return {"assumed_duration": self.seconds, "duration_basis": self.basis}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> AssumedDuration | None:
        """Back from :meth:`to_dict`'s keys in a document; None when they are null."""
        return cls._of(document.get("assumed_duration"), document.get("duration_basis"))

    @classmethod
    def _of(cls, seconds: object, basis: object) -> AssumedDuration | None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not isinstance(
            basis, str
        ):
            return None
        return cls(float(seconds), basis)

    @classmethod
    def from_detail(cls, detail: Mapping[str, Any]) -> AssumedDuration | None:
        """From a recorded decision's detail (``Phase.record_decision`` writes its
        ``evidence``: ``duration`` and ``duration_basis``); None when it holds neither."""
        evidence = detail.get("evidence")
        if not isinstance(evidence, Mapping):
            return None
        return cls._of(evidence.get("duration"), evidence.get("duration_basis"))


def spoken(seconds: float) -> str:
    """``1 h``, ``2 min``, ``45 s``, ``1 h 30 min``, ``0.004 s``: how an operator says a
    duration."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h"] if hours else []
    if minutes:
        parts.append(f"{minutes} min")
    if secs and not hours:
        parts.append(f"{secs} s")
    return " ".join(parts) or f"{seconds:.2g} s"


def _policy_in_micros(policy: RetryPolicy) -> RetryPolicy:
    """The planner adds policy delays to instants, so they must share the window's unit."""
    return RetryPolicy(
        max_attempts=policy.max_attempts,
        initial_delay=_micros(policy.initial_delay),
        multiplier=policy.multiplier,
        max_delay=_micros(policy.max_delay),
        jitter="none",
        attempt_timeout=policy.attempt_timeout,
    )


def _micros(seconds: float) -> int:
    return duration_to_micros(timedelta(seconds=seconds))


def _no_deadline(as_of: int) -> int:
    return as_of + _NO_DEADLINE_YEARS * 366 * 86_400 * MICROS


def when_formatter(window: DecisionWindow) -> Any:
    """Instants for reason texts; the no-deadline stand-in prints as 'none'."""

    def when(value: int | float) -> str:
        if value >= window.as_of + (_NO_DEADLINE_YEARS - 1) * 365 * 86_400 * MICROS:
            return "(none set)"
        return format_instant(value)

    return when


def plan_unit(evidence: UnitEvidence) -> DecisionResult | None:
    """The planner's decision over ``evidence``; None without plan settings.

    Before any attempt of the run the lab's arithmetic is applied to attempt 1 directly
    (it starts now, no backoff): ``deadline-infeasible`` if it cannot finish, validation
    included, by the deadline, otherwise ``retry-eligible`` (the only "may start" word the
    vocabulary has).
    """
    if evidence.settings is None:
        return None
    refusal = evidence.standing_refusal
    if refusal is not None:
        return DecisionResult(
            evidence.uow_id, Decision.REPAIR_CAUSE,
            f"{refusal.reason}; revise the plan or the budget before running it again (a retry "
            "is checked against the same limit)",
        )
    window = evidence.window()
    when = when_formatter(window)
    task = evidence.task_evidence()
    if task is not None:
        return decide_task(task, window, when=when, span=format_duration)
    observed = evidence.observed_at
    if observed is not None:
        age = window.as_of - instant_to_micros(observed)
        if age > window.max_observation_age:
            return DecisionResult(
                evidence.uow_id,
                Decision.REFRESH_OBSERVATION,
                f"evidence observed at {when(instant_to_micros(observed))} is "
                f"{format_duration(age)} old, over the "
                f"{format_duration(window.max_observation_age)} limit: refresh it before acting",
            )
    number = (evidence.latest.number if evidence.latest else 0) + 1
    start = window.as_of
    finish = start + _micros(evidence.duration_seconds()) + _micros(evidence.settings.validation)
    timing = (
        f"no attempt in this run yet: attempt {number} could start at {when(start)} and finish, "
        f"validation included, at {when(finish)}"
    )
    if finish > window.deadline:
        return DecisionResult(
            evidence.uow_id, Decision.DEADLINE_INFEASIBLE,
            f"{timing}, after the deadline {when(window.deadline)}: do not start it",
            0, start, finish,
        )
    return DecisionResult(
        evidence.uow_id, Decision.RETRY_ELIGIBLE,
        f"{timing}, within the deadline {when(window.deadline)}", 0, start, finish,
    )


def gather_evidence(
    ledger: LedgerReader,
    uow_id: str,
    *,
    as_of: datetime | None = None,
    settings: PlanSettings | None = None,
    include_workflow_deadline: bool = False,
    live: bool = False,
    history: History | None = None,
) -> UnitEvidence:
    """Read one unit's evidence from the ledger as of ``as_of`` (default: the ledger's now).

    ``history``: the unit's ``Ledger.history`` already read in the caller's transaction
    (``Ledger.release_lease_and_read``), not read again.

    ``live``: the evidence is of the present, so a running attempt whose process on this host
    has exited (:func:`twice.ledger.lease_holders.exited`) is taken as unknown: seen now, not
    recorded yet (the next run takes its lease over, records that and reconciles it). Reports
    of the present (``twice status``, ``explain``, ``update``, ``decide --ledger``) pass it; a
    view of the past cannot know which processes ran then.

    ``settings`` (e.g. from the pipeline file) override the ones the latest run recorded.
    ``include_workflow_deadline``: plan against the recorded run's workflow deadline too (the
    executor does, inside that run; status and decide do not, as a new run gets a fresh one).
    """
    from twice.ledger import UnknownUnitError

    with ledger.snapshot():  # one consistent view, one transaction for the reads
        unit, recorded_attempts, recorded_observations, recorded_decisions = (
            ledger.history(uow_id) if history is None else history)
        if unit is None:
            raise UnknownUnitError(f"unknown unit of work {uow_id!r}")
        at = ledger.now() if as_of is None else as_of.astimezone(UTC)
        journal = ledger.timeline(uow_id) if _settled_later(recorded_attempts, at) else ()
    return evidence_of(unit, recorded_attempts, recorded_observations, recorded_decisions,
                       journal, at, settings=settings,
                       include_workflow_deadline=include_workflow_deadline, live=live)


def evidence_from_timeline(
    unit: UnitRecord, timeline: Sequence[TimelineEvent], at: datetime, *,
    settings: PlanSettings | None = None, live: bool = False,
) -> UnitEvidence:
    """:func:`gather_evidence` over a timeline already read (``Ledger.timelines``, which a
    report reads for many units at once): the journal names every attempt, observation and
    decision, each with its record as it is now, so nothing more is read."""
    from twice.ledger import AttemptRecord, DecisionRecord, ObservationRecord

    attempts: dict[int, AttemptRecord] = {}
    observations: dict[int, ObservationRecord] = {}
    decisions: dict[int, DecisionRecord] = {}
    for event in timeline:
        record = event.record
        if isinstance(record, AttemptRecord):
            attempts[record.number] = record
        elif isinstance(record, ObservationRecord):
            observations[record.seq] = record
        elif isinstance(record, DecisionRecord):
            decisions[record.seq] = record
    return evidence_of(
        unit, [attempts[n] for n in sorted(attempts)],
        sorted(observations.values(), key=lambda o: (o.observed_at, o.seq)),
        [decisions[seq] for seq in sorted(decisions)], timeline, at.astimezone(UTC),
        settings=settings, live=live,
    )


def _settled_later(attempts: Sequence[AttemptRecord], at: datetime) -> bool:
    """Whether an attempt begun by ``at`` was closed after it: how it stood then is in the
    journal (:func:`_outcomes_then`)."""
    return any(a.started_at <= at and a.finished_at is not None and a.finished_at > at
               for a in attempts)


def evidence_of(
    unit: UnitRecord,
    recorded_attempts: Sequence[AttemptRecord],
    recorded_observations: Sequence[ObservationRecord],
    recorded_decisions: Sequence[DecisionRecord],
    journal: Sequence[TimelineEvent],
    at: datetime,
    *,
    settings: PlanSettings | None = None,
    include_workflow_deadline: bool = False,
    live: bool = False,
) -> UnitEvidence:
    """The evidence of :func:`gather_evidence` from the unit's records (in recording order;
    ``journal``: its timeline, needed only when :func:`_settled_later`)."""
    ended = (_outcomes_then(journal, at, recorded_observations)
             if _settled_later(recorded_attempts, at) else {})
    attempts = tuple(
        _as_of_attempt(attempt, at, live, ended.get(attempt.number))
        for attempt in recorded_attempts
        if attempt.started_at <= at
    )
    observations = [obs for obs in recorded_observations if obs.observed_at <= at]
    markers = [obs for obs in observations if obs.state == RUN_STARTED]
    marker = markers[-1] if markers else None
    first = 1
    recorded = None
    rerun_of = None
    if marker is not None:
        raw_first = marker.detail.get("first_attempt")
        if isinstance(raw_first, int) and not isinstance(raw_first, bool):
            first = raw_first
        raw_rerun = marker.detail.get("rerun_of")
        if isinstance(raw_rerun, int) and not isinstance(raw_rerun, bool):
            rerun_of = raw_rerun
        raw_settings = marker.detail.get("settings")
        if isinstance(raw_settings, Mapping):
            recorded = PlanSettings.from_detail(raw_settings)
    chosen, source = (settings, "pipeline") if settings is not None else (recorded, "ledger")
    if chosen is None:
        source = "none"
    latest_number = attempts[-1].number if attempts else 0
    not_started = [
        decision
        for decision in recorded_decisions
        if decision.not_started and decision.recorded_at <= at
        and (decision.attempt or 0) > latest_number
    ]
    return UnitEvidence(
        unit=unit,
        as_of=at,
        settings=chosen,
        settings_source=source,
        attempts=attempts,
        run_first_attempt=first,
        observation=observations[-1] if observations else None,
        not_started=not_started[-1] if not_started else None,
        include_workflow_deadline=include_workflow_deadline,
        rerun_of=rerun_of,
        run_started_at=None if marker is None else marker.observed_at,
        # the attempts known at ``at`` are the first of those recorded; only the exited-holder
        # rule of _as_of_attempt turns a recorded "running" into "unknown"
        exited_seen=bool(attempts) and attempts[-1].outcome == "unknown"
        and recorded_attempts[len(attempts) - 1].outcome == "running",
    )


#: The source of what a report of the present sees in this host's process table.
PROCESS_TABLE = "process table"


def _outcomes_then(journal: Sequence[TimelineEvent], at: datetime,
                   observations: Sequence[ObservationRecord]
                   ) -> dict[int, tuple[AttemptOutcome, datetime]]:
    """How each attempt stood at ``at`` by the journal, for attempts whose row was closed
    again later: an attempt finished ``unknown`` (or taken over from a lost holder) and
    settled afterwards by reconciliation or ``twice resolve`` keeps only its last outcome in
    its row, but was unknown, not running, in between."""
    from twice.ledger import LEASE_TAKEOVER_STATE  # lazily, as in _as_of_attempt

    then: dict[int, tuple[AttemptOutcome, datetime]] = {}
    for observation in observations:
        if observation.state == LEASE_TAKEOVER_STATE and observation.observed_at <= at:
            for number in observation.detail.get("attempts_now_unknown") or ():
                if isinstance(number, int):
                    then[number] = ("unknown", observation.observed_at)
    for event in journal:
        if event.kind == "attempt-finished" and event.attempt is not None and event.at <= at:
            outcome = event.detail.get("outcome")
            if outcome in ATTEMPT_OUTCOMES:
                then[event.attempt] = (cast(AttemptOutcome, outcome), event.at)
    return then


def _as_of_attempt(attempt: AttemptRecord, at: datetime, live: bool = False,
                   then: tuple[AttemptOutcome, datetime] | None = None) -> AttemptRecord:
    """An attempt as it stood at ``at``: one that finished later was still running then,
    unless the journal says how it stood (``then``, from :func:`_outcomes_then`); a running
    one whose process has exited is unknown (``live``: see :func:`gather_evidence`)."""
    if attempt.finished_at is not None and attempt.finished_at > at:
        if then is not None:
            return replace(attempt, outcome=then[0], finished_at=then[1])
        return replace(attempt, outcome="running", finished_at=None)
    if live and attempt.outcome == "running":
        from twice.ledger import lease_holders  # lazily: the pure planner imports no driver

        if lease_holders.exited(attempt.holder):
            return replace(attempt, outcome="unknown")
    return attempt


def age_text(seconds: float) -> str:
    """Compact age for tables: 4 s, 3 min, 2.5 h, 3 d."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 0:
        return "future!"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"
