"""The one health vocabulary: what state a unit of work is in, and how each fact is known.

``twice status``, ``twice update``, ``twice handover``, ``twice report`` and every ``--json``
name a unit's state with :class:`Health` and nothing else, derived here by :func:`assess` from
the unit's recorded evidence (the lifecycle in docs/architecture.md, "One lifecycle for every
unit of work"). Listed in the order reports show them: what needs a person first.

Needs attention:

- ``unknown``: the latest attempt's outcome is unknown (timeout, lost acknowledgement, lease
  taken over, interrupted; or, in a report of the present, it is running but its process on
  this host has exited: basis ``observed``, recorded nowhere). Settle it (commit record,
  ``reconcile``, ``twice resolve``) before any retry: a retry may duplicate work.
- ``held``: not executed again because the task is not ``safe_repeat`` and it already succeeded
  for the interval, or an operator resolved its attempt ``--as failed-after-acting`` (it acted,
  then failed); the engine recorded why. An operator names it (``--repeat``) or leaves it.
- ``refused``: twice refused the output or the attempt: acceptance failed, a schema change was
  not accepted, a fenced (stale) write, the cost guard. The output was not recorded succeeded.
- ``failed``: the latest attempt failed permanently, or failed transiently with no retry left
  (attempts exhausted, repeat not safe): its cause needs repairing.
- ``stale-evidence``: an attempt is running but the freshest evidence about it is older than
  the unit's maximum observation age: refresh it before deciding anything.
- ``unverified``: the latest attempt finished without error, but the ledger holds nothing that
  verified its output (a ledger not written by the engine's lifecycle, or a hand-made record).
- ``blocked``: not run, for a recorded reason: a dependency did not succeed, the attempt could
  not finish before the deadline (deadline-infeasible), no pool capacity, no plan.

In progress:

- ``waiting``: the latest attempt failed transiently and a retry is allowed (retry, backoff).
- ``running``: an attempt is running and the evidence about it is fresh.
- ``never-run``: the unit is recorded but no attempt was made and nothing says why.

Settled:

- ``asserted``: an operator resolved the outcome (``twice resolve``) as succeeded: a person's
  word, with their name and note; neither twice nor a service observed it.
- ``verified``: the latest attempt succeeded AND its output passed the engine's checks:
  acceptance, then the partition fingerprint recorded in the ledger by that unit's ``uow_id``
  and attempt (or, for a task without an owned destination, the engine recorded the executed
  success after declared acceptance criteria passed, or a validation was observed; a task with
  neither a destination nor a check is ``unverified``: executed, nothing checked). Verified units
  need no fresh observations: their evidence does not go stale.

Set aside:

- ``superseded``: a newer unit of work of the same task and interval replaced it (its inputs or
  transform changed); its history stays, the newer unit carries the state. Not counted in a
  scope's totals.

A scope whose counted units are all verified says so in one line: ``done: 28/28 verified``.

How a fact is known (its *basis*) is a separate vocabulary with distinct labels, so "verified"
never means "someone looked": ``decided`` (the planner chose it; deciding executes nothing),
``executed`` (twice ran it and recorded how it ended), ``observed`` (a named source saw a state
at a known time; as good as its age), ``verified`` (output checked by acceptance and fingerprint),
``assumed by the caller`` (``safe_repeat``, estimated durations, a deadline given on the command
line: never checked) and ``asserted by an operator`` (``twice resolve``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from twice.core.resolution import NextRun, next_run_after
from twice.engine.evidence import COST_GUARD, EXECUTOR_SOURCE, PROCESS_TABLE
from twice.reports import wording

if TYPE_CHECKING:
    from twice.engine.evidence import AssumedDuration
    from twice.ledger.records import ErrorRecord, FingerprintRecord, UnitRecord
    from twice.reports.gather import Attempt, Evidence, Observation, RecordedDecision, UnitReport


class Health(StrEnum):
    """A unit of work's state, in the order reports list them (attention first)."""

    UNKNOWN = "unknown"
    HELD = "held"
    REFUSED = "refused"
    FAILED = "failed"
    STALE_EVIDENCE = "stale-evidence"
    UNVERIFIED = "unverified"
    BLOCKED = "blocked"
    WAITING = "waiting"
    RUNNING = "running"
    NEVER_RUN = "never-run"
    ASSERTED = "asserted"
    VERIFIED = "verified"
    SUPERSEDED = "superseded"


HEALTH_ORDER: tuple[Health, ...] = tuple(Health)
NEEDS_ATTENTION: tuple[Health, ...] = (
    Health.UNKNOWN, Health.HELD, Health.REFUSED, Health.FAILED, Health.STALE_EVIDENCE,
    Health.UNVERIFIED, Health.BLOCKED,
)
IN_PROGRESS: tuple[Health, ...] = (Health.WAITING, Health.RUNNING, Health.NEVER_RUN)
SETTLED: tuple[Health, ...] = (Health.ASSERTED, Health.VERIFIED)
#: States that wait on a next action (an operator's, or the planner's next step).
AWAITING_ACTION: frozenset[Health] = frozenset((*NEEDS_ATTENTION, *IN_PROGRESS))
#: States whose next decision rests on evidence that can change by itself (a job that ended
#: stays ended): only for these is an old observation a problem.
NEEDS_FRESH_EVIDENCE: frozenset[Health] = frozenset(
    {Health.RUNNING, Health.STALE_EVIDENCE, Health.UNKNOWN}
)

HEALTH_MEANING: dict[Health, str] = {
    Health.UNKNOWN: "the latest attempt's outcome is unknown: settle it before any retry",
    Health.HELD: "not executed again: the task is not safe_repeat and already succeeded, or "
                 "an operator resolved it as failed after acting",
    Health.REFUSED: "twice refused the output or the attempt (acceptance, schema change, "
                    "fenced write, cost guard)",
    Health.FAILED: "failed permanently, or no retry is left: repair the cause",
    Health.STALE_EVIDENCE: "running, but the freshest evidence is over the age limit: "
                           "refresh it",
    Health.UNVERIFIED: "finished without error, but nothing verified its output",
    Health.BLOCKED: "not run, for a recorded reason (dependency, deadline, capacity)",
    Health.WAITING: "failed transiently; a retry is allowed (retry, backoff)",
    Health.RUNNING: "an attempt is running; the evidence about it is fresh",
    Health.NEVER_RUN: "recorded, but no attempt was made",
    Health.ASSERTED: f"succeeded as {wording.ASSERTED_BY_OPERATOR} (twice resolve); "
                     "not observed by twice",
    Health.VERIFIED: "succeeded, and its output passed the engine's checks (acceptance, "
                     "then the partition fingerprint when twice owns the destination)",
    Health.SUPERSEDED: "replaced by a newer unit of the same task and interval; not counted",
}

Basis = Literal["decided", "executed", "observed", "verified", "assumed", "asserted"]

#: The cause of an outcome a report of the present found unknown: the running attempt's
#: process on this host no longer exists (``gather._attempts``).
PROCESS_EXITED = "process exited"
BASES: tuple[Basis, ...] = ("decided", "executed", "observed", "verified", "assumed", "asserted")
#: How a basis is written for people: "assumed" and "asserted" always say by whom.
BASIS_LABEL: dict[Basis, str] = {
    "decided": "decided",
    "executed": "executed",
    "observed": "observed",
    "verified": "verified",
    "assumed": "assumed by the caller",
    "asserted": wording.ASSERTED_BY_OPERATOR,
}
BASIS_MEANING: dict[Basis, str] = {
    "decided": "chosen by the planner from the evidence; deciding executes nothing",
    "executed": "run by twice and recorded as it ended; not proof that the output is correct",
    "observed": "seen by a named source at a known time; as good as its age",
    "verified": "output checked by the engine: acceptance, then the partition fingerprint "
                "recorded by the attempt",
    "assumed": "asserted or estimated by the caller (safe_repeat, durations, a given "
               "deadline); twice did not check it",
    "asserted": f"{wording.ASSERTED_BY_OPERATOR} (twice resolve), with their name and note; "
                "neither twice nor a service observed it",
}

#: Errors with which the engine refuses an output or a write, by class name (recorded with the
#: error, never parsed out of a message). Names, not module paths: twice's error names are unique
#: and ledgers written before a module moved still say the same thing.
REFUSAL_ERRORS = frozenset({"AcceptanceFailed", "SchemaChangeError", "SchemaError",
                            "FencedWriteError"})


def is_refusal(error_class: str) -> bool:
    """Whether a recorded error class (``module.Name``) is one of the engine's refusals."""
    return error_class.rsplit(".", 1)[-1] in REFUSAL_ERRORS


#: Errors the engine records for a remote job that ended DONE with an ``errorResult``, by class
#: name: ``JobFailed`` (``twice.remote.jobs``: raised by ``run_job`` in task code, or made by the
#: executor from a returned ``JobStatus``) and ``RemoteJobFailed`` (``twice.engine.reconcile``:
#: reconcile found the job failed). Recorded with the error, never parsed out of a message.
JOB_FAILED_ERRORS = frozenset({"JobFailed", "RemoteJobFailed"})


def is_job_failure(error_class: str) -> bool:
    """Whether a recorded error class says a remote job ended DONE with an error."""
    return error_class.rsplit(".", 1)[-1] in JOB_FAILED_ERRORS


#: Decisions after a transient failure that leave no retry.
NO_RETRY_DECISIONS = frozenset({"attempts-exhausted", "repair-cause", "reconcile-effects"})
#: Observation states the engine records about a unit it did not run (``twice.engine.executor``).
HELD_STATE, BLOCKED_STATE, SUPERSEDED_STATE = "held", "blocked", "superseded"


@dataclass(frozen=True)
class Status:
    """A unit's health, the basis of that word, a sentence of evidence, and what it rests on.

    ``evidence`` is the observation the verdict rests on, if one does; ``source`` and ``at``
    name who supplied the deciding evidence and when (a fingerprint, an observation, an attempt
    record); ``stale_at`` is when that evidence goes stale (only for states that need fresh
    evidence).
    """

    state: Health
    basis: Basis
    text: str
    evidence: Observation | None = None
    source: str | None = None
    at: datetime | None = None
    stale_at: datetime | None = None

    @property
    def needs_attention(self) -> bool:
        return self.state in NEEDS_ATTENTION


# -- the rule ------------------------------------------------------------------------------------


def _latest(items: Iterable[Observation]) -> Observation | None:
    return max(items, key=lambda o: (o.record.observed_at, o.record.seq), default=None)


def _last_change(attempt: Attempt) -> datetime:
    return max([attempt.started_at, *(c.at for c in attempt.changes)])


def _seen(observation: Observation | None, as_of: datetime) -> str:
    if observation is None:
        return ""
    record = observation.record
    return (f"; observed {record.state} via {record.source} "
            f"{wording.span(as_of - record.observed_at)} ago")


@dataclass(frozen=True)
class _Verification:
    text: str
    source: str
    at: datetime
    evidence: Observation | None = None


def verification(
    unit: UnitRecord,
    attempt: Attempt,
    observations: Sequence[Observation],
    fingerprints: Sequence[FingerprintRecord],
    *,
    after: datetime | None = None,
) -> _Verification | None:
    """What verified ``attempt``'s output, or None (see the module docstring for the rule).

    ``after``: only evidence recorded at or after it counts (an operator's resolution: a
    check made before the person spoke cannot confirm what they said).
    """
    from twice.core.schemes import is_owned

    floor = after or attempt.started_at
    mine = [o for o in observations if o.record.attempt in (None, attempt.number)
            and o.record.observed_at >= floor and o.asserted is None]
    engine = [o for o in mine if o.record.source == EXECUTOR_SOURCE
              and o.record.state == "succeeded" and "validation-failed" not in o.kinds]
    checked = [o for o in mine if "validated" in o.kinds]
    found_obs = _latest(checked) or _latest(engine)
    what = _acceptance_text(found_obs)
    made = [f for f in fingerprints if f.uow_id == unit.uow_id and f.attempt == attempt.number
            and f.recorded_at >= floor]
    if made:
        found = made[-1]
        return _Verification(
            f"{what}; its partition's fingerprint v{found.version} ({found.row_count} rows, "
            f"checksum {found.checksum}) was recorded by this attempt",
            "fingerprint", found.recorded_at, found_obs,
        )
    if is_owned(unit.destination) or found_obs is None:
        return None  # an owned destination is verified by its fingerprint, nothing else
    if not _checked(found_obs):
        return None  # no fingerprint, no acceptance, no validation: executed, not verified
    record = found_obs.record
    text = f"{what}; no owned destination to fingerprint"
    if record.source == EXECUTOR_SOURCE:
        text += "; the engine recorded the executed success after its checks"
    return _Verification(text, record.source, record.observed_at, found_obs)


def _checked(observation: Observation) -> bool:
    """Whether ``observation`` records a check of the output: declared acceptance criteria
    that passed, or a validation (``validated``)."""
    acceptance = observation.record.detail.get("acceptance")
    passed = isinstance(acceptance, Mapping) and acceptance.get("passed") is True
    return passed or "validated" in observation.kinds


def _acceptance_text(observation: Observation | None) -> str:
    if observation is None:
        return "no acceptance recorded"
    record = observation.record
    acceptance = record.detail.get("acceptance")
    if isinstance(acceptance, Mapping) and acceptance.get("passed") is True:
        return f"acceptance passed ({len(acceptance.get('checks') or ())} checks)"
    if "validated" in observation.kinds:
        return f"output validated ({record.state} via {record.source})"
    return "no acceptance criteria declared"


def _refused(attempt: Attempt, observations: Sequence[Observation],
             errors: Sequence[ErrorRecord]) -> str | None:
    """Why the engine refused ``attempt``'s output, if it did."""
    for error in reversed(errors):
        if error.attempt == attempt.number and is_refusal(error.error_class):
            return f"{error.message} ({error.error_class.rsplit('.', 1)[-1]})"
    for observation in reversed(observations):
        record = observation.record
        if record.attempt == attempt.number and "validation-failed" in observation.kinds:
            return f"its output FAILED validation ({record.source})"
    return None


def _error_text(attempt: Attempt, errors: Sequence[ErrorRecord]) -> str:
    found = [e for e in errors if e.attempt == attempt.number]
    if not found:
        return ""
    error = found[-1]
    return f": {error.error_class.rsplit('.', 1)[-1]}: {error.message}"


def assess(
    unit: UnitRecord,
    attempts: Sequence[Attempt],
    observations: Sequence[Observation],
    decisions: Sequence[RecordedDecision],
    errors: Sequence[ErrorRecord],
    fingerprints: Sequence[FingerprintRecord],
    as_of: datetime,
    max_age: timedelta | None,
    superseded_by: str | None = None,
) -> Status:
    """The unit's health as of ``as_of`` from its recorded evidence (the one rule)."""
    if superseded_by is not None:
        return Status(Health.SUPERSEDED, "executed",
                      f"replaced by unit {superseded_by} of the same task and interval (inputs "
                      "or transform changed); that unit carries the state")
    latest = attempts[-1] if attempts else None
    settled_at = None if latest is None else _last_change(latest)
    control = _latest(
        o for o in observations
        if o.record.source == EXECUTOR_SOURCE
        and o.record.state in (HELD_STATE, BLOCKED_STATE, SUPERSEDED_STATE)
        and (settled_at is None or o.record.observed_at >= settled_at)
    )
    if control is not None:
        found = _control_status(control, latest, as_of)
        if found is not None:
            return found
    current = decisions[-1] if decisions and decisions[-1].current else None
    if current is not None and current.record.not_started:
        record = current.record
        cause = record.detail.get("cause")
        refused = record.decision == "repair-cause" or cause == COST_GUARD
        return Status(
            Health.REFUSED if refused else Health.BLOCKED, "decided",
            f"attempt {record.attempt} not started: {record.decision} ({record.reason})",
            source="planner", at=record.as_of,
        )
    if latest is None:
        return Status(Health.NEVER_RUN, "executed", "no attempt recorded")
    after = [o for o in observations if o.record.observed_at >= latest.started_at]
    freshest = _latest(o for o in after if o.asserted is None)
    number = latest.number
    if latest.asserted is not None:
        return _asserted_status(unit, latest, after, fingerprints, as_of)
    if latest.outcome == "running":
        return _running_status(latest, freshest, as_of, max_age)
    if latest.outcome == "unknown" and latest.changes[-1:] and (
            latest.changes[-1].cause == PROCESS_EXITED):
        return Status(
            Health.UNKNOWN, "observed",
            f"attempt {number} running since {wording.instant(latest.started_at)}, but its "
            f"process ({latest.holder}) has exited: seen on this host at "
            f"{wording.instant(as_of)} by this report, not yet recorded. Its outcome is unknown "
            "until the next run takes its lease over and settles it from the destination's "
            "commit record (or its reconcile function); settle it before any retry",
            source=PROCESS_TABLE, at=as_of,
        )
    if latest.outcome == "unknown":
        since = latest.unknown_since or latest.started_at
        text = (f"attempt {number} outcome unknown since {wording.instant(since)} (timeout, lost "
                f"acknowledgement or lease takeover){_seen(freshest, as_of)}; settle it before "
                "any retry")
        held = _still_acting(freshest, number)
        if held is not None:
            text += f" (the last look: {held})"
        at = since if freshest is None else max(since, freshest.record.observed_at)
        stale_at = None if max_age is None else at + max_age
        return Status(Health.UNKNOWN, "executed", text, freshest,
                      None if freshest is None else freshest.record.source, at, stale_at)
    if latest.outcome == "succeeded":
        checked = verification(unit, latest, observations, fingerprints)
        if checked is not None:
            return Status(Health.VERIFIED, "verified",
                          f"attempt {number} succeeded; {checked.text}", checked.evidence,
                          checked.source, checked.at)
        refused = _refused(latest, after, errors)
        if refused is not None:
            return Status(Health.REFUSED, "executed",
                          f"attempt {number} finished without error but {refused}", freshest)
        return Status(Health.UNVERIFIED, "executed",
                      f"attempt {number} finished without error; nothing verified its output "
                      "(no acceptance or fingerprint recorded by this attempt)"
                      f"{_seen(freshest, as_of)}",
                      freshest, None if freshest is None else freshest.record.source,
                      latest.ended_at)
    if latest.outcome == "failed-permanent":
        refused = _refused(latest, after, errors)
        if refused is not None:
            return Status(Health.REFUSED, "executed",
                          f"attempt {number} refused: {refused}", freshest,
                          at=latest.ended_at)
        return Status(Health.FAILED, "executed",
                      f"attempt {number} failed permanently{_error_text(latest, errors)}",
                      freshest, at=latest.ended_at)
    return _transient_status(latest, current, errors)


def _control_status(control: Observation, latest: Attempt | None,
                    as_of: datetime) -> Status | None:
    """``held`` / ``blocked`` / ``superseded`` as the engine recorded them after the latest
    attempt; a later ``blocked`` does not undo a success (its output stands)."""
    record = control.record
    reason = str(record.detail.get("reason") or record.state)
    when = f" ({wording.span(as_of - record.observed_at)} ago)"
    if record.state == HELD_STATE:
        before = ""
        if latest is not None and latest.outcome == "succeeded":
            before = f"; attempt {latest.number}'s output stands"
        return Status(Health.HELD, "executed", f"{reason}{when}{before}", control,
                      record.source, record.observed_at)
    if record.state == SUPERSEDED_STATE:
        by = record.detail.get("by")
        return Status(Health.SUPERSEDED, "executed",
                      f"replaced by unit {by}: {reason}" if by else reason, control,
                      record.source, record.observed_at)
    if latest is not None and latest.outcome == "succeeded":
        return None
    return Status(Health.BLOCKED, "executed", f"not run: {reason}{when}", control,
                  record.source, record.observed_at)


def _running_status(latest: Attempt, freshest: Observation | None, as_of: datetime,
                    max_age: timedelta | None) -> Status:
    at = latest.started_at if freshest is None else max(latest.started_at,
                                                         freshest.record.observed_at)
    source = "attempt record" if freshest is None else freshest.record.source
    stale_at = None if max_age is None else at + max_age
    text = (f"attempt {latest.number} running since {wording.instant(latest.started_at)}"
            f"{_seen(freshest, as_of)}")
    if stale_at is not None and as_of > stale_at:
        return Status(
            Health.STALE_EVIDENCE, "observed" if freshest is not None else "executed",
            f"{text}; that evidence is {wording.span(as_of - at)} old, over the "
            f"{wording.span(max_age or timedelta(0))} limit: refresh it before deciding",
            freshest, source, at, stale_at,
        )
    if stale_at is None:
        text += "; no maximum observation age recorded"
    return Status(Health.RUNNING, "executed", text, freshest, source, at, stale_at)


def _transient_status(latest: Attempt, current: RecordedDecision | None,
                      errors: Sequence[ErrorRecord]) -> Status:
    number = latest.number
    error = _error_text(latest, errors)
    kind = None if current is None else current.record.decision
    if current is not None and kind in NO_RETRY_DECISIONS:
        return Status(Health.FAILED, "decided",
                      f"attempt {number} failed (transient){error}; no retry: {kind} "
                      f"({current.record.reason})", source="planner", at=current.record.as_of)
    if current is not None and kind == "deadline-infeasible":
        return Status(Health.BLOCKED, "decided",
                      f"attempt {number} failed (transient){error}; deadline-infeasible "
                      f"({current.record.reason})", source="planner", at=current.record.as_of)
    when = ""
    if current is not None and current.earliest_start is not None:
        when = f"; attempt {number + 1} may start at {wording.instant(current.earliest_start)}"
    return Status(Health.WAITING, "executed",
                  f"attempt {number} failed (transient){error}; a retry is allowed{when}",
                  at=latest.ended_at)


def _asserted_status(unit: UnitRecord, latest: Attempt, after: Sequence[Observation],
                     fingerprints: Sequence[FingerprintRecord], as_of: datetime) -> Status:
    """The state an operator's resolution gives the unit: asserted, never verified by it.

    Only a check by the engine or a named source made after the resolution verifies it.
    """
    asserted = latest.asserted
    assert asserted is not None
    number = latest.number
    resolution = next((o for o in reversed(after) if o.asserted is not None
                       and o.record.attempt == number), None)
    if latest.outcome == "succeeded":
        checked = verification(unit, latest, after, fingerprints, after=asserted.at)
        if checked is not None:
            return Status(Health.VERIFIED, "verified",
                          f"attempt {number} succeeded ({asserted.label}); {checked.text}",
                          checked.evidence, checked.source, checked.at)
        failed = [o for o in after if "validation-failed" in o.kinds
                  and o.record.observed_at >= asserted.at]
        text = (f"attempt {number} {latest.outcome}, {asserted.label} "
                f"{wording.span(as_of - asserted.at)} ago; not observed by twice")
        if failed:
            return Status(Health.REFUSED, "asserted",
                          f"{text}; its output FAILED validation{_seen(failed[-1], as_of)}",
                          failed[-1], failed[-1].record.source, failed[-1].record.observed_at)
        return Status(Health.ASSERTED, "asserted", text, resolution,
                      None if resolution is None else resolution.record.source, asserted.at)
    said = (f"attempt {number} {latest.outcome}, {asserted.label} "
            f"{wording.span(as_of - asserted.at)} ago")
    source = None if resolution is None else resolution.record.source
    if next_run_after(asserted.asserts) is NextRun.EXECUTE:
        return Status(Health.WAITING, "asserted",
                      f"{said}: the effect did not happen, so the next run executes it (no "
                      "--repeat needed)", resolution, source, asserted.at)
    return Status(Health.HELD, "asserted",
                  f"{said}: running it again may repeat what it did, so the next run holds it "
                  f"until you name it (--repeat {unit.task})", resolution, source, asserted.at)


# -- a scope of units ----------------------------------------------------------------------------


def ordered(units: Iterable[UnitReport]) -> list[UnitReport]:
    """Units with what needs attention first, in the vocabulary's order (stable otherwise)."""
    rank = {state: i for i, state in enumerate(HEALTH_ORDER)}
    return sorted(units, key=lambda u: rank[u.status.state])


@dataclass(frozen=True)
class Scope:
    """Counts over a set of units, and the one-line headline every report opens with."""

    counts: Mapping[Health, int]
    total: int  # counted units (superseded ones are not)
    superseded: int

    @property
    def verified(self) -> int:
        return self.counts.get(Health.VERIFIED, 0)

    @property
    def done(self) -> bool:
        return self.total > 0 and self.verified == self.total

    def attention(self) -> list[tuple[Health, int]]:
        return [(h, self.counts[h]) for h in NEEDS_ATTENTION if self.counts.get(h)]

    def in_progress(self) -> list[tuple[Health, int]]:
        return [(h, self.counts[h]) for h in IN_PROGRESS if self.counts.get(h)]

    @property
    def headline(self) -> str:
        """``done: 28/28 verified``, or what needs attention first, then progress."""
        if self.total == 0:
            line = "no units of work recorded"
        elif self.done:
            line = f"done: {self.total}/{self.total} verified"
        else:
            parts = []
            attention = self.attention()
            if attention:
                parts.append("needs attention: " + ", ".join(f"{n} {h}" for h, n in attention))
            progress = self.in_progress()
            if progress:
                parts.append("in progress: " + ", ".join(f"{n} {h}" for h, n in progress))
            settled = f"{self.verified}/{self.total} verified"
            asserted = self.counts.get(Health.ASSERTED, 0)
            if asserted:
                settled += f", {asserted} {wording.ASSERTED_BY_OPERATOR} (not verified)"
            if not parts:
                parts.append("settled")
            line = "; ".join(parts) + "; " + settled
        if self.superseded:
            line += f" ({self.superseded} superseded unit{'s' if self.superseded != 1 else ''} " \
                    "not counted)"
        return line


def scope(units: Iterable[UnitReport]) -> Scope:
    counts = Counter(unit.status.state for unit in units)
    superseded = counts.pop(Health.SUPERSEDED, 0)
    return Scope(dict(counts), sum(counts.values()), superseded)


def _still_acting(freshest: Observation | None, number: int) -> str | None:
    """Why the engine left attempt ``number`` unknown at its last look, when a reconciler's
    "not found" could not settle it (the attempt's thread or holder process still existed:
    ``twice.engine.executor``); None otherwise."""
    if freshest is None:
        return None
    record = freshest.record
    detail = record.detail
    if (record.attempt != number or record.state != "unknown"
            or detail.get("reconcile") != "not-found"):
        return None
    why = detail.get("why")
    return why if isinstance(why, str) else None


def next_action(unit: UnitReport) -> str | None:
    """The planner's decision a unit that needs attention or is in progress waits on (the
    recorded current one, else the one planned as of the report); None for a settled unit."""
    if unit.status.state not in AWAITING_ACTION:
        return None
    decision = unit.current_decision
    if decision is not None:
        return str(decision.record.decision)
    return None if unit.planned is None else str(unit.planned.decision)


def next_duration(unit: UnitReport) -> AssumedDuration | None:
    """What :func:`next_action`'s decision assumed an attempt takes, and why, when it timed one
    (it has an estimated finish); None otherwise."""
    if unit.status.state not in AWAITING_ACTION:
        return None
    decision = unit.current_decision or unit.planned
    if decision is None or decision.estimated_finish is None:
        return None
    return decision.duration


def unit_json(unit: UnitReport) -> dict[str, Any]:
    """One unit in every report's ``--json``: the same keys, the same health word."""
    from twice.engine.evidence import iso

    status = unit.status
    latest = unit.attempts[-1] if unit.attempts else None
    asserted = unit.asserted
    assumed = next_duration(unit)
    return {
        "id": unit.uow_id,
        "pipeline": unit.unit.pipeline,
        "task": unit.unit.task,
        "interval": unit.unit.interval.label,
        "intervalStart": iso(unit.unit.interval_start),
        "health": str(status.state),
        "basis": status.basis,
        "basisLabel": BASIS_LABEL[status.basis],
        "reason": status.text,
        "needsAttention": status.needs_attention,
        "nextAction": next_action(unit),
        "evidenceSource": status.source,
        "evidenceAt": iso(status.at),
        "needsFreshEvidence": status.state in NEEDS_FRESH_EVIDENCE,
        "staleAt": iso(status.stale_at) if status.state in NEEDS_FRESH_EVIDENCE else None,
        "attempt": None if latest is None else latest.number,
        "outcome": None if latest is None else latest.outcome,
        "jobId": None if latest is None else latest.job_id,
        "assertedBy": None if asserted is None else asserted.operator,
        **(assumed.to_dict() if assumed is not None
           else {"assumed_duration": None, "duration_basis": None}),
    }


def health_document(evidence: Evidence, command: str) -> dict[str, Any]:
    """The ``--json`` of ``twice update``, ``handover`` and ``report``: one shape for all."""
    from twice.engine.evidence import iso
    from twice.reports.gather import group_assumptions

    summary = scope(evidence.units)
    units = ordered(evidence.units)
    return {
        "schema": "twice.health/v1",
        "command": command,
        "ledger": evidence.ledger,
        "asOf": iso(evidence.as_of),
        "pipeline": evidence.pipeline,
        "headline": summary.headline,
        "done": summary.done,
        "total": summary.total,
        "verified": summary.verified,
        "counts": {str(h): summary.counts[h] for h in HEALTH_ORDER if summary.counts.get(h)}
        | ({"superseded": summary.superseded} if summary.superseded else {}),
        "needsAttention": [
            {"id": u.uow_id, "label": u.label, "health": str(u.status.state),
             "reason": u.status.text, "nextAction": next_action(u)}
            for u in units if u.status.needs_attention
        ],
        "units": [unit_json(u) for u in units],
        "assumed": [
            {"text": text, "subjects": subjects, "origin": origin,
             "basis": BASIS_LABEL["assumed"]}
            for text, subjects, origin in group_assumptions(evidence.assumptions)
        ],
        "leftOut": evidence.left_out,
        "vocabulary": {str(h): HEALTH_MEANING[h] for h in HEALTH_ORDER},
        "bases": {BASIS_LABEL[b]: BASIS_MEANING[b] for b in BASES},
    }
