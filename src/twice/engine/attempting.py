"""Attempting: one attempt run under its write stamp, and its end recorded.

``AttemptRunner`` begins the attempt (its job generation: reused until confirmed failed, a new one
once for a deliberate rerun; a fresh fencing token), runs the task's code under its ``WriteStamp``
(``twice.engine.attempt.call_attempt``: timeouts, isolation) and records how it ended in one
durable write, after the output check (``twice.engine.verify``). It answers with a ``Finished``
(what that write recorded), owns the fencing token and the count of attempts started, and never
decides what comes next.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from twice.core.outcomes import UNSETTLED_OUTCOMES, ErrorClassification, attempt_outcome
from twice.core.secrets import redact
from twice.define.pipeline import NonFatal, TaskContext
from twice.destinations.commits import WriteStamp
from twice.engine import inputs, snapshots
from twice.engine.attempt import AttemptReport, call_attempt, classify
from twice.engine.events import (
    AttemptFinished,
    AttemptStarted,
    OutputRejected,
)
from twice.engine.evidence import EXECUTOR_SOURCE, UnitEvidence, iso
from twice.engine.phase import Account, Phase, UnitScope, mask_error
from twice.engine.slots import SlotHolding
from twice.engine.verification import (
    AcceptanceFailed,
    PartitionDiff,
    SchemaChangeError,
    record_measured,
)
from twice.engine.verify import Check, OutputCheck
from twice.ledger.errors import LedgerError
from twice.remote.jobs import JobFailed, JobStatus

if TYPE_CHECKING:
    from twice.ledger import AttemptRecord, JobGenerationRecord, Ledger


@dataclass
class Ended:
    """What the transaction that finished an attempt recorded (``AttemptRunner.finish``)."""

    report: AttemptReport  # the attempt, its ending changed if its output was rejected
    diff: PartitionDiff | None = None  # the partition's version it recorded
    rejected: BaseException | None = None  # recording the version was refused: why
    released: bool = False  # the lease was given back
    evidence: UnitEvidence | None = None  # read in that transaction when it gave the lease back
    closed_elsewhere: str | None = None  # another holder had closed the attempt first: why


def _error_classification(report: AttemptReport) -> ErrorClassification:
    """How the ledger classifies an attempt's error: a job that succeeded but whose output
    was rejected is ``unknown`` only if the ending stayed ``succeeded``."""
    ending = report.ending
    if ending == "succeeded":
        return "unknown"
    return ending


def _intermediate_note(use: Any) -> str:
    """One line for the run report: reused (the task did not run), or why it was computed."""
    name = f"intermediate {use.entry.name!r} version {use.entry.version[:12]}"
    if use.reused:
        return f"{name}: reused the stored slice, its fingerprint matches; the task did not run"
    if use.refusal is not None:
        return f"{name}: {use.reason}; the task ran and its output replaced the slice"
    return f"{name}: {use.action} ({use.reason})"


def _is_schema_refusal(error: BaseException) -> bool:
    """The destination refused rows whose columns differ from the table's (a schema change
    the write could not apply): typed, never read out of a message. A ``SchemaChangeError``
    from verification is not one: ``OutputCheck.check_output`` already emitted its rejection."""
    from twice.destinations.columns import SchemaError

    return isinstance(error, SchemaError)


class AttemptRunner(Phase):
    """Runs one attempt and records how it ended; decides nothing about outcomes."""

    def __init__(self, scope: UnitScope, account: Account, check: OutputCheck, slots: SlotHolding,
                 token: int = 0) -> None:
        super().__init__(scope, account)
        self.check, self.slots = check, slots
        self.token = token  # the fencing token stamped on owned writes (fresh per attempt)
        self.started = 0  # attempts started in this run
        self._new_generation = False  # a deliberate rerun: take a new job generation once

    def adopt(self, begun_token: int) -> None:
        """The claim began this run's first attempt (its generation already taken)."""
        self._new_generation = False
        self.token = begun_token

    def take_new_generation(self) -> None:
        """The next attempt begun here takes a new job generation (a deliberate rerun)."""
        self._new_generation = True

    def begin(self) -> tuple[AttemptRecord, JobGenerationRecord]:
        """One durable write begins the attempt (``begin_in``)."""
        record, generation, self.token = self.ledger.atomic(
            lambda ledger: self.begin_in(ledger, self._new_generation)
        )
        self._new_generation = False
        return record, generation

    def begin_in(self, ledger: Ledger, supersede: bool
                 ) -> tuple[AttemptRecord, JobGenerationRecord, int]:
        """Begin the attempt in the caller's transaction: its job generation (every task has
        one, its job id deterministic: the current one until it is confirmed failed, a new one
        once for a deliberate rerun, ``supersede``), a fresh fencing token (above the lease's:
        a timed-out attempt whose thread writes late is refused once its retry has committed)
        and the attempt itself."""
        generation = ledger.generation_for_attempt(self.uow_id, supersede=supersede)
        record, token = ledger.begin_fenced_attempt(
            self.uow_id, holder=self.x.holder, generation=generation.generation,
            job_id=generation.job_id,
        )
        self.check.began(record.number)
        return record, generation, token

    def context(self, record: AttemptRecord, generation: int | None) -> TaskContext:
        number = record.number
        recorder = None
        if self.x.isolation == "thread":
            def recorder(event: NonFatal) -> None:
                self.check.sending_nonfatal(number)
                self.ledger.record_nonfatal(
                    self.uow_id, event.message, count=event.count, attempt=number
                )
        stamp = WriteStamp(
            uow_id=self.uow_id,
            fence_key=self._fence_key,
            generation=generation or 1, attempt=number, token=self.token,
            input_version=self.unit.input_version, began_at=record.started_at.isoformat(),
            ledger=self.ledger.identity, ledger_at=self.ledger.url,
            add_columns=self.x.accept_schema_change,
        )
        expected = None
        if self.task.depends_on:  # what the unit is keyed by, pinned when the body begins
            expected = inputs.expect(self.x.pipeline, self.ledger, self.task.name, self.uow_id,
                                     self.unit.interval)
        return self.x.pipeline.context(
            self.task.name, self.unit.interval, attempt=number, generation=generation or 1,
            upstream=self.upstream, params=self.x.params, recorder=recorder, unit=self.unit,
            stamp=stamp, inputs=expected,
        )

    def _with_snapshot(self, ctx: TaskContext, number: int
                       ) -> tuple[TaskContext, AttemptReport | None]:
        """Attach the unit's input snapshot (taken now if it is the first attempt to need one;
        ``twice.engine.snapshots``). Failing to take it is this attempt's error, classified by
        the task's policy like any other: the source was not read, nothing was written."""
        if self.task.snapshot is None:
            return ctx, None
        try:
            view = snapshots.ensure(self.ledger, self.task, self.x.pipeline.name,
                                    self.unit.interval, root=self.x.snapshot_root)
        except Exception as exc:
            ending = classify(exc, self.task.retry, timeout_is_failure=True)
            return ctx, AttemptReport(ending=ending, error=exc)
        self.ledger.record_observation(
            self.uow_id, "snapshot-read", source=EXECUTOR_SOURCE, attempt=number,
            detail=view.to_detail(),
        )
        return replace(ctx, snapshot=view), None

    def run(self, record: AttemptRecord, taken: JobGenerationRecord,
            timeout: float | None) -> AttemptReport:
        """Run the begun attempt ``record`` (the file's writer held); ``finish`` records how
        it ended."""
        generation, job_id = taken.generation, taken.job_id
        self.started += 1
        if self.task.reconcile is not None:  # its job is observable: key the slots by it
            self.slots.keep_for_job(record.number, "started")
        self.x.emit(AttemptStarted(self.uow_id, self.task.name, self.unit.interval,
                                   record.number, generation, job_id, self.token))
        ctx = self.context(record, generation)
        ctx, failed = self._with_snapshot(ctx, record.number)
        body = None
        if self.task.intermediate is not None:  # reuse the stored slice while it is intact
            from twice.engine.owned_write import intermediate_body

            body = intermediate_body(self.ledger)
        report = failed or call_attempt(
            self.task, ctx, timeout=timeout, isolation=self.x.isolation,
            source_file=self.x.pipeline.source_file, body=body,
        )
        mask_error(report.error)  # before it is recorded, emitted or printed
        self.slots.hold_while_running(report, record.number)
        return report

    def finish(self, record: AttemptRecord, report: AttemptReport) -> Ended:
        """Record how the attempt ended. The validate-output step reads the destination first,
        outside any ledger transaction; then one durable write records the partition's new
        version, the attempt's error, outcome, observation and job generation, and gives the
        lease back when the unit succeeded (nothing more is written for it in this run)."""

        number = record.number
        marked_early = (  # a job whose output twice cannot read: say it ran before checking
            report.ending == "succeeded" and record.generation is not None
            and self.task.acceptance is not None and not self.task.owns_output
        )
        if report.nonfatals or marked_early:  # the output check counts the non-fatal errors
            def before_check(ledger: Ledger) -> None:
                for event in report.nonfatals:
                    self.check.sending_nonfatal(number)
                    ledger.record_nonfatal(self.uow_id, event.message, count=event.count,
                                           attempt=number)
                if marked_early:
                    assert record.generation is not None
                    ledger.mark_generation(self.uow_id, record.generation, "succeeded")

            self.ledger.atomic(before_check)
        if report.remote is not None:
            self._record_remote(report.remote, number)
        detail: dict[str, Any] = {"job_id": record.job_id, "generation": record.generation}
        written = getattr(report.written, "commit", None)
        if written is not None:
            detail["commit"] = written.to_dict()
        use = report.intermediate
        if use is not None:  # what materialize-or-reuse did (the catalog holds the evidence)
            detail["intermediate"] = {"name": use.entry.name, "version": use.entry.version,
                                      "action": use.action, "reason": use.reason,
                                      "refusal": use.refusal}
            self.notes.append(_intermediate_note(use))
        refused = report.error.refused if isinstance(report.error, AcceptanceFailed) else None
        # the job did, whatever its output (twice refused to land it: it ran to the end)
        job_succeeded = report.ending == "succeeded" or refused == "output"
        check = Check()
        if isinstance(report.error, AcceptanceFailed) and refused is not None:
            check = self.check.refused_before_landing(number, report.error, detail)
        elif job_succeeded:
            check = self.check.check_output(
                number, report.value, detail, commit=written, generation=record.generation,
                schema=getattr(report.written, "schema", None))
            if check.rejected is not None:
                report = replace(report, ending="permanent", error=check.rejected)
        if report.ending == "unknown":
            detail["why"] = (
                "the attempt timed out or lost its acknowledgement; remote work may continue "
                "(a timed-out thread is not stopped), so the outcome is unknown, not failed"
            )
        release = (self.scope.lease.keeper if report.ending == "succeeded"
                   and not self.slots.handed_to_job() else None)
        if release is not None:
            release.stop_renewing()

        def finish(ledger: Ledger) -> Ended:
            ended = Ended(report)
            detail.pop("fingerprint", None)
            detail.pop("output_check", None)
            if check.measured is not None:
                try:
                    ended.diff = record_measured(
                        ledger, self.task, self.uow_id, number, check.measured,
                        accept_schema_change=self.x.accept_schema_change,
                    )
                except (SchemaChangeError, LedgerError) as exc:  # not verified
                    mask_error(exc)
                    detail["output_check"] = f"{type(exc).__name__}: {exc}"
                    ended = Ended(replace(report, ending="permanent", error=exc), rejected=exc)
                else:
                    detail["fingerprint"] = ended.diff.to_dict()
            if self.task.acceptance is None:  # the acceptance check read it already
                self.check.count_nonfatal(number)
            final, failed = ended.report, ended.report.error
            outcome = attempt_outcome(final.ending)
            if job_succeeded and record.generation is not None and not marked_early:
                ledger.mark_generation(self.uow_id, record.generation, "succeeded")
            if failed is not None:  # recorded first: it stays evidence whatever follows
                ledger.record_exception(
                    self.uow_id, failed, attempt=number, detail={"job_id": record.job_id},
                    classification=_error_classification(final),
                )
            why = self._finish_attempt(ledger, number, outcome, detail)
            if why is not None:
                return Ended(report, closed_elsewhere=why)
            if (
                isinstance(failed, JobFailed) and record.generation is not None
                and failed.job_id == record.job_id
            ):
                ledger.mark_generation(self.uow_id, record.generation, "confirmed-failed")
            ledger.record_observation(
                self.uow_id, outcome, source=EXECUTOR_SOURCE, attempt=number, detail=detail
            )
            if release is not None and outcome == "succeeded":
                # the lease given back, and what the loop plans on next read in this
                # transaction (nothing follows it), in one round trip
                history = ledger.release_lease_and_read(self.uow_id, self.x.holder)
                ended.released = True
                ended.evidence = self.gathered(history)
            return ended

        try:
            ended = self.ledger.atomic(finish)
        except LedgerError:
            if report.error is not None:  # the attempt's own error stays evidence
                with contextlib.suppress(LedgerError):
                    self.ledger.record_exception(
                        self.uow_id, report.error, attempt=number,
                        detail={"job_id": record.job_id},
                        classification=_error_classification(report))
            raise
        if release is not None:
            if ended.released:
                release.released = True
            else:
                release.resume_renewing()
        if ended.closed_elsewhere is not None:
            return ended
        report = ended.report
        self.check.emit_checked(number, ended.diff, ended.rejected, check.assertions)
        if report.error is not None:
            self.account.error = report.error_text
            if _is_schema_refusal(report.error):
                from twice.destinations.rows import SchemaChangeRefusedError

                self.x.emit(OutputRejected(
                    self.uow_id, self.task.name, self.unit.interval, number,
                    redact(str(report.error)), schema_change=True,
                    advised=isinstance(report.error, SchemaChangeRefusedError)))
        if report.ending == "succeeded":
            self.account.value = report.value
        self._emit_finished(number, attempt_outcome(report.ending), report)
        return ended

    def _finish_attempt(self, ledger: Ledger, number: int, outcome: str,
                        detail: dict[str, Any]) -> str | None:
        """Record how our attempt ended; why not, if another holder has already closed it (it
        took our lease over while we were paused): then this run stops, and says so."""

        try:
            ledger.finish_attempt(self.uow_id, number, outcome)  # type: ignore[arg-type]
        except LedgerError:
            current = ledger.attempt(self.uow_id, number)
            if current is None or current.outcome in UNSETTLED_OUTCOMES:
                raise
            why = (
                f"attempt {number} ended {outcome} here, but another holder had already "
                f"closed it as {current.outcome} after taking the lease over: that holder "
                "settles the unit"
            )
            ledger.record_observation(
                self.uow_id, "closed-elsewhere", source=EXECUTOR_SOURCE, attempt=number,
                detail={**detail, "ended_here": outcome, "recorded": current.outcome,
                        "why": why},
            )
            return why
        return None

    def _emit_finished(self, number: int, outcome: str, report: AttemptReport) -> None:
        self.x.emit(AttemptFinished(self.uow_id, self.task.name, self.unit.interval, number,
                                    outcome, report.error_text))

    def _record_remote(self, status: JobStatus, attempt: int) -> None:
        """A JobStatus the task returned is evidence from the service, with its own time."""

        source = f"remote:{status.service}"
        detail = {"job_id": status.job_id, "state": status.state.value}
        try:
            self.ledger.record_observation(
                self.uow_id, status.remote_state().value, source=source,
                observed_at=status.observed_at, attempt=attempt, detail=detail,
            )
        except LedgerError:  # the service's clock is ahead of ours: keep its time as detail
            self.ledger.record_observation(
                self.uow_id, status.remote_state().value, source=source, attempt=attempt,
                detail={**detail, "remote_observed_at": iso(status.observed_at)},
            )
        for error in status.nonfatal_errors:
            self.check.sending_nonfatal(attempt)
            self.ledger.record_nonfatal(
                self.uow_id, f"{error.reason}: {error.message}", attempt=attempt,
                detail={"source": source, "job_id": status.job_id, "reason": error.reason},
            )
