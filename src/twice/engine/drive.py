"""Drive: the decide/attempt loop of one run of one unit, moved only through its lifecycle.

``UnitDriver`` asks the lab planner on ledger evidence before each step and hands each phase to
its collaborator (``twice.engine.lifecycle`` names them): settle an unknown attempt, wait a
backoff, pass the start gates, run the attempt, verify and record it. It holds the run's
``Lifecycle`` and its collaborators, not their state: each answers with a typed value.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from twice.core.decision import Decision
from twice.core.outcomes import STOPPING_DECISIONS, UNSETTLED_OUTCOMES
from twice.core.unit import UnitOfWork
from twice.define.pipeline import Task
from twice.engine.attempting import AttemptRunner, Ended
from twice.engine.claim import Begun, Claim, Opening
from twice.engine.evidence import EXECUTOR_SOURCE, UnitEvidence
from twice.engine.gates import StartGates
from twice.engine.hold import RepeatHold
from twice.engine.lifecycle import Lifecycle, UnitState
from twice.engine.phase import Account, Phase, Stop, UnitScope
from twice.engine.results import AttemptHistory, UnitResult
from twice.engine.settlement import Settler
from twice.engine.slots import SlotHolding
from twice.engine.timeouts import WorkflowTimeout
from twice.engine.verify import OutputCheck
from twice.errors import InputsChangedError, Interrupted

if TYPE_CHECKING:
    from twice.engine.evidence import PlanSettings
    from twice.engine.executor import Executor
    from twice.engine.timeouts import Deadline
    from twice.ledger import AttemptRecord, JobGenerationRecord


class UnitDriver:
    """One run of one unit of work under our lease: the decide/attempt/settle loop. It holds
    the run's ``Lifecycle`` and its phases; each phase owns its own state and answers with a
    typed value (``Stop``, ``Ended``, ``Rewritten``), which only this loop acts on."""

    def __init__(
        self,
        executor: Executor,
        task: Task,
        unit: UnitOfWork,
        upstream: Mapping[str, Any],
        deadline: Deadline | None,
        settings: PlanSettings,
    ) -> None:
        self.scope = scope = UnitScope(executor, task, unit, upstream, deadline, settings)
        self.account = account = Account()
        self.lifecycle = Lifecycle()
        self.x, self.ledger, self.task, self.unit = executor, executor.ledger, task, unit
        self.uow_id = unit.uow_id
        self.planner = Phase(scope, account)
        self.slots = SlotHolding(scope, account)
        self.check = OutputCheck(scope, account)
        self.gates = StartGates(scope, account)
        self.hold = RepeatHold(scope, account)
        self.runner = AttemptRunner(scope, account, self.check, self.slots)
        self.settler = Settler(scope, account, self.check, self.slots, self.runner.context)
        self.claim = Claim(scope, account, self.hold, self.gates, self.runner)

    # -- the loop -----------------------------------------------------------------------------

    def drive(self, opening: Opening) -> UnitResult:
        """Run the unit; ``opening`` is what ``Claim.open`` found in the claiming transaction."""
        try:
            stop = self._drive(opening)
            self.lifecycle.move(UnitState.SUPERSEDED if stop.superseded else UnitState.STOPPED)
            return self._result(stop)
        finally:
            self.slots.leave()

    def settle_only(self, opening: Opening) -> str:
        """Settle the unsettled attempt ``opening`` found (``Claim.open_to_settle``), then stop,
        saying how it settled: for another unit of a slot (``twice.engine.siblings``), whose
        inputs are not current, so nothing is attempted whatever the verdict."""
        try:
            prior = opening.prior
            if prior is None or prior.outcome not in UNSETTLED_OUTCOMES:
                return "settled meanwhile by another holder"
            self.lifecycle.move(UnitState.SETTLING)
            evidence = self.planner.gathered()
            decision = self.planner.plan(evidence)
            assert decision is not None
            settled = self.settler.resolve_unknown(prior, decision, evidence)
            self.lifecycle.move(UnitState.STOPPED)
            if isinstance(settled, Stop):
                return f"attempt {prior.number} left {settled.outcome}: {settled.reason}"
            latest = self.ledger.latest_attempt(self.uow_id)
            outcome = "unknown" if latest is None else latest.outcome
            replaced = ("" if settled is None else
                        f" (its rows were replaced since by unit {settled.later.uow_id})")
            return f"attempt {prior.number} settled {outcome}{replaced}"
        finally:
            self.slots.leave()

    def _drive(self, opening: Opening) -> Stop:
        move = self.lifecycle.move
        self.account.notes.extend(opening.notes)
        self.account.before = opening.prior
        if opening.new_generation:
            self.runner.take_new_generation()
        if opening.stop is not None:
            return opening.stop
        prior = opening.prior
        evidence_next: UnitEvidence | None = None  # read where the lease was given back
        if prior is not None and prior.outcome in UNSETTLED_OUTCOMES:
            move(UnitState.SETTLING)
            evidence = self.planner.gathered()
            decision = self.planner.plan(evidence)
            assert decision is not None
            settled = self.settler.resolve_unknown(prior, decision, evidence)
            if isinstance(settled, Stop):
                return settled
            resolved = self.ledger.latest_attempt(self.uow_id)
            if resolved is not None and resolved.outcome == "succeeded":
                if settled is None:
                    return Stop("succeeded", "reconcile found the earlier attempt's "
                                "job succeeded; nothing resubmitted")
                # it committed, but the slice has been rewritten since: its output is gone
                held = self.hold.held(f"attempt {resolved.number} of this unit succeeded")
                if held is not None:
                    return held
                opening.rerun_of = resolved.number  # under its own generation: its job is
                self.claim.open_run(resolved.number, latest=resolved)  # adopted, not rerun
                opening.opened = True
        if not opening.opened and (
            opening.rerun_of is not None or not (self.x.continue_run and self.claim.has_run())
        ):
            self.claim.open_run(opening.rerun_of)
        released = False  # our success gave the lease back
        if opening.begun is not None:
            ended = self._attempt(opening.begun.evidence, opening.begun)
            if isinstance(ended, Stop):
                return ended
            moved = self._inputs_moved(ended)
            if moved is not None:
                return moved
            released, evidence_next = ended.released, ended.evidence
        else:
            move(UnitState.PLANNING)
        refreshes = 0
        waited_after: int | None = None  # the attempt whose backoff we already waited
        while True:
            if evidence_next is not None:
                evidence, evidence_next = evidence_next, None
            else:
                evidence = self.planner.gathered()
            decision = self.planner.plan(evidence)
            assert decision is not None
            kind = decision.decision
            latest = evidence.latest
            if kind is Decision.VALIDATE_OUTPUT:
                return Stop("succeeded", "finished without error", decision,
                            planned=(decision, evidence))
            if released:
                # our success gave the lease back: whatever comes next is not ours to write
                return Stop("succeeded", f"finished without error; next: "
                            f"{kind.value} ({decision.reason})", decision,
                            planned=(decision, evidence))
            if kind in STOPPING_DECISIONS:
                self.planner.record_decision(decision, evidence)
                return Stop(STOPPING_DECISIONS[kind], decision.reason, decision)
            if kind in (Decision.RECONCILE_REMOTE, Decision.OBSERVE_RUNNING):
                assert latest is not None
                move(UnitState.SETTLING)
                settled = self.settler.resolve_unknown(latest, decision, evidence)
                if isinstance(settled, Stop):
                    return settled
                move(UnitState.PLANNING)
                continue
            if kind is Decision.REFRESH_OBSERVATION:
                refreshes += 1
                if refreshes > 2:  # our own evidence cannot be this old: the clock is odd
                    return Stop("unknown-needs-reconcile", decision.reason, decision)
                self.ledger.record_observation(
                    self.uow_id, "refreshed", source=EXECUTOR_SOURCE,
                    attempt=None if latest is None else latest.number,
                    detail={"state": None if latest is None else latest.outcome},
                )
                move(UnitState.PLANNING)
                continue
            # retry-eligible or wait-backoff: attempt 1 of the run, or a retry
            budget = self.x.attempts_per_call
            if budget is not None and self.runner.started >= budget:
                self.planner.record_decision(decision, evidence, retry_owner="caller")
                return Stop(
                    "attempts-exhausted",
                    f"this call's budget of {budget} attempt(s) is used; the planner's next step "
                    f"is {kind.value} ({decision.reason}); the caller owns the retry loop",
                    decision,
                )
            waited_for = None if latest is None else latest.number
            if evidence.attempts_in_run > 0 and waited_after != waited_for:
                move(UnitState.WAITING)
                stop = self.gates.wait_backoff(decision, evidence)
                if stop is not None:
                    return stop
                waited_after = waited_for
                move(UnitState.PLANNING)
                continue  # plan again: the deadline check sees the real start
            move(UnitState.STARTING)
            ended = self._attempt(evidence)
            if isinstance(ended, Stop):
                return ended
            moved = self._inputs_moved(ended)
            if moved is not None:
                return moved
            released, evidence_next = ended.released, ended.evidence

    def _inputs_moved(self, ended: Ended) -> Stop | None:
        """An attempt that read or landed nothing because an upstream moved under it
        (``twice.engine.inputs``): the unit is identified again at once, not retried. Superseded
        when the ledger keys a new unit; blocked while the upstream's newer write is not
        recorded yet (the next run settles the upstream first)."""
        error = ended.report.error
        if not isinstance(error, InputsChangedError) or ended.report.ending != "transient":
            return None
        superseded = self.gates.inputs_changed()
        if superseded is not None:
            return superseded
        return Stop("blocked", f"{error}; the ledger still keys this unit, so it waits for "
                    "the upstream's write to be settled")

    def _attempt(self, evidence: UnitEvidence, begun: Begun | None = None) -> Stop | Ended:
        """Start, run and finish one attempt; a Stop if the unit stops right here.
        ``begun``: the claim began it (``Claim.begin_now`` made the checks below)."""
        if begun is not None:
            self.runner.adopt(begun.token)
            with contextlib.ExitStack() as held:
                held.enter_context(self.claim.hand_writer())  # the file's writer, held since
                return self._run(begun.record, begun.generation, begun.timeout)
        gates = self.gates
        refused = gates.workflow_refusal(evidence)
        if refused is None:
            refused = gates.cost_refusal()
        if refused is None:
            refused = gates.inputs_changed()
        if refused is None:
            refused = gates.lease_refusal()
        if refused is not None:
            return refused
        waited_from = time.monotonic()
        refused = self.slots.take()
        if refused is not None:
            return refused
        refused = gates.still_feasible(waited_from)
        if refused is not None:
            self.slots.give_back()
            return refused
        with contextlib.ExitStack() as held:
            waited_from = time.monotonic()
            held.enter_context(self.planner.guard())
            refused = gates.still_feasible(waited_from)  # the file's writer was busy meanwhile
            if refused is not None:
                self.slots.give_back()
                return refused
            try:
                timeout = gates.attempt_timeout()
            except WorkflowTimeout as exc:
                self.slots.give_back()
                return self.planner.not_started(f"not started: {exc}", "workflow-timeout")
            record, taken = self.runner.begin()
            return self._run(record, taken, timeout)

    def _run(self, record: AttemptRecord, taken: JobGenerationRecord,
             timeout: float | None) -> Stop | Ended:
        """Run the begun attempt (the file's writer held), verify and record how it ended."""
        self.lifecycle.move(UnitState.ATTEMPTING)
        report = self.runner.run(record, taken, timeout)
        self.lifecycle.move(UnitState.VERIFYING)
        ended = self.runner.finish(record, report)
        self.slots.after_attempt(report, record.number)
        if ended.closed_elsewhere is not None:
            return Stop("leased-elsewhere", ended.closed_elsewhere)
        if report.interrupted:
            raise Interrupted(
                f"{self.task.name} for {self.unit.interval.label} was interrupted "
                f"(KeyboardInterrupt) in attempt {record.number}; the attempt is recorded "
                "unknown and is settled from the destination's commit record on the next run"
            )
        self.lifecycle.move(UnitState.PLANNING)
        return ended

    # -- result -------------------------------------------------------------------------------

    def _result(self, stop: Stop) -> UnitResult:
        """The unit's result, with the planner's next decision on the ledger as it is now
        (``stop.planned``: that decision and its evidence, just read, nothing written since)."""
        outcome, reason, decision, decision_name = (stop.outcome, stop.reason, stop.decision,
                                                    stop.decision_name)
        planned, skipped = stop.planned, stop.skipped
        if planned is None:
            evidence = self.planner.gathered()
            final = self.planner.plan(evidence)
        else:
            final, evidence = planned
        latest = evidence.latest
        next_decision = final.decision.value if final is not None else (
            decision_name or (decision.decision.value if decision else None)
        )
        return UnitResult(
            task=self.task.name,
            interval=self.unit.interval,
            outcome=outcome,
            reason=reason,
            uow_id=self.uow_id,
            attempts=self.runner.started,
            total_attempts=0 if latest is None else latest.number,
            job_id=None if latest is None else latest.job_id,
            generation=None if latest is None else latest.generation,
            next_decision=next_decision,
            error=self.account.error,
            notes=tuple(self.account.notes),
            acceptance=self.check.acceptance,
            nonfatal=self.check.nonfatal,
            skipped=skipped,
            assumed=None if skipped else self.account.assumed,
            value=self.account.value,
            history=AttemptHistory(self.account.before, evidence.attempts),
        )
