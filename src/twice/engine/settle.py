"""The settlement rule: what proves what about an attempt whose outcome is unknown, and in
which order (docs/architecture.md, "Settlement"). Written once, here; the executor gathers the
evidence and carries out the verdict, every driver (run, worker, backfill, Airflow, dbt) goes
through it.

Evidence, strongest first; a weaker source never overrules a stronger one:

====================================  =======================================================
what happened                         the only proof, and what an unknown outcome becomes
====================================  =======================================================
an owned write landed                 its commit record in the destination. Present: written
                                      (verified from the record). Absent, and the slice sealed
                                      or the writer gone: not written, so the write is done
                                      again; a writer that may still commit leaves it unknown.
a remote job ran (``reconcile=``)     the service's answer for the attempt's own job id:
                                      succeeded = adopt the job (never resubmitted; an owned
                                      write still needs its record, so the retry under the same
                                      job id writes it); failed = a new generation; not found =
                                      the same job id again; running = observe.
an effect whose receiver              the receiver's acceptance of the id: the effect is sent
deduplicates by job id                again under the same job id, no operator
(``safe_repeat="same-job-id"``)
an effect twice cannot see            an operator (``twice resolve``): asserted, never verified
====================================  =======================================================

Acceptance is not settlement: it decides, before anything lands, whether an output may land
at all (``twice.engine.owned_write``). A reconciler's "succeeded" is never evidence about an
owned write: only the commit record is.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from twice.core.outcomes import RemoteState


class Commit(enum.Enum):
    """What the destination says of the attempt's owned write."""

    NOT_OWNED = "not-owned"  # the task has no owned destination: no record to read
    PRESENT = "present"  # its commit record (or the unit's marker) is there
    ABSENT = "absent"  # no record, and the attempt can no longer commit (sealed or gone)
    MAY_COMMIT = "may-commit"  # no record yet, and its writer may still commit
    UNREADABLE = "unreadable"  # the destination cannot be read now: no evidence either way


class Verdict(enum.Enum):
    """What becomes of the unknown attempt."""

    WRITTEN = "written"  # the owned write committed: succeeded, verified from its record
    REMOTE_SUCCEEDED = "remote-succeeded"  # no owned write; the remote job succeeded
    RETRY_SAME_JOB_ID = "retry-same-job-id"  # not done (or deduplicated): retry, same job id
    RETRY_NEW_GENERATION = "retry-new-generation"  # the remote job failed: a new job id
    LEAVE_UNKNOWN = "leave-unknown"  # may still act, or no evidence: observe again later
    ASK_OPERATOR = "ask-operator"  # twice cannot see the effect: `twice resolve`


class Proof(enum.Enum):
    """The evidence a verdict rests on (recorded with it)."""

    COMMIT_RECORD = "commit record"
    REMOTE_JOB = "reconcile"
    SAME_JOB_ID = "receiver deduplicates by job id"
    NONE = "no evidence"


@dataclass(frozen=True)
class Known:
    """What is known before anything is asked: the task's declarations and the destination."""

    commit: Commit
    can_reconcile: bool  # a reconcile= function and the attempt's job id
    same_job_id: bool  # safe_repeat="same-job-id"


@dataclass(frozen=True)
class Settlement:
    verdict: Verdict
    proof: Proof
    remote: RemoteState | None = None  # the reconciler's answer, when it was asked
    acting: str | None = None  # why the attempt may still act, when that decided


def settle(known: Known, *, ask_remote: Callable[[], RemoteState],
           still_acting: Callable[[], str | None]) -> Settlement:
    """The verdict on an unknown attempt (see the module docstring for the table).

    ``ask_remote`` asks the task's reconciler about the attempt's own job id (called at most
    once, and only when its answer can decide); ``still_acting`` says why the attempt may
    still make its request (its thread or process still runs), or None."""
    if known.commit is Commit.PRESENT:
        return Settlement(Verdict.WRITTEN, Proof.COMMIT_RECORD)
    if known.commit in (Commit.UNREADABLE, Commit.MAY_COMMIT):
        return Settlement(Verdict.LEAVE_UNKNOWN, Proof.COMMIT_RECORD)
    owned = known.commit is Commit.ABSENT
    if known.can_reconcile:
        state = ask_remote()
        if state is RemoteState.SUCCEEDED:
            # the job is adopted; an owned write it fed still has to be made by twice
            verdict = Verdict.RETRY_SAME_JOB_ID if owned else Verdict.REMOTE_SUCCEEDED
            return Settlement(verdict, Proof.REMOTE_JOB, state)
        if state is RemoteState.FAILED:
            return Settlement(Verdict.RETRY_NEW_GENERATION, Proof.REMOTE_JOB, state)
        if state is RemoteState.NOT_FOUND:
            acting = None if known.same_job_id else still_acting()
            if acting is not None:  # "not yet", not "never": the request may still be sent
                return Settlement(Verdict.LEAVE_UNKNOWN, Proof.REMOTE_JOB, state, acting)
            return Settlement(Verdict.RETRY_SAME_JOB_ID, Proof.REMOTE_JOB, state)
        return Settlement(Verdict.LEAVE_UNKNOWN, Proof.REMOTE_JOB, state)
    if owned:
        return Settlement(Verdict.RETRY_SAME_JOB_ID, Proof.COMMIT_RECORD)
    if known.same_job_id:
        return Settlement(Verdict.RETRY_SAME_JOB_ID, Proof.SAME_JOB_ID)
    return Settlement(Verdict.ASK_OPERATOR, Proof.NONE)
