"""Gates: whether the next attempt may start now (never one that cannot finish in time).

Before each attempt ``StartGates`` checks, in this order: the workflow deadline, the cost guard,
the unit's inputs (changed: the unit is superseded), the lease (lost: another holder settles it);
after waiting for pool slots or the file's writer, the deadlines again. It also waits the
policy's backoff between attempts, refusing up front when the attempt after it could not finish.
Each answer is a ``Stop`` (recorded) or None; it keeps no state.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from twice.core.decision import Decision, DecisionResult
from twice.core.outcomes import STOPPING_DECISIONS
from twice.engine.evidence import EXECUTOR_SOURCE, UnitEvidence
from twice.engine.phase import Phase, Stop
from twice.engine.timeouts import WorkflowTimeout

if TYPE_CHECKING:
    pass


POOL_WAIT_RECHECK_SECONDS = 0.05


class StartGates(Phase):
    """Decides whether the next attempt may start, and waits its backoff."""

    def wait_backoff(self, decision: DecisionResult, evidence: UnitEvidence
                      ) -> Stop | None:
        """Sleep the drawn backoff; a UnitResult instead when the attempt after it could not
        finish in time (``_infeasible_after``)."""
        attempts = evidence.attempts_in_run
        jittered = self.x.jitter(self.task, attempts)
        finished = evidence.last_finished_at or evidence.as_of
        wait_for = (finished + timedelta(seconds=jittered) - evidence.as_of).total_seconds()
        refused = self._infeasible_after(wait_for, evidence)
        if refused is not None:
            return refused
        self.record_decision(
            decision, evidence,
            next_attempt=(evidence.latest.number if evidence.latest else 0) + 1,
            jitter=self.task.retry.jitter, jittered_delay=jittered, waits=max(0.0, wait_for),
        )
        self.x.sleep(wait_for)
        return None

    def _infeasible_after(self, wait_for: float, evidence: UnitEvidence) -> Stop | None:
        """The planner checks a backoff without its jitter; the delay drawn may be longer. An
        attempt that could not finish after it, validation included, before the workflow or
        the delivery deadline is refused now, not after sleeping past the deadline."""
        if wait_for <= 0:
            return None
        refused = self.workflow_refusal(evidence, after=wait_for)
        if refused is not None:
            return refused
        later = self.plan(replace(evidence, as_of=evidence.as_of + timedelta(seconds=wait_for)))
        if later is None or later.decision is not Decision.DEADLINE_INFEASIBLE:
            return None
        self.record_decision(later, evidence)
        return Stop(STOPPING_DECISIONS[later.decision], later.reason, later)

    def cost_refusal(self) -> Stop | None:
        """The cost guard (``twice.engine.cost.guard_task``): an estimate over the task's
        ``maximum_bytes_billed`` refuses the attempt before anything is submitted. The limit is
        the task's own, so every retry or rerun is checked against the same number."""
        from twice.engine.cost import guard_task

        check = guard_task(self.task, self.unit.interval)
        if check is None:
            return None
        if check.allowed:
            self.notes.append(check.reason)
            return None
        self.ledger.record_attempt_not_started(
            self.uow_id, reason=check.reason, decision="repair-cause", as_of=self.x.now(),
            detail=check.to_detail(),
        )
        return Stop("failed-permanent", check.reason, decision_name="repair-cause")

    def still_feasible(self, waited_from: float) -> Stop | None:
        """After a wait since ``waited_from`` (monotonic) longer than
        ``POOL_WAIT_RECHECK_SECONDS`` (for pool slots, or the destination file's writer), the
        checks made before it, again: the time spent waiting may leave too little to finish,
        validation included, before the delivery deadline or the workflow deadline (an attempt
        that cannot finish is never started). None when it can still start; when it cannot,
        the caller gives its pool slots back."""
        if time.monotonic() - waited_from <= POOL_WAIT_RECHECK_SECONDS:
            return None
        evidence = self.gathered()
        decision = self.plan(evidence)
        assert decision is not None
        refused: Stop | None
        if decision.decision in STOPPING_DECISIONS:
            self.record_decision(decision, evidence)
            refused = Stop(STOPPING_DECISIONS[decision.decision], decision.reason, decision)
        else:
            refused = self.workflow_refusal(evidence)
        return refused

    def workflow_refusal(self, evidence: UnitEvidence, after: float = 0.0) -> Stop | None:
        """Not started when the attempt, validation included, cannot finish before the
        workflow deadline if it starts ``after`` seconds from now; None when it can (or there
        is none)."""
        if self.deadline is not None:
            try:
                self.deadline.check(after + evidence.duration_seconds())
            except WorkflowTimeout as exc:
                return self.not_started(f"not started: {exc}", "workflow-timeout")
        return None

    def attempt_timeout(self) -> float | None:
        """The next attempt's timeout: the task's own, capped by the workflow deadline
        (``WorkflowTimeout`` when no time is left)."""
        return self.task.timeout if self.deadline is None else self.deadline.cap(self.task.timeout)

    def inputs_changed(self) -> Stop | None:
        """Input versions are recomputed before every attempt: if the unit's inputs changed
        since it was identified, this unit stops and the driver identifies the new one."""
        try:
            now = self.x.unit_for(self.task.name, self.unit.interval)
        except Exception:
            return None  # identified moments ago; a failing input_version shows on the next run
        if now.uow_id == self.uow_id:
            return None
        reason = (
            f"inputs changed before the attempt (input version {self.unit.input_version or 'none'}"
            f" -> {now.input_version}): unit {now.uow_id} runs instead"
        )
        self.ledger.record_observation(
            self.uow_id, "superseded", source=EXECUTOR_SOURCE,
            detail={"reason": reason, "by": now.uow_id},
        )
        return Stop("blocked", reason, superseded=True)

    def lease_refusal(self) -> Stop | None:
        """No new attempt once the lease may be lost (paused past it: another holder may be
        running the unit now, and settles it)."""
        if not self.lease_lost():
            return None
        reason = (
            "the lease was lost while this unit ran (renewal failed or expired): no new "
            "attempt starts; the holder that took it over settles it"
        )
        self.ledger.record_observation(
            self.uow_id, "lease-lost", source=EXECUTOR_SOURCE, detail={"reason": reason}
        )
        return Stop("leased-elsewhere", reason)
