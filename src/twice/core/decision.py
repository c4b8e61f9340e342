"""The retry-window decision engine: what to do next for each task, from recorded evidence.

Pure: no clock, no I/O. Every input time is explicit (``as_of`` is the planner's "now"), so the
same evidence always gives the same decisions, whatever the order of the tasks. Times are plain
numbers on one clock (the lab's integer teaching seconds, or integer microseconds in the extended
mode); the arithmetic is exact for integers.

Precedence (the lab's, and the specification): stale evidence is refreshed before anything else;
then running, unknown, succeeded and terminal states each have their own action; only a retryable
state can lead to another attempt, and only if the budget, the caller's safeRepeat assertion, the
backoff and the deadline (execution *and* validation included) all allow it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from twice.core.policy import RetryPolicy
from twice.errors import InputError

Time = int | float


class Decision(StrEnum):
    """One action per task, in order of precedence."""

    REFRESH_OBSERVATION = "refresh-observation"
    OBSERVE_RUNNING = "observe-running"
    RECONCILE_REMOTE = "reconcile-remote"
    VALIDATE_OUTPUT = "validate-output"
    REPAIR_CAUSE = "repair-cause"
    ATTEMPTS_EXHAUSTED = "attempts-exhausted"
    RECONCILE_EFFECTS = "reconcile-effects"
    DEADLINE_INFEASIBLE = "deadline-infeasible"
    WAIT_BACKOFF = "wait-backoff"
    RETRY_ELIGIBLE = "retry-eligible"


class TaskState(StrEnum):
    """The last known state of a task's latest attempt."""

    RUNNING = "running"
    UNKNOWN = "unknown"  # timeout or lost acknowledgement: the remote outcome is not known
    SUCCEEDED = "succeeded"  # finished without error; output not yet validated
    RETRYABLE = "retryable"  # failed with an error the policy lists as transient
    TERMINAL = "terminal"  # failed permanently: retrying cannot help


class TaskEvidence(NamedTuple):
    """What is known about one task, and when it was known.

    ``safe_repeat`` is the caller's assertion that repeating the task has no extra effect; the
    engine does not prove it. ``last_finished_at`` is None while completion is unconfirmed
    (running or unknown). A NamedTuple: immutable and cheap to build by the 100,000.
    """

    id: str
    state: TaskState
    safe_repeat: bool
    attempts: int
    observed_at: Time
    last_finished_at: Time | None
    duration: Time
    validation: Time


@dataclass(frozen=True, slots=True)
class DecisionWindow:
    """The planner's frame: its now, the delivery deadline, how old evidence may be, the policy."""

    as_of: Time
    deadline: Time
    max_observation_age: Time
    policy: RetryPolicy


class DecisionResult(NamedTuple):
    """One decision with the numbers behind it; the timing fields are set for retryable tasks."""

    id: str
    decision: Decision
    reason: str
    backoff: Time | None = None
    earliest_start: Time | None = None
    estimated_finish: Time | None = None


@dataclass(frozen=True, slots=True)
class DecisionReport:
    """Decisions sorted by task id, plus flags that refuse to overclaim.

    The engine only calculates: it never executes jobs, proves idempotency, guarantees completion
    or approves production, and says so.
    """

    tasks: tuple[DecisionResult, ...]
    deadline_passed: bool
    jobs_executed: bool = False
    idempotency_proven: bool = False
    completion_guaranteed: bool = False
    production_approval: bool = False


def _plain(value: Time) -> str:
    return str(value)


def decide_task(
    task: TaskEvidence,
    window: DecisionWindow,
    *,
    when: Callable[[Time], str] = _plain,
    span: Callable[[Time], str] = _plain,
) -> DecisionResult:
    """Decide one task. ``when``/``span`` format instants/durations for the reason text only."""
    as_of = window.as_of
    age = as_of - task.observed_at
    if age > window.max_observation_age:
        return DecisionResult(
            task.id,
            Decision.REFRESH_OBSERVATION,
            f"evidence observed at {when(task.observed_at)} is {span(age)} old, over the "
            f"{span(window.max_observation_age)} limit: refresh it before acting",
        )
    state = task.state
    if state is TaskState.RUNNING:
        return DecisionResult(
            task.id, Decision.OBSERVE_RUNNING, "still running: observe it, do not start another"
        )
    if state is TaskState.UNKNOWN:
        return DecisionResult(
            task.id,
            Decision.RECONCILE_REMOTE,
            "outcome unknown (timeout or lost acknowledgement): inspect the remote job by its id "
            "before any retry, even if safeRepeat is asserted",
        )
    if state is TaskState.SUCCEEDED:
        return DecisionResult(
            task.id,
            Decision.VALIDATE_OUTPUT,
            "finished without error, which is not yet success: validate the output",
        )
    if state is TaskState.TERMINAL:
        return DecisionResult(
            task.id,
            Decision.REPAIR_CAUSE,
            "failed permanently: repair the cause, a retry would fail the same way",
        )
    policy = window.policy
    if task.attempts >= policy.max_attempts:
        return DecisionResult(
            task.id,
            Decision.ATTEMPTS_EXHAUSTED,
            f"{task.attempts} of {policy.max_attempts} attempts used (the first try counts)",
        )
    if not task.safe_repeat:
        return DecisionResult(
            task.id,
            Decision.RECONCILE_EFFECTS,
            "repeat not asserted safe: reconcile the effects of earlier attempts first",
        )
    if task.last_finished_at is None:
        raise ValueError(f"task {task.id}: a retryable task needs last_finished_at")
    delay = policy.backoff_after(task.attempts)
    start = max(as_of, task.last_finished_at + delay)
    finish = start + task.duration + task.validation
    timing = (
        f"attempt {task.attempts + 1} could start at {when(start)} (backoff {span(delay)}) and "
        f"finish, validation included, at {when(finish)}"
    )
    if finish > window.deadline:
        decision = Decision.DEADLINE_INFEASIBLE
        reason = f"{timing}, after the deadline {when(window.deadline)}: do not start it"
    elif start > as_of:
        decision = Decision.WAIT_BACKOFF
        reason = f"{timing}: wait for the backoff to end"
    else:
        decision = Decision.RETRY_ELIGIBLE
        reason = f"{timing}, within the deadline {when(window.deadline)}"
    return DecisionResult(task.id, decision, reason, delay, start, finish)


class EvidenceError(InputError):
    """Evidence handed to ``decide`` breaks a rule the lab's boundary enforces; the message
    names the field (``tasks[2].observedAt``), as the lab's JSON boundary does."""


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_evidence(window: DecisionWindow, tasks: Sequence[TaskEvidence]) -> None:
    """The lab boundary's rules, for callers of the Python API: raise ``EvidenceError``.

    A future observation is invalid input, not fresher evidence; ``last_finished_at`` is None
    exactly while completion is unconfirmed (running, unknown) and never after the observation;
    attempts count from 1; durations are positive; ids are unique.
    """
    for name in ("as_of", "deadline", "max_observation_age"):
        if not _number(getattr(window, name)):
            raise EvidenceError(f"window.{name} must be a finite number, got "
                                f"{getattr(window, name)!r}")
    if window.max_observation_age < 0:
        raise EvidenceError("window.max_observation_age must be >= 0")
    seen: dict[str, int] = {}
    for index, task in enumerate(tasks):
        where = f"tasks[{index}]"
        if not isinstance(task, TaskEvidence):
            raise EvidenceError(f"{where} must be a TaskEvidence, got {type(task).__name__}")
        if not isinstance(task.id, str) or not task.id:
            raise EvidenceError(f"{where}.id must be a non-empty string")
        if task.id in seen:
            raise EvidenceError(f"{where}.id {task.id!r} duplicates tasks[{seen[task.id]}].id")
        seen[task.id] = index
        if not isinstance(task.state, TaskState):
            raise EvidenceError(f"{where}.state must be a TaskState, got {task.state!r}")
        if not isinstance(task.safe_repeat, bool):
            raise EvidenceError(f"{where}.safeRepeat must be True or False")
        if isinstance(task.attempts, bool) or not isinstance(task.attempts, int) or (
            task.attempts < 1
        ):
            raise EvidenceError(f"{where}.attempts must be an integer >= 1 (it counts the first "
                                f"try), got {task.attempts!r}")
        for name, label in (("observed_at", "observedAt"), ("duration", "duration"),
                            ("validation", "validation")):
            if not _number(getattr(task, name)):
                raise EvidenceError(f"{where}.{label} must be a finite number")
        if task.observed_at > window.as_of:
            raise EvidenceError(
                f"{where}.observedAt ({task.observed_at}) is after asOf ({window.as_of}): a "
                "future observation is invalid input, not fresher evidence"
            )
        if task.duration <= 0 or task.validation < 0:
            raise EvidenceError(f"{where}: duration must be > 0 and validation >= 0")
        ended = task.last_finished_at
        if task.state in (TaskState.RUNNING, TaskState.UNKNOWN):
            if ended is not None:
                raise EvidenceError(f"{where}.lastFinishedAt must be None while state is "
                                    f"{task.state.value} (completion is unconfirmed)")
        elif ended is None or not _number(ended):
            raise EvidenceError(f"{where}.lastFinishedAt must be a finite number when state is "
                                f"{task.state.value}")
        elif ended > task.observed_at:
            raise EvidenceError(
                f"{where}.lastFinishedAt ({ended}) is after observedAt ({task.observed_at})"
            )


def decide(
    window: DecisionWindow,
    tasks: Iterable[TaskEvidence],
    *,
    when: Callable[[Time], str] = _plain,
    span: Callable[[Time], str] = _plain,
) -> DecisionReport:
    """Decide every task independently; the result does not depend on the input order.

    The evidence is checked first with the lab boundary's rules (``check_evidence``)."""
    tasks = list(tasks)
    check_evidence(window, tasks)
    results = [decide_task(task, window, when=when, span=span) for task in tasks]
    results.sort(key=lambda result: result.id)
    return DecisionReport(tuple(results), deadline_passed=window.as_of > window.deadline)
