"""Hold: whether a task whose effects may repeat is executed again (README, "safe_repeat").

A task not asserted ``safe_repeat`` that already succeeded (this unit, or another unit of the same
task and interval), or failed after it may have acted, is ``held`` unless the operator names it
(``--repeat``) or resolved the failed attempt as not having taken effect (``twice resolve --as
failed``, read through ``twice.core.resolution.next_run_after``). ``RepeatHold`` answers with a
``Stop`` (held, recorded) or None; it keeps no state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twice.core import resolution
from twice.engine import results, units
from twice.engine.evidence import EXECUTOR_SOURCE
from twice.engine.phase import Phase, Stop

if TYPE_CHECKING:
    from twice.ledger import AttemptRecord, ResolutionRecord


class RepeatHold(Phase):
    """Decides whether the unit is held rather than executed again."""

    def held(self, why: str) -> Stop | None:
        """A task not asserted ``safe_repeat`` that already succeeded is not executed again
        unless the operator named it (``repeat``): its effects (an email, an API call) would
        happen twice. The refusal, recorded; None when it may run."""
        if self.task.repeat_is_safe or self.task.name in self.x.repeat:
            return None
        reason = (
            f"held: {why}, and task {self.task.name!r} is not safe_repeat (running it again "
            f"may repeat its side effects); name it to execute it again (--repeat "
            f"{self.task.name})"
        )
        self.ledger.record_observation(
            self.uow_id, "held", source=EXECUTOR_SOURCE, detail={"reason": reason}
        )
        return Stop("held", reason)

    def held_after_failure(self, prior: AttemptRecord, notes: list[str]) -> Stop | None:
        """A failed attempt of a task whose effects twice cannot see may have acted first, so
        it is held (``held``) unless an operator resolved it and the rule for resolutions
        (``twice.core.resolution.next_run_after``, read from the resolution's typed outcome)
        lets the next run execute it: ``--as failed``, the effect did not happen."""
        resolved = self._resolution_of(prior.number)
        if resolved is None:
            return self.held(f"attempt {prior.number} failed after it may have acted "
                             "(twice cannot see this task's effects)")
        said = (f"attempt {prior.number} was resolved by operator {resolved.operator} as "
                f"{resolved.outcome} ({resolution.CLAIMS[resolved.outcome]}; asserted with "
                "twice resolve, not observed by twice)")
        if resolution.next_run_after(resolved.outcome) is resolution.NextRun.EXECUTE:
            notes.append(f"{said}: executed again, nothing to repeat")
            return None
        return self.held(said)

    def _resolution_of(self, number: int) -> ResolutionRecord | None:
        """The operator's resolution of attempt ``number`` (``twice resolve``), if any."""
        for record in reversed(self.ledger.resolutions(self.uow_id)):
            if record.attempt.number == number:
                return record
        return None

    def asserted_by(self, number: int) -> str:
        """`` (asserted by operator X ...)`` when attempt ``number``'s success is an
        operator's resolution (``twice resolve``), not something twice observed; else ""."""
        record = self._resolution_of(number)
        if record is not None and record.outcome == "succeeded":
            return (f" (asserted by operator {record.operator} with twice resolve, not "
                    "observed by twice)")
        return ""

    def slot_overwritten(self) -> str | None:
        """Why this unit's success no longer stands for its slot: the destination partition's
        latest recorded version was written by ANOTHER unit of the same task and interval
        (another input or transform version ran after it), so its output is gone. None while
        the slot still holds this unit's output (or the task owns no destination)."""
        latest = units.overwritten_by(self.ledger, self.task, self.unit)
        if latest is None:
            return None
        return (
            f"the slot now holds the output of unit {latest.uow_id} (fingerprint "
            f"v{latest.version}), written after this unit succeeded: this unit runs again"
        )

    def slot_success(self) -> str | None:
        """Another unit of the same task and interval (older input or transform version)
        that succeeded, described; None if there is none."""
        found = results.earlier_success(self.ledger, self.unit)
        if found is None:
            return None
        other, latest = found
        return (f"unit {other.uow_id} (input version {other.input_version or 'none'}) "
                f"succeeded for {self.unit.interval.label} in attempt {latest.number}")
