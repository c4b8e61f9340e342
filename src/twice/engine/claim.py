"""Claim: what the transaction that takes a unit's lease finds and records.

``claim_and_drive`` takes the lease (with its fencing token) in one durable write that also
records the unit, opens the run and, when nothing holds it back, begins its first attempt
(``Claim.open`` / ``Claim.begin_now``), then hands the unit to ``twice.engine.drive.UnitDriver``
under a ``LeaseKeeper``. ``Claim`` decides, in that transaction: a success not to run again, a
hold (``twice.engine.hold``), a ``running`` attempt orphaned by its process (recorded unknown),
and the run marker. It answers with an ``Opening``; the file's writer it may hold for the first
attempt is its own until the attempt takes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from twice.core.decision import Decision
from twice.core.interval import Interval
from twice.core.outcomes import UNSETTLED_OUTCOMES
from twice.core.secrets import redact
from twice.core.unit import UnitOfWork
from twice.define.pipeline import Task
from twice.engine.evidence import (
    EXECUTOR_SOURCE,
    RUN_STARTED,
    PlanSettings,
    UnitEvidence,
    iso,
)
from twice.engine.leases import LeaseKeeper
from twice.engine.lifecycle import UnitState
from twice.engine.phase import Account, Phase, Stop, UnitScope, first_line
from twice.engine.results import UnitResult
from twice.engine.timeouts import Deadline, WorkflowTimeout
from twice.ledger.errors import LedgerCommitUnknownError, LedgerError

if TYPE_CHECKING:
    from twice.engine.attempting import AttemptRunner
    from twice.engine.executor import Executor
    from twice.engine.gates import StartGates
    from twice.engine.hold import RepeatHold
    from twice.ledger import (
        AttemptRecord,
        JobGenerationRecord,
        LeaseResult,
        Ledger,
    )


@dataclass
class Opening:
    """What ``Claim.open`` found and recorded before the loop (see there)."""

    prior: AttemptRecord | None  # the latest attempt when the run was claimed
    rerun_of: int | None = None  # the succeeded attempt this run repeats
    #: a deliberate rerun (--force, a stale success named by the driver) takes a new job
    #: generation; a success whose slot another unit overwrote runs again under its own
    new_generation: bool = False
    notes: list[str] = field(default_factory=list)
    stop: Stop | None = None  # the run ends here: its outcome and reason
    opened: bool = False  # the run marker is recorded
    begun: Begun | None = None  # the run's first attempt, begun in the same transaction


@dataclass(frozen=True)
class Begun:
    """An attempt begun in the transaction that claimed its unit (``Claim.begin_now``)."""

    evidence: UnitEvidence  # what the planner decided on, read in that transaction
    record: AttemptRecord
    generation: JobGenerationRecord
    token: int  # the attempt's fencing token
    timeout: float | None  # the attempt's timeout, capped by the workflow deadline


def claim_not_recorded(task: Task, interval: Interval, unit: UnitOfWork,
                       exc: LedgerError) -> UnitResult:
    """The ledger refused the claim (disk full, read-only, locked past the retry window): its
    transaction rolled back, so no attempt began and nothing about the unit was recorded. Not
    an unknown outcome: nothing ran."""
    error = f"{type(exc).__name__}: {first_line(exc)}"
    return UnitResult(
        task.name, interval, "blocked",
        f"the ledger could not record the claim ({error}); nothing ran and nothing about this "
        "unit was recorded: run it again once the ledger can be written",
        uow_id=unit.uow_id, error=error, ledger_failed=True,
    )


class Claim(Phase):
    """Decides what the claiming transaction finds, and opens the run."""

    def __init__(self, scope: UnitScope, account: Account, hold: RepeatHold, gates: StartGates,
                 runner: AttemptRunner) -> None:
        super().__init__(scope, account)
        self.hold, self.gates, self.runner = hold, gates, runner
        # the file's writer, taken before the claim when the claim may begin the attempt;
        # handed to that attempt (``hand_writer``)
        self.writer = contextlib.ExitStack()
        self.may_begin = False  # the claim may begin the first attempt (its writer is held)

    def hand_writer(self) -> contextlib.ExitStack:
        """The file's writer held since the claim, for the attempt the claim began."""
        return self.writer.pop_all()

    def _held_after_failure(self, opening: Opening, prior: AttemptRecord) -> bool:
        opening.stop = self.hold.held_after_failure(prior, opening.notes)
        return opening.stop is not None

    def open(self) -> Opening:
        """Everything before the decide/attempt loop that only reads and writes the ledger,
        inside the transaction that claims the unit (one durable write with the lease): what
        the latest attempt means for this run, the ``held`` refusal, an orphaned attempt made
        ``unknown``, and the run marker. Re-runnable (``Ledger.atomic``): it changes nothing
        of this object, and says what it found."""
        recorded = self.ledger.attempts(self.uow_id)  # kept for the evidence read below
        prior = recorded[-1] if recorded else None
        opening = Opening(prior)
        if prior is not None and prior.outcome == "succeeded":
            stale = self.x.reruns.get(self.uow_id)
            if stale is None and self.task.name in self.x.force:
                stale = self.x.forced_baseline(self.uow_id)
            opening.new_generation = stale is not None
            overwritten = self.hold.slot_overwritten() if stale is None else None
            if overwritten is not None:  # e.g. a source reverted to an earlier version
                stale = prior.number
                opening.notes.append(overwritten)
            if stale is None:
                opening.notes.append(
                    f"already succeeded in attempt {prior.number}; not run again "
                    "(a new input or transform version is a new unit of work)"
                )
                opening.stop = Stop("succeeded", "latest attempt succeeded in an earlier run"
                                    + self.hold.asserted_by(prior.number), skipped=True)
                return opening
            if prior.number > stale:
                opening.notes.append(
                    f"attempt {prior.number} (holder {prior.holder}) succeeded after the rerun "
                    f"was planned on attempt {stale or 'none'}; not run again"
                )
                opening.stop = Stop("succeeded", f"succeeded in attempt {prior.number} by "
                                    f"{prior.holder} after this rerun was planned")
                return opening
            opening.stop = self.hold.held(f"attempt {prior.number} of this unit succeeded")
            if opening.stop is not None:
                return opening
            opening.rerun_of = prior.number
            opening.notes.append(
                f"attempt {prior.number} had succeeded; asked to run again: its next attempt "
                "takes a new job generation, so a remote job is really executed again"
                if opening.new_generation else
                f"attempt {prior.number} had succeeded; its output is gone, so it runs again "
                "under its own job generation: a remote job for these inputs is adopted by its "
                "id, not executed again"
            )
        elif prior is None and not (self.task.repeat_is_safe or self.task.name in self.x.repeat):
            earlier = self.hold.slot_success()
            if earlier is not None:
                opening.stop = self.hold.held(earlier)
                if opening.stop is not None:
                    return opening
        elif (prior is not None and prior.outcome.startswith("failed-")
              and self.task.effects_unseen
              and not (self.x.continue_run and self.has_run())
              and self._held_after_failure(opening, prior)):
            # a new run does not reset what the planner said of it: reconcile the effects
            # first (README: a failed attempt is retried only if transient and safe_repeat)
            return opening
        if prior is not None and prior.outcome == "running":
            opening.prior = prior = self._orphaned(prior, opening.notes)
        if prior is not None and prior.outcome in UNSETTLED_OUTCOMES:
            return opening  # reconciled first, outside any transaction (remote calls)
        if opening.rerun_of is not None or not (self.x.continue_run and self.has_run()):
            self.open_run(opening.rerun_of, latest=prior, notes=opening.notes)
            opening.opened = True
        return opening

    def begin_now(self, opening: Opening) -> Begun | None:
        """Inside the claiming transaction, right after ``open``: begin the run's first
        attempt there too when nothing can hold it back (no backoff to wait, no pool slots or
        cost estimate to take, the workflow deadline leaves room), so a unit that succeeds
        costs two durable writes: this one, and the one that finishes it. None: the loop
        decides and begins it the usual way. Re-runnable, like ``open``."""
        if not self.may_begin or not opening.opened or opening.stop is not None:
            return None
        task = self.task
        if self.x.pool_for(task) is not None or (
            task.maximum_bytes_billed is not None and task.cost_estimate is not None
        ):
            return None
        budget = self.x.attempts_per_call
        if budget is not None and budget < 1:
            return None
        evidence = self.gathered()
        decision = self.plan(evidence)
        if decision is None or evidence.attempts_in_run > 0 or decision.decision not in (
            Decision.RETRY_ELIGIBLE, Decision.WAIT_BACKOFF
        ):
            return None
        try:
            if self.deadline is not None:
                self.deadline.check(evidence.duration_seconds())
            timeout = self.gates.attempt_timeout()
        except WorkflowTimeout:
            return None  # the loop records why it does not start
        record, generation, token = self.runner.begin_in(self.ledger, opening.new_generation)
        return Begun(evidence, record, generation, token, timeout)

    def open_to_settle(self) -> Opening:
        """The claim of another unit of the slot only to settle its unsettled attempt
        (``twice.engine.siblings``): its latest attempt, a ``running`` one recorded unknown
        (``_orphaned``). No run is opened and nothing begins: its inputs are not current."""
        prior = self.ledger.latest_attempt(self.uow_id)
        opening = Opening(prior)
        if prior is not None and prior.outcome == "running":
            opening.prior = self._orphaned(prior, opening.notes)
        return opening

    def _orphaned(self, prior: AttemptRecord, notes: list[str]) -> AttemptRecord:
        """A ``running`` attempt found while WE hold the lease has lost its process.

        This run has started nothing yet, and the holder that began the attempt no longer
        holds the lease: it crashed after the lease was released, or it is this holder's name
        restarted after a crash (taking over someone else's expired lease is handled by the
        ledger, which already recorded the attempt as unknown). Its work may have happened,
        so the outcome is unknown, not failed: record that and why, then reconcile.
        """
        if prior.holder == self.x.holder:
            how = (
                f"holder {prior.holder} (this worker's name, restarted) began it and no "
                "process of that name is running it now"
            )
        else:
            how = f"holder {prior.holder} began it and gave up the lease without finishing it"
        why = (
            f"attempt {prior.number} was still recorded running when {self.x.holder} got the "
            f"lease: {how}; its effects may exist, so the outcome is unknown (not failed) and "
            "is reconciled before anything else, never blindly retried"
        )
        record = self.ledger.finish_attempt(self.uow_id, prior.number, "unknown")
        self.ledger.record_observation(
            self.uow_id, "unknown", source=EXECUTOR_SOURCE, attempt=prior.number,
            detail={
                "why": why, "previous_holder": prior.holder, "job_id": prior.job_id,
                "started_at": iso(prior.started_at),
            },
        )
        notes.append(why)
        return record

    def has_run(self) -> bool:
        return any(o.state == RUN_STARTED for o in self.ledger.observations(self.uow_id))

    def open_run(self, rerun_of: int | None = None, *,
                  latest: AttemptRecord | Literal["read"] | None = "read",
                  notes: list[str] | None = None) -> None:
        """Record the run marker; ``rerun_of`` names the succeeded attempt this run repeats
        (``twice.engine.evidence`` then stops treating that success as the unit's state).
        ``latest``: the latest attempt, when the caller has just read it in this transaction;
        ``notes``: where to say the interval is open (default: the run's notes)."""
        if latest == "read":
            latest = self.ledger.latest_attempt(self.uow_id)
        if notes is None:
            notes = self.notes
        detail: dict[str, Any] = {
            "holder": self.x.holder,
            "first_attempt": (0 if latest is None else latest.number) + 1,
            "settings": self.settings.to_detail(),
            # who waits on this unit: an update names them when its deadline no longer fits
            "downstream": sorted(self.x.pipeline.dependents_of(self.task.name)),
        }
        if rerun_of is not None:
            detail["rerun_of"] = rerun_of
        now = self.x.now()
        if self.unit.interval.end > now:  # allowed (allow_open): say the output is partial
            detail["open_interval"] = {"as_of": iso(now), "ends": iso(self.unit.interval.end)}
            notes.append(
                f"the interval had not ended when run (it ends {iso(self.unit.interval.end)}): "
                "its output covers a partial interval"
            )
        self.ledger.record_observation(
            self.uow_id, RUN_STARTED, source=EXECUTOR_SOURCE, detail=detail
        )


def claim_and_drive(
    x: Executor,
    task: Task,
    interval: Interval,
    upstream: Mapping[str, Any],
    deadline: Deadline | None,
    wall_deadline: datetime | None,
    settled: list[str] | None = None,
) -> tuple[UnitResult, bool]:
    """Identify the unit of ``task`` for ``interval``, claim it (``Claim``, in the lease's
    transaction) and drive it (``twice.engine.drive.UnitDriver``) under a ``LeaseKeeper``. The
    result, and whether the run ended ``superseded`` (its inputs changed: the executor
    identifies the new unit and drives that). ``settled``: the other units of the slot were
    settled just now (``twice.engine.siblings``), as these notes say: not looked for again."""
    try:
        unit = x.unit_for(task.name, interval)
    except Exception as exc:
        return UnitResult(
            task.name, interval, "blocked",
            f"cannot identify the unit of work: {type(exc).__name__}: {redact(str(exc))}",
            error=f"{type(exc).__name__}: {redact(str(exc))}",
        ), False
    try:
        settings = PlanSettings.for_task(
            x.pipeline, task, unit.interval,
            max_observation_age=x.max_observation_age, workflow_deadline=wall_deadline,
        )
    except Exception as exc:  # e.g. a deadline function that fails for this interval
        reason = f"cannot plan it: {type(exc).__name__}: {redact(str(exc))}"

        def blocked(ledger: Ledger) -> None:
            ledger.record_unit(unit)
            ledger.record_observation(
                unit.uow_id, "blocked", source=EXECUTOR_SOURCE, detail={"reason": reason}
            )

        x.ledger.atomic(blocked)
        return UnitResult(task.name, interval, "blocked", reason, uow_id=unit.uow_id,
                          error=f"{type(exc).__name__}: {redact(str(exc))}"), False

    from twice.engine.drive import UnitDriver  # it drives what the claim opened
    from twice.ledger.ranges import unsettled_of_slot

    run = UnitDriver(x, task, unit, upstream, deadline, settings)
    siblings: list[str] = []

    def claim(ledger: Ledger) -> tuple[LeaseResult, Opening | None]:
        """One durable write records the unit, takes its lease, opens the run and, when
        nothing holds it back, begins its first attempt. Not when another unit of the slot is
        unsettled (``twice.engine.siblings``): that one is settled first, then this claimed
        again."""
        ledger.record_unit(unit)
        lease = ledger.acquire_lease(unit.uow_id, x.holder, x.lease_ttl)
        if not lease.acquired:
            return lease, None
        if settled is None and task.owns_output:
            siblings[:] = unsettled_of_slot(ledger, unit.pipeline, unit.task,
                                            unit.interval.start, unit.interval.end, unit.uow_id)
            if siblings:
                return lease, None
        opening = run.claim.open()
        opening.begun = run.claim.begin_now(opening)
        return lease, opening

    # The claim may begin the attempt, which holds the file's writer: it is taken before
    # the claim if it is free (never waited for inside a ledger transaction, nor by a unit
    # that turns out to be skipped), and given back at once if no attempt began.
    held = x.writers.held_if_free(task.destination)
    run.claim.may_begin = held is not None
    early = held if held is not None else contextlib.ExitStack()
    try:
        lease, opening = x.ledger.atomic(claim)
    except LedgerError as exc:
        early.close()
        if isinstance(exc, LedgerCommitUnknownError):
            raise  # the claim may be recorded: its attempt may have begun
        return claim_not_recorded(task, interval, unit, exc), False
    except BaseException:
        early.close()
        raise
    if opening is None or opening.begun is None:
        early.close()
    if siblings:  # settled first (our lease given back meanwhile), then claimed again
        from twice.engine.siblings import settle_siblings

        x.ledger.release_lease(unit.uow_id, x.holder)
        notes = settle_siblings(x, task, siblings, upstream, deadline, settings)
        return claim_and_drive(x, task, interval, upstream, deadline, wall_deadline,
                               settled=notes)
    if opening is None:  # the lease is held elsewhere: nothing was opened
        latest = x.ledger.latest_attempt(unit.uow_id)
        return UnitResult(
            task.name, interval, "leased-elsewhere",
            f"leased by {lease.holder} until {iso(lease.expires_at)}; not run",
            uow_id=unit.uow_id, holder=lease.holder, lease_expires_at=lease.expires_at,
            total_attempts=0 if latest is None else latest.number,
        ), False
    run.claim.writer = early
    with LeaseKeeper(x.ledger, unit.uow_id, x.holder, x.lease_ttl,
                     x.renewals, lease.expires_at) as keeper:
        run.runner.token = lease.token
        run.scope.lease.keeper = keeper
        try:
            result = run.drive(opening)
        finally:
            early.close()  # normally already handed to the attempt and released there
    if settled:
        result = with_notes(result, *settled)
    if lease.taken_over_from is not None:
        note = takeover_note(x, unit.uow_id, lease.taken_over_from, result)
        result = with_notes(result, note)
    if keeper.lost:
        note = "the lease could not be renewed while running: another holder may have run it"
        result = with_notes(result, note)
    return result, run.lifecycle.state is UnitState.SUPERSEDED


def takeover_note(x: Executor, uow_id: str, previous: str, result: UnitResult) -> str:
    """Say in the result what the ledger recorded when we took a lease over (expired, or
    its holder's process gone)."""
    from twice.ledger import LEASE_TAKEOVER_STATE

    takeovers = [
        o for o in x.ledger.observations(uow_id) if o.state == LEASE_TAKEOVER_STATE
    ]
    detail = takeovers[-1].detail if takeovers else {}
    unknown = detail.get("attempts_now_unknown")
    how = "lease of exited process" if detail.get("holder_exited") else "expired lease of"
    note = f"took over the {how} {previous}"
    if unknown:
        handled = (
            "left for reconciliation" if result.outcome == "unknown-needs-reconcile"
            else "reconciled before anything else"
        )
        note += (
            f"; attempt {', '.join(map(str, unknown))} was still running under it: recorded "
            f"unknown and {handled}, not blindly retried"
        )
    return note


def with_notes(result: UnitResult, *notes: str) -> UnitResult:
    return replace(result, notes=(*result.notes, *notes))
