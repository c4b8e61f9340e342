"""What every phase of a unit's run shares, and nothing more (docs/architecture.md, "The
lifecycle as a state machine").

``UnitScope`` is what the run reads and never changes: the executor, the task, the unit, its
upstream values, deadline and planner settings, and the lease held for it. ``Account`` is what
the run reports: phases add notes, the error and the value to it, and only the result
(``twice.engine.drive``) reads it; no phase decides anything on it. ``Stop`` is a phase's typed
answer that the run ends here. ``Phase`` gives each collaborator the scope's names and the few
ledger writes that several phases make the same way (a planner decision, a refusal to start).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from twice.core.decision import Decision, DecisionResult
from twice.core.secrets import redact
from twice.core.timescale import micros_to_instant
from twice.engine.evidence import (
    EXECUTOR_SOURCE,
    AssumedDuration,
    PlanSettings,
    UnitEvidence,
    gather_evidence,
    iso,
    plan_unit,
)

if TYPE_CHECKING:
    from twice.core.outcomes import UnitOutcome
    from twice.core.unit import UnitOfWork
    from twice.define.pipeline import Task
    from twice.engine.executor import Executor
    from twice.engine.leases import LeaseKeeper
    from twice.engine.timeouts import Deadline
    from twice.ledger import AttemptRecord, Ledger
    from twice.ledger.history import History
    from twice.ledger.records import DecisionName

__all__ = ["EXECUTOR_SOURCE", "Account", "LeaseHandle", "Phase", "Stop", "UnitScope"]


class LeaseHandle:
    """The unit's lease as the run sees it: its keeper, set once by the claim that took it."""

    def __init__(self) -> None:
        self.keeper: LeaseKeeper | None = None

    def lost(self, ledger: Ledger) -> bool:
        """Whether the lease may be lost (renewal failed, or it ran out while paused)."""
        keeper = self.keeper
        return keeper is not None and keeper.expired(ledger.now())


@dataclass(frozen=True)
class UnitScope:
    """What one run of one unit reads and never changes."""

    executor: Executor
    task: Task
    unit: UnitOfWork
    upstream: Mapping[str, Any]
    deadline: Deadline | None
    settings: PlanSettings
    lease: LeaseHandle = field(default_factory=LeaseHandle)


@dataclass
class Account:
    """What the run reports in its result; phases add to it, none decides on it."""

    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the last attempt's error, as recorded
    value: Any = None  # what the succeeded attempt returned (its dependents' upstream)
    before: AttemptRecord | None = None  # the latest attempt when the run claimed the unit
    #: what the run's latest timed decision (one with a finish) assumed an attempt takes
    assumed: AssumedDuration | None = None


@dataclass(frozen=True)
class Stop:
    """A phase's answer that the run ends here (``UnitDriver`` makes it the unit's result)."""

    outcome: UnitOutcome
    reason: str
    decision: DecisionResult | None = None
    decision_name: str | None = None
    skipped: bool = False
    planned: tuple[DecisionResult, UnitEvidence] | None = None  # just read, nothing written since
    superseded: bool = False  # the inputs changed: the driver identifies the new unit


class Phase:
    """A collaborator of one run: the scope's names, and the writes phases share."""

    def __init__(self, scope: UnitScope, account: Account) -> None:
        self.scope = scope
        self.account = account
        self.x = scope.executor
        self.ledger: Ledger = scope.executor.ledger
        self.task = scope.task
        self.unit = scope.unit
        self.uow_id = scope.unit.uow_id
        self.upstream = scope.upstream
        self.deadline = scope.deadline
        self.settings = scope.settings

    @property
    def notes(self) -> list[str]:
        return self.account.notes

    def lease_lost(self) -> bool:
        return self.scope.lease.lost(self.ledger)

    @property
    def _fence_key(self) -> str:
        """The slot every write of this task and interval is fenced on (``WriteStamp``)."""
        return f"{self.unit.pipeline}/{self.unit.task}/{self.unit.interval.label}"

    def _attempt_key(self, number: int) -> str:
        """Attempt ``number`` of this unit, as this process remembers its timed-out thread."""
        return f"{self.uow_id}#{number}"

    def guard(self) -> AbstractContextManager[object]:
        """One writer per embedded destination file, held around an attempt and its checks."""
        return self.x.writers.holding(self.task.destination)

    def gathered(self, history: History | None = None) -> UnitEvidence:
        """The unit's evidence read from the ledger now, as the planner takes it (``history``:
        the unit's records, just read: ``gather_evidence``)."""
        return gather_evidence(
            self.ledger, self.uow_id, as_of=self.x.now(), settings=self.settings,
            include_workflow_deadline=True, history=history,
        )

    def plan(self, evidence: UnitEvidence) -> DecisionResult | None:
        """The planner's decision over ``evidence`` (``plan_unit``); one that timed an attempt
        (it has a finish) leaves what it assumed the attempt takes in the account, for the
        result to show."""
        decision = plan_unit(evidence)
        if decision is not None and decision.estimated_finish is not None:
            self.account.assumed = evidence.assumed_duration()
        return decision

    def not_started(self, reason: str, cause: str) -> Stop:
        self.ledger.record_attempt_not_started(
            self.uow_id, reason=reason, decision="deadline-infeasible", as_of=self.x.now(),
            detail={"cause": cause},
        )
        return Stop("deadline-infeasible", reason, decision_name="deadline-infeasible")

    def record_decision(
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


def first_line(exc: BaseException) -> str:
    text = redact(str(exc)).strip().splitlines()
    return text[0] if text else type(exc).__name__


def mask_error(error: BaseException | None) -> None:
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
