"""Settlement: gathering the evidence the settlement rule asks for, and carrying out its verdict.

The rule itself is ``twice.engine.settle.settle`` (pure; called through this module's name, so a
simulation control can switch it). ``Settler`` reads the destination's commit record of an
unknown attempt (sealing the slice before concluding it never committed), asks the task's
``reconcile`` by the attempt's own job id when the rule needs it, and records the verdict:
written (verified from its commit record), succeeded remotely, not done (retried under the same
job id or a new generation), left unknown, or for the operator. It answers with a ``Stop``, a
``Rewritten`` (the attempt committed but a later write replaced its rows), or None (plan again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twice.core.decision import DecisionResult
from twice.core.outcomes import RemoteState
from twice.core.timescale import format_duration
from twice.define.pipeline import TaskContext
from twice.destinations.commits import CommitRecord, WriteStamp
from twice.engine.events import Reconciled
from twice.engine.evidence import EXECUTOR_SOURCE, UnitEvidence
from twice.engine.phase import Account, Phase, Stop, UnitScope, first_line
from twice.engine.reconcile import ReconcileReport, reconcile_attempt
from twice.engine.settle import Commit, Known, Proof, Settlement, Verdict, settle
from twice.engine.slots import SlotHolding
from twice.engine.timeouts import still_running
from twice.engine.verify import OutputCheck
from twice.ledger.lease_holders import running_elsewhere

if TYPE_CHECKING:
    from twice.ledger import AttemptRecord


@dataclass(frozen=True)
class CommitRead:
    """What the destination said of an unknown attempt's owned write
    (``CommitEvidence.read_commit``)."""

    state: Commit
    commit: CommitRecord | None = None  # its record (None with PRESENT: only the marker)
    later: CommitRecord | None = None  # a later write that replaced its rows since
    sealed: bool = False  # the slice was sealed against it before concluding ABSENT
    acting: str | None = None  # MAY_COMMIT: why it may still commit
    error: str | None = None  # UNREADABLE: why


def _sealing(sealed: bool) -> str:
    """Why an absent commit record stays absent."""
    return ("the slice is sealed against it, so it never will" if sealed else
            "the slice could not be sealed (Spark; a table format before its table exists): "
            "should its process be paused rather than gone, a write it makes is refused once "
            "this unit's next write commits")


@dataclass(frozen=True)
class Rewritten:
    """The unknown attempt's write committed, but a later write replaced its rows since: it
    is closed succeeded, and its output is gone (the driver runs the unit again)."""

    later: CommitRecord


class CommitEvidence(Phase):
    """Reads what the destination and this host say of an unknown attempt: its commit record
    (the slice sealed before concluding it never committed), and whether it may still act."""

    def __init__(self, scope: UnitScope, account: Account, check: OutputCheck) -> None:
        super().__init__(scope, account)
        self.check = check

    def wait_for_thread(self, number: int) -> None:
        """Give attempt ``number``'s timed-out thread in this process (if it still runs) the
        observe budget to end, bounded by the deadline, as a running remote job is observed:
        the service's "not found" settles nothing while the thread can still send. (An owned
        write needs no wait: the seal refuses the thread's late commit.)"""
        worker = still_running(self._attempt_key(number))
        if worker is None:
            return
        budget = self.x.observe_timeout
        if self.deadline is not None:
            budget = min(budget, max(0.0, self.deadline.remaining()))
        worker.join(budget)

    def still_acting(self, attempt: AttemptRecord) -> str | None:
        """Why ``attempt`` may still make its request, or None: its timed-out thread still
        runs in this process, or its holder is another process of this host that still
        exists (paused past its lease, say). From another host nothing can be seen; there a
        service that refuses a second job of the same id is what prevents a duplicate (the
        same job id is resubmitted)."""
        worker = still_running(self._attempt_key(attempt.number))
        if worker is not None:
            return f"its timed-out thread {worker.name!r} still runs in this process"
        pid = running_elsewhere(attempt.holder, attempt.started_at)
        if pid is not None:
            from twice.core import processes

            return (
                f"its holder {attempt.holder} (process {processes.look(pid).describe()}) "
                "still exists on this host"
            )
        return None

    def read_commit(self, attempt: AttemptRecord) -> CommitRead:
        """What the destination says of ``attempt``'s owned write. Before concluding that it
        never committed, the slice is sealed (``_seal``): its writer may be paused, not dead,
        and would otherwise commit after that conclusion. Only twice writes an owned slice
        (a task's remote job never does), so the seal is always right."""
        number = attempt.number
        try:
            commit = self.check.commit_record(number, attempt.generation)
            marked = commit is None and self._marked(attempt)
            sealed = commit is None and not marked and self._seal(attempt)
            if sealed:  # the attempt can no longer commit: its record (or none) is final
                commit = self.check.commit_record(number, attempt.generation)
                marked = commit is None and self._marked(attempt)
            later = None if commit is None else self._rewritten_after(commit)
        except Exception as exc:  # the destination cannot be read now: no evidence either way
            return CommitRead(Commit.UNREADABLE, error=f"{type(exc).__name__}: "
                               f"{first_line(exc)}")
        if commit is not None or marked:
            return CommitRead(Commit.PRESENT, commit=commit, later=later)
        acting = None if sealed else self.still_acting(attempt)
        if acting is not None:
            return CommitRead(Commit.MAY_COMMIT, acting=acting)
        return CommitRead(Commit.ABSENT, sealed=sealed)

    def _seal(self, attempt: AttemptRecord) -> bool:
        """Seal the slice under a fresh token before concluding that ``attempt`` never
        committed (``Destination.seal``): its process may be paused, not dead, or its timed-out
        thread still running, and would otherwise commit after that conclusion. False where
        the destination cannot seal."""
        from twice.destinations import open_destination
        from twice.destinations.commits import FencedWriteError

        stamp = WriteStamp(
            uow_id=self.uow_id,
            fence_key=self._fence_key,
            generation=attempt.generation or 1, attempt=0,
            token=self.ledger.next_fencing_token(), input_version=self.unit.input_version,
            ledger=self.ledger.identity, ledger_at=self.ledger.url,
        )
        with open_destination(self.task.destination) as dest:
            try:
                return dest.seal(stamp)
            except FencedWriteError:
                return True  # a newer token holds the slice: the attempt cannot commit either

    def _rewritten_after(self, commit: CommitRecord) -> CommitRecord | None:
        """The destination's latest write that replaced ``commit``'s rows since: a later
        replace or upsert of the same slice (fence key). None while they are still there."""
        from twice.destinations import open_destination

        if commit.mode == "append":
            return None  # later appends add rows; they do not take these away
        with open_destination(self.task.destination) as dest:
            later = [record for record in dest.commit_records()
                     if record.fence_key == commit.fence_key and record.token > commit.token
                     and record.mode in ("replace", "upsert")]
        return later[-1] if later else None

    def _marked(self, attempt: AttemptRecord) -> bool:
        """Whether the destination's metadata names ``attempt`` as the unit's last write though
        its commit record is gone (``Destination.marked_attempt``)."""
        from twice.destinations import open_destination

        with open_destination(self.task.destination) as dest:
            marked = dest.marked_attempt(self.uow_id)
        return marked is not None and marked == (attempt.generation or 1, attempt.number)


class Settler(Phase):
    """Decides what an unknown attempt's evidence proves, by the settlement rule."""

    def __init__(self, scope: UnitScope, account: Account, check: OutputCheck, slots: SlotHolding,
                 context: Callable[[AttemptRecord, int | None], TaskContext]) -> None:
        super().__init__(scope, account)
        self.check, self.slots, self._context = check, slots, context
        self.evidence = CommitEvidence(scope, account, check)

    def resolve_unknown(
        self, attempt: AttemptRecord, decision: DecisionResult, evidence: UnitEvidence
    ) -> Stop | Rewritten | None:
        """Settle an unknown/running attempt by the settlement rule (``twice.engine.settle``):
        gather the evidence it asks for, then carry out its verdict; a UnitResult if we must
        stop. ``safe_repeat=True`` never settles an unknown outcome (the lab reconciles
        first); ``safe_repeat="same-job-id"`` does, by sending again under the same id."""
        self.record_decision(decision, evidence, job_id=attempt.job_id)
        read = self.evidence.read_commit(attempt) if self.task.owns_output else CommitRead(
            Commit.NOT_OWNED)
        asked: list[ReconcileReport] = []

        def ask_remote() -> RemoteState:
            assert attempt.job_id is not None
            # before the service is asked (see CommitEvidence.still_acting)
            self.evidence.wait_for_thread(attempt.number)
            polls = max(1, int(self.x.observe_timeout / self.x.poll_interval))
            asked.append(reconcile_attempt(
                self.task, attempt.job_id, self._context(attempt, attempt.generation),
                ledger=self.ledger, attempt=attempt.number, poll_interval=self.x.poll_interval,
                max_polls=polls, sleep=self.x.sleep, deadline=self.deadline,
            ))
            return asked[-1].state

        known = Known(commit=read.state,
                      can_reconcile=self.task.reconcile is not None and attempt.job_id is not None,
                      same_job_id=self.task.repeats_under_job_id)
        settlement = settle(known, ask_remote=ask_remote,
                            still_acting=lambda: self.evidence.still_acting(attempt))
        return self._carry_out(settlement, attempt, read, asked[-1] if asked else None, decision)

    def _carry_out(self, settlement: Settlement, attempt: AttemptRecord, read: CommitRead,
                   report: ReconcileReport | None, decision: DecisionResult
                   ) -> Stop | Rewritten | None:
        """Record the settlement's verdict on ``attempt`` (None: the loop plans again)."""
        number, job_id, verdict = attempt.number, attempt.job_id, settlement.verdict
        if verdict is Verdict.WRITTEN:
            return self._settle_written(attempt, read)
        if verdict is Verdict.LEAVE_UNKNOWN:
            return Stop("unknown-needs-reconcile",
                                self._why_unknown(attempt, settlement, read, report))
        if verdict is Verdict.ASK_OPERATOR:
            what = f"job {job_id}" if job_id else "its effects"
            return Stop("unknown-needs-reconcile", (
                f"attempt {number} outcome unknown and twice cannot see the task's effects (no "
                f"owned write, no reconcile function, not safe_repeat='same-job-id'): inspect "
                f"{what}, then record it with `twice resolve {self.uow_id} --as "
                "succeeded|failed --note ...`; not retried"), decision)
        if verdict is Verdict.REMOTE_SUCCEEDED:
            if attempt.generation is not None:
                self.ledger.mark_generation(self.uow_id, attempt.generation, "succeeded")
            self.notes.append(f"reconcile found job {job_id} succeeded: not resubmitted")
            self._reconciled(attempt, "succeeded", f"reconcile({job_id})")
            detail: dict[str, Any] = {"job_id": job_id, "generation": attempt.generation,
                                      "reconcile": True}
            with self.guard():
                rejected = self.check.verify_now(number, detail, generation=attempt.generation)
            self.check.close_verified(attempt, rejected, detail, "output check after reconcile")
            return None
        if read.state is Commit.ABSENT:
            self._record_not_written(attempt, read)
        if verdict is Verdict.RETRY_NEW_GENERATION:
            self._reconciled(attempt, "failed", f"reconcile({job_id})")
            self._close_reconciled(
                number, job_id, "twice.engine.reconcile.RemoteJobFailed",
                f"reconcile found job {job_id} finished with an error",
                "confirmed failed: a new generation may be taken",
            )
            if attempt.generation is not None:
                self.ledger.mark_generation(self.uow_id, attempt.generation, "confirmed-failed")
            return None
        assert verdict is Verdict.RETRY_SAME_JOB_ID
        error_class, message, basis = self._not_done(attempt, settlement, read)
        if settlement.proof is Proof.REMOTE_JOB:
            self._reconciled(attempt, str(settlement.remote), f"reconcile({job_id})")
        else:
            self._reconciled(attempt, "not-found", basis)
        self._close_reconciled(number, job_id, error_class, message, basis)
        return None

    def _not_done(self, attempt: AttemptRecord, settlement: Settlement, read: CommitRead
                  ) -> tuple[str, str, str]:
        """(error class, message, basis) of an unknown attempt closed as not done, to be
        retried under the same job id."""
        number, job_id = attempt.number, attempt.job_id
        if settlement.proof is Proof.SAME_JOB_ID:
            return ("twice.engine.reconcile.SentAgainUnderSameJobId",
                    f"attempt {number}'s effect is sent again under the same job id {job_id}: "
                    "its receiver deduplicates by that id (safe_repeat='same-job-id')",
                    "same job id: the receiver accepts it once")
        if settlement.remote is RemoteState.SUCCEEDED:
            return ("twice.engine.reconcile.OutputNotWritten",
                    f"reconcile found job {job_id} succeeded, but no commit record of attempt "
                    f"{number} is in {self.task.destination}: its output was never written; "
                    "the retry adopts the job by its id (not resubmitted) and writes it",
                    "job adopted by its id; commit record absent: the output is written again")
        if settlement.remote is RemoteState.NOT_FOUND:
            return ("twice.engine.reconcile.RequestNeverArrived",
                    f"no job {job_id}: the request never reached the service",
                    "the same job id may be resubmitted (same generation)")
        return ("twice.engine.reconcile.NoCommitRecord",
                f"no commit record of attempt {number} in {self.task.destination}: its write "
                f"never committed ({_sealing(read.sealed)})",
                "commit record absent: safe to retry")

    def _why_unknown(self, attempt: AttemptRecord, settlement: Settlement, read: CommitRead,
                     report: ReconcileReport | None) -> str:
        """Why an attempt is left unknown (the result's reason; an observation too where the
        service was asked)."""
        number, job_id = attempt.number, attempt.job_id
        if read.state is Commit.UNREADABLE:
            return (f"attempt {number} outcome unknown and its destination cannot be read to "
                    f"find its commit record ({read.error}); not retried")
        if read.state is Commit.MAY_COMMIT:
            return (f"no commit record of attempt {number} yet, but it may still write: "
                    f"{read.acting}, and this destination cannot be sealed against it; outcome "
                    "left unknown, nothing rewritten (settled on the next run)")
        assert report is not None
        if settlement.acting is not None:
            reason = (
                f"job {job_id} not found, but attempt {number} may still send it: "
                f"{settlement.acting}; outcome left unknown, nothing resubmitted (the service "
                "is asked again on the next run)"
            )
            self.ledger.record_observation(
                self.uow_id, "unknown", source=EXECUTOR_SOURCE, attempt=number,
                detail={"job_id": job_id, "reconcile": "not-found", "why": reason},
            )
            return reason
        waited = format_duration(round(report.polls * self.x.poll_interval * 1_000_000))
        reason = (
            f"job {job_id} still {report.state.value} after {report.polls} look(s) "
            f"over about {waited}: observe it; nothing resubmitted"
        )
        if report.error:
            reason += f" (last reconcile error: {report.error})"
        return reason

    def _record_not_written(self, attempt: AttemptRecord, read: CommitRead) -> None:
        """The destination's evidence that ``attempt`` wrote nothing twice owns."""
        self.ledger.record_observation(
            self.uow_id, "not-found", source=self._destination_source, attempt=attempt.number,
            detail={"basis": "no commit record for this attempt: nothing twice owns was "
                             "written", "job_id": attempt.job_id, "sealed": read.sealed},
        )

    @property
    def _destination_source(self) -> str:
        return f"destination:{self.task.destination.partition(':')[0]}"

    def _settle_written(self, attempt: AttemptRecord, read: CommitRead) -> Rewritten | None:
        """The attempt's commit record (or the unit's marker) is in the destination: it
        succeeded. Verified from the record, or, when a later write has replaced its rows
        since, closed succeeded and run again (``_settle_replaced``)."""
        number, commit = attempt.number, read.commit
        source = self._destination_source
        basis = "commit record found" if commit is not None else (
            "commit record pruned with the table's history (snapshot expiry, log "
            "retention); the unit's marker in the table's metadata names this attempt")
        found: dict[str, Any] = {"basis": basis}
        if commit is not None:
            found["commit"] = commit.to_dict()
            if read.later is not None:
                return self._settle_replaced(attempt, commit, read.later, found, source)
        self.ledger.record_observation(
            self.uow_id, "succeeded", source=source, attempt=number, detail=found)
        self._reconciled(attempt, "succeeded", f"{basis} in the destination"
                         if commit is not None else basis)
        if attempt.generation is not None:
            self.ledger.mark_generation(self.uow_id, attempt.generation, "succeeded")
        self.notes.append(
            f"attempt {number}'s write is in the destination ({basis}): it succeeded; "
            "nothing rewritten"
        )
        detail: dict[str, Any] = {"job_id": attempt.job_id, "generation": attempt.generation,
                                  "reconcile": True, **found}
        with self.guard():
            rejected = self.check.verify_now(number, detail, commit=commit,
                                             generation=attempt.generation)
        self.check.close_verified(attempt, rejected, detail, "output check after reconcile")
        return None

    def _settle_replaced(self, attempt: AttemptRecord, commit: CommitRecord,
                         later: CommitRecord, found: dict[str, Any], source: str) -> Rewritten:
        """The attempt's write committed (its record proves it), but a later write has
        replaced its rows: the attempt succeeded, its output is gone. It is closed succeeded
        without recording its slice as the partition's version (the slice holds the later
        write's rows), and :class:`twice.engine.drive.UnitDriver` runs the unit again."""
        number = attempt.number
        found["rewritten_by"] = {"uow_id": later.uow_id, "attempt": later.attempt,
                                 "token": later.token, "committed_at": later.committed_at}
        self.ledger.record_observation(
            self.uow_id, "succeeded", source=source, attempt=number, detail=found)
        self._reconciled(attempt, "succeeded", "commit record found in the destination, "
                         f"rewritten since by unit {later.uow_id}")
        if attempt.generation is not None:
            self.ledger.mark_generation(self.uow_id, attempt.generation, "succeeded")
        self.ledger.finish_attempt(self.uow_id, number, "succeeded")
        self.notes.append(
            f"attempt {number}'s write committed (its commit record, token {commit.token}), "
            f"but unit {later.uow_id} rewrote the slice after it (token {later.token}): its "
            "output is gone, so this unit runs again"
        )
        return Rewritten(later)

    def _reconciled(self, attempt: AttemptRecord, state: str, basis: str) -> None:
        self.slots.job_ended(attempt.number)  # confirmed ended: its pool slots are released
        self.x.emit(Reconciled(self.uow_id, self.task.name, self.unit.interval, attempt.number,
                               state, basis, attempt.job_id))

    def _close_reconciled(self, number: int, job_id: str | None, error_class: str, message: str,
                          basis: str) -> None:
        """An unknown attempt that reconcile showed did not succeed: close it as transient."""
        self.ledger.finish_attempt(self.uow_id, number, "failed-transient")
        self.ledger.record_error(
            self.uow_id, error_class=error_class, message=message, classification="transient",
            attempt=number, detail={"source": "reconcile", "job_id": job_id, "basis": basis},
        )

