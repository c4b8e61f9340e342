"""What a run of the engine reports: each unit's result, and the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from twice.core.interval import Interval
from twice.core.outcomes import UNSETTLED_OUTCOMES, UnitOutcome
from twice.core.unit import UnitOfWork
from twice.engine.evidence import AssumedDuration, iso

if TYPE_CHECKING:
    from twice.ledger import AttemptRecord, Ledger, UnitRecord


def attempts_of_run(recorded: Sequence[AttemptRecord], before: AttemptRecord | None
                    ) -> list[AttemptRecord]:
    """The attempts in ``recorded`` that a run started or settled, given the unit's latest
    attempt ``before`` it: those after it, and ``before`` itself when its outcome was open
    (unknown or running: the run resolved it, or left it)."""
    first = 1 if before is None else before.number + 1
    if before is not None and before.outcome in UNSETTLED_OUTCOMES:
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
    this run did to it is not all recorded (its attempt counts are unknown). ``assumed``: what
    the run's latest decision that timed an attempt (gave it a finish) assumed the attempt
    takes, and why (None when no decision of this run timed one).
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
    assumed: AssumedDuration | None = None
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
            **(self.assumed.to_dict() if self.assumed is not None
               else {"assumed_duration": None, "duration_basis": None}),
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
