"""The one vocabulary of how things end, and the only mappings between its parts.

Every layer speaks these words; nothing re-derives them from message text.

- ``AttemptOutcome``: how one attempt ended, as the ledger records it.
- ``Ending``: how the attempt body itself came back, before twice verified its output; turned
  into an ``AttemptOutcome`` by :func:`attempt_outcome`.
- ``UnitOutcome``: how the engine settled one unit of work in one call.
- ``RemoteState``: what reconciliation found out about a remote job.
- ``RunStatus``, ``AirflowVerdict``, ``Settlement``, ``RetryOutcome``: what a driver (a backfill,
  an Airflow try, a worker, the ``twice.retry`` decorator) reports per unit or attempt.

The lab's vocabulary (``twice.core.decision``: ``TaskState``, ``Decision``) is the planner's;
:func:`task_state` and :data:`STOPPING_DECISIONS` are the only bridges to and from it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args

from twice.core.decision import Decision, TaskState

AttemptOutcome = Literal["running", "succeeded", "failed-transient", "failed-permanent", "unknown"]
ATTEMPT_OUTCOMES: tuple[AttemptOutcome, ...] = get_args(AttemptOutcome)
#: Outcomes an attempt can be finished with (``running`` is only ever set when it begins).
FINISH_OUTCOMES: tuple[AttemptOutcome, ...] = ATTEMPT_OUTCOMES[1:]
#: Latest-attempt outcomes that leave a unit unsettled: its effects may exist, and what they
#: are is for settlement to find out (``twice.engine.settlement``).
UNSETTLED_OUTCOMES: tuple[AttemptOutcome, ...] = ("running", "unknown")

ErrorClassification = Literal["transient", "permanent", "unknown"]
ERROR_CLASSIFICATIONS: tuple[ErrorClassification, ...] = get_args(ErrorClassification)

Ending = Literal["succeeded", "transient", "permanent", "unknown"]

UnitOutcome = Literal[
    "succeeded",
    "failed-permanent",
    "attempts-exhausted",
    "deadline-infeasible",
    "unknown-needs-reconcile",
    "reconcile-effects",
    "blocked",
    "leased-elsewhere",
    "held",
]
UNIT_OUTCOMES: tuple[UnitOutcome, ...] = get_args(UnitOutcome)

RunStatus = Literal[
    "succeeded", "failed", "skipped", "blocked", "refused", "leased-elsewhere", "held"
]
#: How the ``twice.retry`` decorator's attempts end (``not-started``: refused by the deadline).
RetryOutcome = Literal[
    "succeeded", "failed-transient", "failed-permanent", "unknown", "not-started"
]
#: What one Airflow try tells Airflow: done, let Airflow's retry run the next attempt, or fail.
AirflowVerdict = Literal["succeeded", "retry", "fail"]
#: How a worker left a unit it looked at.
Settlement = Literal["ran", "done-elsewhere", "ended-elsewhere", "left"]
#: Unit outcomes a driver reports as they are (the unit was not run to an end here).
PASSED_THROUGH: frozenset[UnitOutcome] = frozenset({"leased-elsewhere", "blocked", "held"})


def attempt_outcome(ending: Ending) -> AttemptOutcome:
    """The ledger's outcome for an attempt body that came back with ``ending``."""
    return "succeeded" if ending == "succeeded" else "unknown" if ending == "unknown" else (
        "failed-transient" if ending == "transient" else "failed-permanent"
    )


_TASK_STATE: dict[AttemptOutcome, TaskState] = {
    "running": TaskState.RUNNING,
    "unknown": TaskState.UNKNOWN,
    "succeeded": TaskState.SUCCEEDED,
    "failed-transient": TaskState.RETRYABLE,
    "failed-permanent": TaskState.TERMINAL,
}


def task_state(outcome: AttemptOutcome) -> TaskState:
    """The lab's task state for the ledger's latest attempt outcome."""
    return _TASK_STATE[outcome]


#: The planner's decisions that stop a unit, and the unit outcome each one settles it with.
STOPPING_DECISIONS: dict[Decision, UnitOutcome] = {
    Decision.REPAIR_CAUSE: "failed-permanent",
    Decision.ATTEMPTS_EXHAUSTED: "attempts-exhausted",
    Decision.RECONCILE_EFFECTS: "reconcile-effects",
    Decision.DEADLINE_INFEASIBLE: "deadline-infeasible",
}


class RemoteState(StrEnum):
    """What a reconciler found out about a remote job after a timeout or a lost acknowledgement.

    The executor uses it to decide whether a retry may resubmit: only ``NOT_FOUND`` (same job id,
    same generation) and ``FAILED`` (new generation) allow it; ``RUNNING`` means observe, and
    ``UNKNOWN`` means no evidence either way, so look again before doing anything.
    """

    SUCCEEDED = "succeeded"  # finished and reported success: do not resubmit
    FAILED = "failed"  # finished with an error: a new generation may be taken
    RUNNING = "running"  # still running: observe it, do not resubmit
    UNKNOWN = "unknown"  # the service could not say: refresh the observation later
    NOT_FOUND = "not-found"  # no job with this id: the request never arrived

    @property
    def is_final(self) -> bool:
        """Whether the remote job has ended (it will not change state by itself any more)."""
        return self in (RemoteState.SUCCEEDED, RemoteState.FAILED)

    @classmethod
    def parse(cls, value: object) -> RemoteState:
        """Accept a RemoteState or its text (case and ``_``/``-`` insensitive)."""
        if isinstance(value, RemoteState):
            return value
        if isinstance(value, str):
            text = value.strip().lower().replace("_", "-")
            for state in cls:
                if state.value == text:
                    return state
        choices = ", ".join(s.value for s in cls)
        raise ValueError(f"remote state must be one of {choices}, got {value!r}")
