"""Find out what became of an attempt whose outcome is unknown, by asking about its job id.

The task's ``reconcile(job_id, ctx)`` is asked about the SAME job id the attempt used, never a
new one. Its answer decides what may follow (the executor acts on it):

- ``succeeded``: the unit succeeded; nothing is resubmitted.
- ``running`` / ``unknown``: look again every ``poll_interval`` seconds, up to ``max_polls``
  times or the workflow deadline; still not final means "observe it", not "retry".
- ``failed``: the generation is confirmed failed; only now may a new job id be taken.
- ``not-found``: the request never arrived; the same job id may be submitted again.

Every answer that changes (and the last one) is recorded as an observation with source
``reconcile``; an exception from the reconciler is recorded as an error and counts as "no
evidence" (``unknown``) for that poll.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twice.core.outcomes import ErrorClassification, RemoteState
from twice.define.pipeline import Task, TaskContext
from twice.engine.evidence import RECONCILE_SOURCE

if TYPE_CHECKING:
    from twice.engine.timeouts import Deadline
    from twice.ledger import Ledger


# Answers that allow a decision; running/unknown mean "look again".
FINAL_STATES = frozenset({RemoteState.SUCCEEDED, RemoteState.FAILED, RemoteState.NOT_FOUND})


@dataclass(frozen=True)
class ReconcileReport:
    """The last answer, how many times the reconciler was asked, and its last error."""

    state: RemoteState
    polls: int
    error: str | None = None

    @property
    def final(self) -> bool:
        """Whether the answer allows a decision (anything but running/unknown)."""
        return self.state in FINAL_STATES


def reconcile_attempt(
    task: Task,
    job_id: str,
    ctx: TaskContext,
    *,
    ledger: Ledger,
    attempt: int,
    poll_interval: float,
    max_polls: int,
    sleep: Callable[[float], None],
    deadline: Deadline | None = None,
) -> ReconcileReport:
    """Ask ``task.reconcile`` about ``job_id`` until the answer is final (see module docstring)."""
    uow_id = ctx.unit.uow_id
    last: RemoteState | None = None
    error_text: str | None = None
    polls = 0
    for poll in range(1, max(1, max_polls) + 1):
        polls = poll
        try:
            state = task.remote_state(job_id, ctx)
        except Exception as exc:
            state = RemoteState.UNKNOWN
            error_text = f"{type(exc).__name__}: {exc}"
            classification: ErrorClassification = (
                "transient" if task.retry.is_transient(exc) else "unknown"
            )
            ledger.record_exception(
                uow_id, exc, classification=classification, attempt=attempt,
                detail={"during": "reconcile", "job_id": job_id, "poll": poll},
            )
        out_of_time = deadline is not None and deadline.expired()
        stop = state in FINAL_STATES
        last_poll = stop or poll >= max_polls or out_of_time
        if state != last or last_poll:
            ledger.record_observation(
                uow_id, state.value, source=RECONCILE_SOURCE, attempt=attempt,
                detail={"job_id": job_id, "poll": poll},
            )
        last = state
        if last_poll:
            break
        sleep(poll_interval)
    assert last is not None
    return ReconcileReport(last, polls, error_text)
