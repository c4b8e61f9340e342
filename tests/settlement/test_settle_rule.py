"""The settlement rule (``twice.engine.settle.settle``) over every combination of evidence,
checked against the precedence docs/architecture.md states, not against a copy of the code."""

from __future__ import annotations

import itertools

import pytest

from twice.core.outcomes import RemoteState
from twice.engine.settle import Commit, Known, Proof, Verdict, settle

CASES = list(itertools.product(list(Commit), [False, True], [False, True], list(RemoteState),
                               [None, "its thread still runs"]))


@pytest.mark.parametrize(("commit", "can_reconcile", "same_job_id", "remote", "acting"), CASES)
def test_precedence(commit: Commit, can_reconcile: bool, same_job_id: bool,
                    remote: RemoteState, acting: str | None) -> None:
    asked: list[int] = []

    def ask() -> RemoteState:
        asked.append(1)
        return remote

    known = Known(commit=commit, can_reconcile=can_reconcile, same_job_id=same_job_id)
    result = settle(known, ask_remote=ask, still_acting=lambda: acting)
    verdict = result.verdict

    assert len(asked) <= 1
    # 1. the commit record outranks everything: the service is not even asked
    if commit in (Commit.PRESENT, Commit.UNREADABLE, Commit.MAY_COMMIT):
        assert not asked
        assert result.proof is Proof.COMMIT_RECORD
        assert verdict is (Verdict.WRITTEN if commit is Commit.PRESENT
                           else Verdict.LEAVE_UNKNOWN)
        return
    # 2. only a commit record proves a write: nothing else ever yields "written", and with an
    #    owned destination no remote answer counts as success
    assert verdict is not Verdict.WRITTEN
    if commit is Commit.ABSENT:
        assert verdict is not Verdict.REMOTE_SUCCEEDED
    # 3. the service is asked whenever it can be, and its answer decides
    assert bool(asked) == can_reconcile
    if can_reconcile:
        assert result.proof is Proof.REMOTE_JOB and result.remote is remote
        expected = {
            RemoteState.SUCCEEDED: (Verdict.RETRY_SAME_JOB_ID if commit is Commit.ABSENT
                                    else Verdict.REMOTE_SUCCEEDED),
            RemoteState.FAILED: Verdict.RETRY_NEW_GENERATION,
            RemoteState.NOT_FOUND: (Verdict.LEAVE_UNKNOWN if acting and not same_job_id
                                    else Verdict.RETRY_SAME_JOB_ID),
            RemoteState.RUNNING: Verdict.LEAVE_UNKNOWN,
            RemoteState.UNKNOWN: Verdict.LEAVE_UNKNOWN,
        }[remote]
        assert verdict is expected
        return
    # 4. without a service: an absent record, or a receiver that dedups by job id, retries
    #    under the same job id; anything else needs an operator
    if commit is Commit.ABSENT:
        assert (verdict, result.proof) == (Verdict.RETRY_SAME_JOB_ID, Proof.COMMIT_RECORD)
    elif same_job_id:
        assert (verdict, result.proof) == (Verdict.RETRY_SAME_JOB_ID, Proof.SAME_JOB_ID)
    else:
        assert (verdict, result.proof) == (Verdict.ASK_OPERATOR, Proof.NONE)
