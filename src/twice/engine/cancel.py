"""Cancelling a remote job: a request, never an outcome (the source documents' rule).

``twice cancel`` asks the task's ``cancel(job_id, ctx)`` to cancel the job of a unit's latest
attempt. A cancel request returns at once and does not mean cancelled: the job may still
finish, what it has already cost stays billed, and what it has already published is not
undone. So twice records the request (an observation ``cancel-requested`` from
``operator:NAME``, with the note and the service's answer) and changes no outcome: the attempt
stays unknown or running until a run reconciles the job by its id. A job the cancel stopped
ends failed (BigQuery: DONE with ``errorResult`` reason ``stopped``), so its generation is
confirmed failed and the next run starts a new one; a job that finished anyway is adopted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from twice.core.outcomes import UNSETTLED_OUTCOMES
from twice.errors import InputError

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline
    from twice.ledger import Ledger

CANCEL_REQUESTED = "cancel-requested"

#: What every cancel request says, whatever the service answered.
WHAT_A_CANCEL_IS = (
    "a cancel is a request: the job may still finish; what it has cost stays billed; results "
    "it already published are not undone"
)


@dataclass(frozen=True)
class CancelRequest:
    """A cancel request as recorded: the attempt and job it was for, what the service said."""

    uow_id: str
    attempt: int
    job_id: str
    attempt_outcome: str  # unchanged by the request
    answer: str | None  # the service's reply, as text (None: it returned nothing)
    operator: str
    note: str
    requested_at: datetime
    seq: int


def request_cancel(pipeline: Pipeline, ledger: Ledger, uow_id: str, *, operator: str,
                   note: str) -> CancelRequest:
    """Ask the task's ``cancel=`` to cancel the job of ``uow_id``'s latest attempt, and record
    the request (see the module docstring). ``InputError`` naming the field when there is
    nothing to cancel or no way to ask."""
    unit = ledger.unit(uow_id)
    if unit is None:
        raise InputError(f"UOW_ID: no unit of work {uow_id!r} in the ledger")
    if unit.pipeline != pipeline.name or unit.task not in pipeline:
        raise InputError(f"PIPELINE_FILE: unit {uow_id} is of {unit.pipeline}.{unit.task}, "
                         f"not a task of pipeline {pipeline.name!r}")
    task = pipeline.get_task(unit.task)
    latest = ledger.latest_attempt(uow_id)
    if latest is None or latest.job_id is None:
        raise InputError(f"UOW_ID: unit {uow_id} has no attempt with a job to cancel")
    if latest.outcome not in UNSETTLED_OUTCOMES:
        raise InputError(f"UOW_ID: attempt {latest.number} of {uow_id} already ended "
                         f"{latest.outcome}: there is no job in flight to cancel")
    if task.cancel is None:
        raise InputError(
            f"PIPELINE_FILE: task {task.name!r} declares no cancel=; cancel job {latest.job_id} "
            "with the service's own tool (its id is the one twice submitted under)")
    ctx = pipeline.context(task.name, unit.interval, attempt=latest.number,
                           generation=latest.generation or 1, unit=unit.to_unit_of_work())
    answer = task.cancel(latest.job_id, ctx)
    said = None if answer is None else _said(answer)
    from twice.ledger import operator_source

    observation = ledger.record_observation(
        uow_id, CANCEL_REQUESTED, source=operator_source(operator), attempt=latest.number,
        detail={"job_id": latest.job_id, "note": note, "answer": said,
                "attempt_outcome": latest.outcome, "meaning": WHAT_A_CANCEL_IS},
    )
    return CancelRequest(uow_id, latest.number, latest.job_id, latest.outcome, said, operator,
                         note, observation.observed_at, observation.seq)


def _said(answer: Any) -> str:
    """The service's reply as text: a ``JobStatus``'s state (and error reason), else str()."""
    state = getattr(answer, "state", None)
    if state is not None:
        error = getattr(answer, "error_result", None)
        reason = getattr(error, "reason", None)
        return f"{getattr(state, 'value', state)}" + (f" ({reason})" if reason else "")
    return str(answer)
