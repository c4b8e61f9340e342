"""The lab's retry fixture: its strict JSON format, read from stdin and answered on stdout.

This boundary is lab-compatible byte for byte: the same inputs are accepted, the same JSON is
printed (``sort_keys=True``), and every invalid input exits 2 with a first stderr line starting
``Invalid retry fixture``. Unlike the lab, the line goes on to say what is wrong and where, e.g.
``Invalid retry fixture: tasks[2].observedAt (101) is after asOf (100)``.

The rules are the lab's: exact field sets, integers that are not booleans, bounded ranges,
1..20 tasks with unique ids, no observation after ``asOf``, no completion after the observation,
and ``lastFinishedAt`` null exactly while completion is unconfirmed (running or unknown).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, TextIO

from twice.core.decision import DecisionReport, DecisionWindow, TaskEvidence, TaskState, decide
from twice.core.policy import RetryPolicy
from twice.errors import InputError

INPUT_LIMIT = 1_000_000
MAX_TIME = 1_000_000_000
MAX_SPAN = 1_000_000
MAX_TASKS = 20
TOP_FIELDS = ("asOf", "deadline", "maxObservationAge", "policy", "tasks")
POLICY_FIELDS = ("maxAttempts", "initialDelay", "maxDelay", "multiplier")
TASK_FIELDS = (
    "id", "state", "safeRepeat", "attempts", "observedAt", "lastFinishedAt", "duration",
    "validation",
)
TASK_ID = re.compile(r"[A-Za-z0-9_-]{1,48}")
STATES = tuple(state.value for state in TaskState)
UNCONFIRMED = (TaskState.RUNNING.value, TaskState.UNKNOWN.value)

# Recursion headroom the lab program has where it calls json.loads (from main, called at module
# level), as counted by ``_headroom`` under the default limit. Parsing here is given the same
# headroom, so exactly the same nesting depth is "too deep" in both, however deep our own stack.
_REFERENCE_HEADROOM = 997

class FixtureError(InputError):
    """Invalid fixture; the message says what is wrong and where."""


#: What reading, parsing or deciding a fixture raises when the fixture is invalid.
INVALID_FIXTURE = (ValueError, TypeError, RecursionError)


def refuse_fixture(error: Exception, stderr: TextIO) -> int:
    """Say why a fixture is invalid, as the lab does; returns its exit code, 2."""
    detail = str(error) if isinstance(error, FixtureError) else f"{type(error).__name__}: {error}"
    print(f"Invalid retry fixture: {detail}", file=stderr)
    return 2


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number with a fraction"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def require_fields(value: object, fields: tuple[str, ...], where: str) -> dict[str, Any]:
    """An object with exactly ``fields``: none missing, none extra."""
    if type(value) is not dict:
        raise FixtureError(f"{where} must be an object, got {json_type(value)}")
    missing = [name for name in fields if name not in value]
    extra = sorted(name for name in value if name not in fields)
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if extra:
            parts.append("unexpected " + ", ".join(extra))
        return _fail(f"{where} fields: {'; '.join(parts)}")
    return value


def _fail(message: str) -> Any:
    raise FixtureError(message)


def require_integer(value: object, low: int, high: int, where: str, bounds: str = "") -> int:
    """An integer (never a boolean or a float) in ``[low, high]``."""
    if type(value) is not int:
        raise FixtureError(f"{where} must be an integer, got {json_type(value)}")
    if not low <= value <= high:
        raise FixtureError(f"{where} ({value}) must be between {bounds or f'{low} and {high}'}")
    return value


def parse_fixture(payload: object) -> tuple[DecisionWindow, list[TaskEvidence]]:
    """Validate a parsed fixture exactly as the lab does and build the typed model."""
    top = require_fields(payload, TOP_FIELDS, "fixture")
    as_of, deadline, max_age = (
        require_integer(top[name], 0, MAX_TIME, name) for name in TOP_FIELDS[:3]
    )
    raw_policy = require_fields(top["policy"], POLICY_FIELDS, "policy")
    max_attempts = require_integer(raw_policy["maxAttempts"], 1, 10, "policy.maxAttempts")
    initial = require_integer(raw_policy["initialDelay"], 1, MAX_SPAN, "policy.initialDelay")
    max_delay = require_integer(
        raw_policy["maxDelay"], initial, MAX_SPAN, "policy.maxDelay",
        f"policy.initialDelay ({initial}) and {MAX_SPAN}",
    )
    multiplier = require_integer(raw_policy["multiplier"], 1, 5, "policy.multiplier")
    policy = RetryPolicy(
        max_attempts=max_attempts, initial_delay=initial, multiplier=multiplier,
        max_delay=max_delay, jitter="none",
    )
    raw_tasks = top["tasks"]
    if type(raw_tasks) is not list:
        raise FixtureError(f"tasks must be an array, got {json_type(raw_tasks)}")
    if not 1 <= len(raw_tasks) <= MAX_TASKS:
        raise FixtureError(f"tasks must hold 1..{MAX_TASKS} tasks, got {len(raw_tasks)}")
    seen: dict[str, int] = {}
    tasks = [parse_task(raw, index, as_of, seen) for index, raw in enumerate(raw_tasks)]
    return DecisionWindow(as_of, deadline, max_age, policy), tasks


def require_identity(task: dict[str, Any], index: int, pattern: re.Pattern[str], rule: str,
                     seen: dict[str, int]) -> tuple[str, str]:
    """A task's id (matching ``pattern``, unique so far) and its state (one of the five)."""
    where = f"tasks[{index}]"
    identifier = task["id"]
    if type(identifier) is not str:
        raise FixtureError(f"{where}.id must be a string, got {json_type(identifier)}")
    if pattern.fullmatch(identifier) is None:
        raise FixtureError(f"{where}.id {identifier!r} must be {rule}")
    if identifier in seen:
        raise FixtureError(f"{where}.id {identifier!r} duplicates tasks[{seen[identifier]}].id")
    seen[identifier] = index
    state = task["state"]
    if type(state) is not str or state not in STATES:
        shown = repr(state) if type(state) is str else json_type(state)
        raise FixtureError(f"{where}.state {shown} must be one of {', '.join(STATES)}")
    return identifier, state


def parse_task(raw: object, index: int, as_of: int, seen: dict[str, int]) -> TaskEvidence:
    """Validate ``tasks[index]``; ``seen`` maps ids already read to their index."""
    where = f"tasks[{index}]"
    task = require_fields(raw, TASK_FIELDS, where)
    identifier, state = require_identity(task, index, TASK_ID, "1-48 of A-Z a-z 0-9 _ -", seen)
    if type(task["safeRepeat"]) is not bool:
        raise FixtureError(
            f"{where}.safeRepeat must be a boolean, got {json_type(task['safeRepeat'])}"
        )
    attempts = require_integer(task["attempts"], 1, 10, f"{where}.attempts")
    observed = task["observedAt"]
    if type(observed) is int and observed > as_of:
        raise FixtureError(
            f"{where}.observedAt ({observed}) is after asOf ({as_of}): a future observation is "
            "invalid input, not fresher evidence"
        )
    observed = require_integer(observed, 0, as_of, f"{where}.observedAt", f"0 and asOf ({as_of})")
    duration = require_integer(task["duration"], 1, MAX_SPAN, f"{where}.duration")
    validation = require_integer(task["validation"], 0, MAX_SPAN, f"{where}.validation")
    ended = task["lastFinishedAt"]
    if state in UNCONFIRMED:
        if ended is not None:
            raise FixtureError(
                f"{where}.lastFinishedAt must be null while state is {state} "
                "(completion is unconfirmed)"
            )
    else:
        if type(ended) is int and ended > observed:
            raise FixtureError(
                f"{where}.lastFinishedAt ({ended}) is after observedAt ({observed})"
            )
        require_integer(
            ended, 0, observed, f"{where}.lastFinishedAt", f"0 and observedAt ({observed})"
        )
    return TaskEvidence(
        identifier, TaskState(state), task["safeRepeat"], attempts, observed, ended,
        duration, validation,
    )


def render(report: DecisionReport) -> dict[str, Any]:
    """The lab's output object (keys in the lab's names; serialised with sort_keys)."""
    return {
        "tasks": [
            {
                "id": result.id,
                "decision": result.decision.value,
                "backoff": result.backoff,
                "earliestStart": result.earliest_start,
                "estimatedFinish": result.estimated_finish,
            }
            for result in report.tasks
        ],
        **render_flags(report),
    }


def render_flags(report: DecisionReport) -> dict[str, bool]:
    """The report's flags that refuse to overclaim, in the lab's names: every output has them."""
    return {
        "deadlinePassed": report.deadline_passed,
        "jobsExecuted": report.jobs_executed,
        "idempotencyProven": report.idempotency_proven,
        "completionGuaranteed": report.completion_guaranteed,
        "productionApproval": report.production_approval,
    }


def _headroom() -> int:
    """How many more nested Python calls fit under the recursion limit from the caller."""
    depth = 0

    def dive() -> None:
        nonlocal depth
        depth += 1
        dive()

    try:
        dive()
    except RecursionError:
        pass
    return depth


def loads(raw: str) -> object:
    """``json.loads`` with the lab program's recursion headroom, whatever our own stack depth."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit + _REFERENCE_HEADROOM - _headroom(), 50))
    try:
        return json.loads(raw)
    finally:
        sys.setrecursionlimit(limit)


def read_input(stream: TextIO) -> str:
    """Read at most the limit (+1 to detect excess), as the lab does, in text mode."""
    try:
        raw = stream.read(INPUT_LIMIT + 1)
    except UnicodeDecodeError as exc:
        raise FixtureError(f"input is not valid text: {exc.reason} at byte {exc.start}") from None
    if len(raw) > INPUT_LIMIT:
        raise FixtureError(f"input is larger than {INPUT_LIMIT} characters")
    return raw


def parse_json(raw: str) -> object:
    """Parse the fixture's JSON; every failure becomes a FixtureError."""
    try:
        return loads(raw)
    except json.JSONDecodeError as exc:
        raise FixtureError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise FixtureError("JSON is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal over Python's digit limit
        raise FixtureError(f"not usable JSON: {exc}") from None


def evaluate(raw: str) -> str:
    """Fixture text in, the lab's output line out (without the newline)."""
    report = decide(*parse_fixture(parse_json(raw)))
    return json.dumps(render(report), sort_keys=True)


def main(stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Lab-compatible entry point: returns the exit code (0, or 2 for an invalid fixture)."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    try:
        line = evaluate(read_input(stdin))
    except INVALID_FIXTURE as exc:
        return refuse_fixture(exc, stderr)
    print(line, file=stdout)
    return 0
