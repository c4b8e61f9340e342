"""What the ledger returns: frozen dataclasses, never database rows.

Reports, the planner and the executor read these, so they carry plain Python values only:
timezone-aware UTC datetimes, ints, strings and JSON-decoded ``detail`` mappings. Nothing here
imports SQLAlchemy, so callers can type against these records without loading it.

The vocabularies (attempt outcomes, error classifications, generation states, decisions) are
the ones in the design document; the ledger refuses anything else so that a typo never becomes
recorded "evidence".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, get_args

from twice.core.interval import Interval
from twice.core.outcomes import (
    AttemptOutcome,
    ErrorClassification,
)
from twice.core.resolution import RESOLUTION_OUTCOMES as RESOLUTION_OUTCOMES  # re-exported
from twice.core.resolution import ResolutionOutcome
from twice.core.unit import UnitOfWork

GenerationState = Literal["active", "confirmed-failed", "succeeded"]
GENERATION_STATES: tuple[GenerationState, ...] = get_args(GenerationState)

DecisionName = Literal[
    "refresh-observation",
    "observe-running",
    "reconcile-remote",
    "validate-output",
    "repair-cause",
    "attempts-exhausted",
    "reconcile-effects",
    "deadline-infeasible",
    "wait-backoff",
    "retry-eligible",
]
#: The planner's decisions in the lab's order of precedence.
DECISIONS: tuple[DecisionName, ...] = get_args(DecisionName)

EventKind = Literal[
    "unit-recorded",
    "attempt-started",
    "attempt-finished",
    "observation",
    "lease-takeover",
    "error",
    "nonfatal-error",
    "job-generation",
    "generation-marked",
    "fingerprint",
    "decision",
]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)

IntermediateStatus = Literal["active", "superseded", "expired"]
#: ``active``: stored and reusable while its fingerprint matches and retention lasts;
#: ``superseded``: its slice was overwritten by another version; ``expired``: past retention,
#: its data garbage-collected.
INTERMEDIATE_STATUSES: tuple[IntermediateStatus, ...] = get_args(IntermediateStatus)

IntermediateAction = Literal[
    "materialized", "recomputed", "reused", "refused", "superseded", "expired"
]
INTERMEDIATE_ACTIONS: tuple[IntermediateAction, ...] = get_args(IntermediateAction)

#: ``source`` of the observation written when an expired lease is taken over.
LEASE_SOURCE = "twice.ledger.lease"
#: ``state`` of that observation: the previous holder's attempt outcome is now unknown.
LEASE_TAKEOVER_STATE = "lease-taken-over"

#: The attempt outcome each resolution records (what an operator may assert, and what it means
#: for the next run, is ``twice.core.resolution``): both failures are transient, since neither
#: says a retry would fail the same way; whether the next run may execute the task is the
#: resolution's own outcome, kept in its observation.
RESOLVED_ATTEMPT_OUTCOME: dict[ResolutionOutcome, AttemptOutcome] = {
    "succeeded": "succeeded",
    "failed": "failed-transient",
    "failed-after-acting": "failed-transient",
}
#: ``state`` of the observation an operator's resolution writes.
RESOLVED_SUCCEEDED_STATE = "resolved-succeeded"
RESOLVED_FAILED_STATE = "resolved-failed"
RESOLVED_FAILED_AFTER_ACTING_STATE = "resolved-failed-after-acting"
RESOLUTION_STATES: dict[ResolutionOutcome, str] = {
    "succeeded": RESOLVED_SUCCEEDED_STATE,
    "failed": RESOLVED_FAILED_STATE,
    "failed-after-acting": RESOLVED_FAILED_AFTER_ACTING_STATE,
}
#: ``source`` of that observation is ``operator:<name>``: asserted by a person, not observed.
OPERATOR_SOURCE_PREFIX = "operator:"


def operator_source(operator: str) -> str:
    """``operator:<name>``, the source of an operator's resolution."""
    return f"{OPERATOR_SOURCE_PREFIX}{operator}"


def resolution_outcome(state: str, source: str) -> ResolutionOutcome | None:
    """The outcome an observation asserts if it is an operator's resolution, else None."""
    if not source.startswith(OPERATOR_SOURCE_PREFIX):
        return None
    for outcome, resolved_state in RESOLUTION_STATES.items():
        if state == resolved_state:
            return outcome
    return None


def _detail() -> Any:
    return field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class UnitRecord:
    """A recorded unit of work: its identity fields, exactly as ``UnitOfWork.identity()``."""

    uow_id: str
    pipeline: str
    task: str
    interval_start: datetime
    interval_end: datetime
    input_partition: str
    input_version: str
    transform_version: str
    destination: str
    created_at: datetime

    @property
    def interval(self) -> Interval:
        return Interval(self.interval_start, self.interval_end)

    def to_unit_of_work(self) -> UnitOfWork:
        """Rebuild the unit of work (e.g. to derive its job ids) from the recorded identity."""
        return UnitOfWork(
            pipeline=self.pipeline,
            task=self.task,
            interval=self.interval,
            destination=self.destination,
            transform_version=self.transform_version,
            input_partition=self.input_partition,
            input_version=self.input_version,
        )


@dataclass(frozen=True)
class AttemptFacts:
    """One execution of a unit of work as seen at some moment: ``number`` (1 for the first
    try), who ran it and when it started, its outcome then and the remote job generation it
    used. The ledger's record and a report's as-of view of an attempt both carry these."""

    number: int
    holder: str
    started_at: datetime
    outcome: AttemptOutcome
    generation: int | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class AttemptRecord(AttemptFacts):
    """One execution of a unit of work as the ledger holds it now; ``uow_id`` and
    ``finished_at`` are keyword only."""

    _: KW_ONLY
    uow_id: str
    finished_at: datetime | None = None

    @property
    def finished(self) -> bool:
        """Whether the attempt is known to have ended (``unknown`` is not known to have ended)."""
        return self.finished_at is not None

    @property
    def duration(self) -> timedelta | None:
        return None if self.finished_at is None else self.finished_at - self.started_at


@dataclass(frozen=True)
class _JournaledDetail:
    """What every journaled detail record about one unit of work carries, as its table does
    (``twice.ledger.schema._evidence``): the journal entry's ``seq``, the unit, and, keyword
    only, when it was recorded, the attempt it concerns and its JSON ``detail``."""

    seq: int
    uow_id: str
    _: KW_ONLY
    recorded_at: datetime
    attempt: int | None = None
    detail: Mapping[str, Any] = _detail()


@dataclass(frozen=True)
class ObservationRecord(_JournaledDetail):
    """A status seen by ``source`` at ``observed_at`` and written down at ``recorded_at``."""

    state: str
    source: str
    observed_at: datetime

    def age(self, now: datetime) -> timedelta:
        """How old the evidence is at ``now``: the planner refreshes observations that are stale."""
        return now - self.observed_at


@dataclass(frozen=True)
class ErrorRecord(_JournaledDetail):
    """An error that ended (or threatened) an attempt, with how it was classified."""

    error_class: str
    message: str
    classification: ErrorClassification


@dataclass(frozen=True)
class NonfatalErrorRecord(_JournaledDetail):
    """A problem that did not fail the attempt (e.g. rows dropped under ``maxBadRecords``)."""

    message: str
    count: int


@dataclass(frozen=True)
class JobGenerationRecord:
    """A deterministic remote job id for one generation of a unit of work, and what became of it."""

    uow_id: str
    generation: int
    job_id: str
    state: GenerationState
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class FingerprintRecord:
    """Row count + order-independent checksum of one partition, as version ``version``.

    ``checksum`` is text: a sum of 60-bit hashes overflows 64-bit integers on large partitions,
    and text compares exactly on every engine.
    """

    seq: int
    destination: str
    partition: str
    version: int
    row_count: int
    checksum: str
    recorded_at: datetime
    uow_id: str | None = None
    attempt: int | None = None
    columns: tuple[str, ...] | None = None
    algorithm: str | None = None
    schema: str | None = None


@dataclass(frozen=True)
class FingerprintDiff:
    """The difference between two versions of one partition's fingerprint.

    Derived, never stored: consecutive versions are in the ledger, so a backfill's "what changed"
    is always recomputable. ``before`` is None for the first version.
    """

    before: FingerprintRecord | None
    after: FingerprintRecord

    def __post_init__(self) -> None:
        before = self.before
        if before is not None and (before.destination, before.partition) != (
            self.after.destination,
            self.after.partition,
        ):
            raise ValueError("a fingerprint diff compares two versions of the same partition")

    @property
    def comparable(self) -> bool:
        """Whether the checksums can be compared: same key columns and same algorithm."""
        before = self.before
        return before is not None and (before.columns, before.algorithm) == (
            self.after.columns,
            self.after.algorithm,
        )

    @property
    def row_delta(self) -> int | None:
        return None if self.before is None else self.after.row_count - self.before.row_count

    @property
    def checksum_changed(self) -> bool | None:
        return None if self.before is None else self.after.checksum != self.before.checksum

    @property
    def schema_changed(self) -> bool | None:
        return None if self.before is None else self.after.schema != self.before.schema

    @property
    def identical(self) -> bool:
        """Same rows (count and checksum) and same schema signature as the previous version."""
        return (
            self.comparable
            and self.row_delta == 0
            and not self.checksum_changed
            and not self.schema_changed
        )


@dataclass(frozen=True)
class DecisionRecord(_JournaledDetail):
    """What the planner decided for a unit of work, from evidence as of ``as_of``.

    ``not_started`` marks a decision that kept attempt ``attempt`` from starting (for example
    ``deadline-infeasible``): the attempt is not recorded at all, so attempt counts stay true.
    """

    decision: DecisionName
    reason: str
    as_of: datetime
    not_started: bool = False


@dataclass(frozen=True)
class LeaseResult:
    """Answer to a lease request: who holds the unit of work now, and until when.

    When ``acquired`` is False, ``holder`` and ``expires_at`` describe the other holder (and
    ``token`` is theirs). ``token`` is a fencing token from one ledger-wide sequence: every
    acquisition except a renewal by the active holder takes the next value, so a holder that
    acquired later, of this unit or of any other, has a larger token, and a destination slot
    written by several units can refuse a stale writer. A renewal keeps the token.
    """

    acquired: bool
    holder: str
    expires_at: datetime
    token: int = 0
    taken_over_from: str | None = None


@dataclass(frozen=True)
class ResolutionRecord:
    """An operator's resolution of an attempt twice could not settle (``twice resolve``).

    ``attempt`` is the attempt as closed by it and ``observation`` the ``resolved-*``
    observation (source ``operator:<name>``) carrying the note. It is an assertion by a
    person, not something twice or a service observed. ``repeated``: the attempt was already
    resolved the same way, and nothing new was recorded.
    """

    uow_id: str
    outcome: ResolutionOutcome
    operator: str
    note: str
    resolved_at: datetime
    attempt: AttemptRecord
    observation: ObservationRecord
    repeated: bool = False


@dataclass(frozen=True)
class _Held:
    """Something held from ``acquired_at`` until it expires or is released (a lease, pool
    slots); keyword only, so each record's own fields keep their positions."""

    _: KW_ONLY
    acquired_at: datetime
    expires_at: datetime
    released_at: datetime | None = None

    def active(self, now: datetime) -> bool:
        return self.released_at is None and self.expires_at > now


@dataclass(frozen=True)
class LeaseRecord(_Held):
    """The stored lease of one unit of work (possibly expired or released)."""

    uow_id: str
    holder: str
    token: int
    renewed_at: datetime


@dataclass(frozen=True)
class PoolHolding(_Held):
    """Slots of a pool held by one holder; kept after release as evidence of who held what."""

    id: int
    pool: str
    holder: str
    slots: int
    capacity: int


@dataclass(frozen=True)
class TimelineEvent:
    """One entry of a unit of work's timeline, ordered by ``at`` then ``seq`` (recording order).

    ``record`` is the full record the event refers to (an ``AttemptRecord``,
    ``ObservationRecord``, ...) in its current state; ``detail`` is what the event itself
    recorded at the time (e.g. the outcome an attempt was finished with).
    """

    seq: int
    at: datetime
    kind: EventKind
    uow_id: str | None
    summary: str
    attempt: int | None = None
    detail: Mapping[str, Any] = _detail()
    record: object | None = field(default=None, hash=False, compare=False)


@dataclass(frozen=True)
class IntermediateRecord:
    """One version of a materialized intermediate in the catalog (see
    ``twice.engine.intermediates``).

    ``row_count``/``checksum`` over ``columns`` is the fingerprint taken right after the write;
    a reuse is allowed only while a freshly computed fingerprint equals it. ``compute_seconds``
    and ``bytes_scanned`` are what the latest materialization measured (``bytes_scanned`` is
    None when nothing was measured); ``verify_seconds`` sums every integrity check so far.
    """

    name: str
    version: str
    uow_id: str
    owner: str
    retention: timedelta
    location: str
    partition: str
    identity: Mapping[str, Any]
    columns: tuple[str, ...]
    algorithm: str
    row_count: int
    checksum: str
    bytes_stored: int
    compute_seconds: float
    bytes_scanned: int | None
    verify_seconds: float
    materializations: int
    reuse_count: int
    created_at: datetime
    expires_at: datetime
    last_reused_at: datetime | None
    status: IntermediateStatus
    status_reason: str
    status_at: datetime

    def expired(self, now: datetime) -> bool:
        """Past retention at ``now`` (retention counts from the latest materialization)."""
        return now >= self.expires_at


@dataclass(frozen=True)
class IntermediateEvent:
    """Something that happened to one intermediate version, with the reason and evidence."""

    seq: int
    name: str
    version: str
    action: IntermediateAction
    reason: str
    at: datetime
    detail: Mapping[str, Any] = _detail()
