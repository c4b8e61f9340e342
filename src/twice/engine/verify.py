"""Verify: the validate-output step, acceptance before landing and the fingerprint after.

``OutputCheck`` reads the slice (``twice.engine.verification``): acceptance criteria first (an
owned write refused before landing, ``verification.check_before_landing``, leaves the accepted
slice as it was), then the slice's fingerprint from its commit record, which the attempt's end
(or a settlement) records as the partition's next version. It answers with a ``Check``
(rejected, or measured) and owns what the result reports of it (acceptance, non-fatal count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twice.destinations.commits import CommitRecord
from twice.engine.events import (
    OutputRejected,
    OutputVerified,
)
from twice.engine.evidence import EXECUTOR_SOURCE
from twice.engine.phase import Account, Phase, UnitScope, mask_error
from twice.engine.verification import (
    AcceptanceFailed,
    MeasuredPartition,
    PartitionDiff,
    SchemaChangeError,
    measure_partition,
    record_measured,
)

if TYPE_CHECKING:
    from twice.destinations.columns import Schema
    from twice.ledger import AttemptRecord


@dataclass(frozen=True)
class Check:
    """What the validate-output step read (``OutputCheck.check_output``)."""

    rejected: BaseException | None = None  # the output is not accepted: why
    measured: MeasuredPartition | None = None  # the fingerprint to record as its next version
    assertions: tuple[Any, ...] = ()  # the acceptance criteria checked, for the events


class OutputCheck(Phase):
    """Decides whether an attempt's output is verified or rejected."""

    def __init__(self, scope: UnitScope, account: Account) -> None:
        super().__init__(scope, account)
        self.acceptance: tuple[str, ...] = ()  # the criteria's verdict last checked
        self.nonfatal = 0  # non-fatal errors recorded by the attempt last checked
        # attempts this process began and sent no non-fatal error for: none is recorded (only
        # the process running an attempt records its non-fatal errors), so none is read
        self._quiet: set[int] = set()

    def began(self, number: int) -> None:
        """This process began attempt ``number``."""
        self._quiet.add(number)

    def sending_nonfatal(self, number: int) -> None:
        """A non-fatal error of attempt ``number`` is about to be recorded (counted from the
        ledger from now on, whether the write lands or not)."""
        self._quiet.discard(number)

    def count_nonfatal(self, number: int) -> None:
        """Count attempt ``number``'s non-fatal errors for the result (no acceptance criteria
        counted them; read in the caller's transaction when there is one)."""
        self.nonfatal = self.nonfatal_count(number)

    def nonfatal_count(self, number: int) -> int:
        """Non-fatal errors recorded for attempt ``number`` (read in the caller's transaction
        when there is one; not read for an attempt begun here that recorded none)."""
        if number in self._quiet:
            return 0
        return sum(record.count for record in self.ledger.nonfatal_errors(self.uow_id)
                   if record.attempt == number)

    def refused_before_landing(self, number: int, failed: AcceptanceFailed,
                                detail: dict[str, Any]) -> Check:
        """The validate-output step of an attempt whose owned write acceptance refused before
        it committed (``verification.check_before_landing``): nothing landed, so nothing is
        read or recorded of the slice; the verdict goes into ``detail`` and the events as the
        check after the write would have put it."""
        verdict = failed.result
        self.nonfatal = self.nonfatal_count(number)
        self.acceptance = verdict.reasons
        detail["acceptance"] = {"passed": False, "checks": list(verdict.checks),
                                "refused_before_landing": failed.refused}
        self.x.emit(OutputRejected(self.uow_id, self.task.name, self.unit.interval, number,
                                   str(failed), assertions=verdict.assertions))
        return Check(rejected=failed, assertions=verdict.assertions)

    def check_output(
        self, number: int, returned: Any, detail: dict[str, Any], *,
        commit: CommitRecord | None = None, generation: int | None = None,
        schema: Schema | None = None,
    ) -> Check:
        """The validate-output step's reads (``twice.engine.verification``): acceptance
        criteria, then the slice's fingerprint (from the commit record when twice owned the
        write), which ``AttemptRunner.finish`` records as the partition's next version.

        A rejection comes back as an exception to record; the checks made go into ``detail``
        (the attempt's observation) and the result.
        """
        criteria = self.task.acceptance  # Task checked it is AcceptanceCriteria + destination
        assertions: tuple[Any, ...] = ()  # the criteria checked, as data, for the events
        if criteria is not None:
            # imported only here: twice.define.acceptance loads the destinations (PyArrow)
            from twice.engine.verification import AcceptanceFailed, check_task_output

            self.nonfatal = self.nonfatal_count(number)
            try:
                verdict = check_task_output(
                    criteria, self.task.destination, self.unit.interval, returned,
                    self.nonfatal, landed=self.task.write is not None,
                )
            except Exception as exc:  # the destination cannot be read: not verified
                mask_error(exc)
                detail["acceptance"] = {"passed": False, "checks": [], "error": str(exc)}
                return Check(rejected=exc)
            self.acceptance = verdict.checks if verdict.passed else verdict.reasons
            detail["acceptance"] = {"passed": verdict.passed, "checks": list(verdict.checks)}
            assertions = verdict.assertions
            if not verdict.passed:
                failed = AcceptanceFailed(verdict)
                self.x.emit(OutputRejected(self.uow_id, self.task.name, self.unit.interval,
                                           number, str(failed), assertions=assertions))
                return Check(rejected=failed)
        if not self.task.owns_output:  # nothing twice can read: acceptance was the check
            self.x.emit(OutputVerified(self.uow_id, self.task.name, self.unit.interval, number,
                                       self.acceptance, assertions=assertions))
            return Check()
        if commit is None:
            commit, schema = self.commit_record(number, generation), None
        superseded = self._superseded(commit)
        if superseded is not None:
            detail["superseded"] = superseded
            self.notes.append(superseded)
            return Check()  # its write happened; the slot already holds a newer writer's rows
        try:
            measured = measure_partition(self.task, self.unit.interval, commit=commit,
                                         schema=schema)
        except Exception as exc:
            mask_error(exc)
            detail["output_check"] = f"{type(exc).__name__}: {exc}"
            self.emit_checked(number, None, exc)
            return Check(rejected=exc)
        return Check(measured=measured, assertions=assertions)

    def _superseded(self, commit: CommitRecord | None) -> str | None:
        """A commit of ours that a newer writer of the same slot has already replaced (we were
        paused past our lease after writing): recording its fingerprint as the partition's
        latest version would be false. Checked only when our lease may be lost (cheap path
        otherwise)."""
        if commit is None or not self.lease_lost():
            return None
        from twice.destinations import open_destination
        from twice.destinations.commits import newest_token

        with open_destination(self.task.destination) as dest:
            newest = newest_token(dest.commit_records(), commit.fence_key)
        if newest is None or newest <= commit.token:
            return None
        return (
            f"attempt {commit.attempt}'s write (token {commit.token}) was replaced by a newer "
            f"writer of the slot (token {newest}) before twice recorded it: succeeded, but its "
            "fingerprint is not recorded as the partition's latest version"
        )

    def commit_record(self, number: int, generation: int | None) -> CommitRecord | None:
        """The destination's commit record of attempt ``number`` (this generation), if any,
        written by THIS ledger: the same task and interval is the same unit id under any
        ledger, so after ``twice adopt`` the previous ledger's record of an attempt with the
        same number is that ledger's write, not this attempt's (a record from before ledgers
        had an identity names none and still counts)."""
        from twice.destinations import open_destination

        ours = self.ledger.identity
        with open_destination(self.task.destination) as dest:
            for record in dest.commit_records(self.uow_id):
                if (record.attempt == number and generation in (None, record.generation)
                        and record.ledger in ("", ours)):
                    return record
        return None

    def verify_now(self, number: int, detail: dict[str, Any], *,
                    commit: CommitRecord | None = None, generation: int | None = None
                    ) -> BaseException | None:
        """The validate-output step for an attempt settled by reconcile: checked, and its
        partition's version recorded at once (the attempt is closed afterwards)."""
        check = self.check_output(number, None, detail, commit=commit, generation=generation)
        if check.measured is None:
            return check.rejected
        try:
            diff = record_measured(self.ledger, self.task, self.uow_id, number, check.measured,
                                   accept_schema_change=self.x.accept_schema_change)
        except Exception as exc:
            mask_error(exc)
            detail["output_check"] = f"{type(exc).__name__}: {exc}"
            self.emit_checked(number, None, exc)
            return exc
        detail["fingerprint"] = diff.to_dict()
        self.emit_checked(number, diff, None, check.assertions)
        return None

    def emit_checked(self, number: int, diff: PartitionDiff | None,
                      rejected: BaseException | None, assertions: tuple[Any, ...] = ()) -> None:
        """Tell the listeners how recording the partition's new version went: verified (the
        diff), or rejected (why; a refused schema change says so)."""
        if diff is not None:
            self.x.emit(OutputVerified(self.uow_id, self.task.name, self.unit.interval, number,
                                       self.acceptance, diff, diff.source,
                                       assertions=assertions))
        elif rejected is not None:
            self.x.emit(OutputRejected(
                self.uow_id, self.task.name, self.unit.interval, number, str(rejected),
                schema_change=isinstance(rejected, SchemaChangeError)))

    def close_verified(self, attempt: AttemptRecord, rejected: BaseException | None,
                        detail: dict[str, Any], during: str) -> None:
        number = attempt.number
        if rejected is None:
            self.ledger.finish_attempt(self.uow_id, number, "succeeded")
        else:
            self.account.error = f"{type(rejected).__name__}: {rejected}"
            self.ledger.finish_attempt(self.uow_id, number, "failed-permanent")
            self.ledger.record_exception(
                self.uow_id, rejected, classification="permanent", attempt=number,
                detail={"job_id": attempt.job_id, "during": during},
            )
        self.ledger.record_observation(
            self.uow_id, "succeeded" if rejected is None else "failed-permanent",
            source=EXECUTOR_SOURCE, attempt=number, detail=detail,
        )
