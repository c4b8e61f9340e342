"""The general planner format (``twice decide --extended``): the lab's fields, without its limits.

Same field names and the same precedence as the lab, but:

- instants are integer/decimal teaching-clock seconds *or* ISO-8601 instants with an offset (then
  every instant in the fixture must be one), durations are seconds or ISO-8601 durations;
- no 20-task cap, longer task ids (unit-of-work ids such as ``funds.load.20261130T0000.ab12``),
  more attempts, fractional multipliers;
- each decision carries its reason; the output keeps the lab's truthfulness flags.

Validation is as strict as the lab's: unknown or missing fields, booleans for numbers, duplicate
ids, observations after ``asOf`` and completions after their observation are all refused with the
field named.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from typing import Any, TextIO

from twice.core.decision import DecisionReport, DecisionWindow, TaskEvidence, TaskState, decide
from twice.core.policy import RetryPolicy
from twice.core.timescale import (
    MICROS,
    Clock,
    TimeValueError,
    duration_to_micros,
    instant_to_micros,
    parse_duration,
    parse_instant,
)
from twice.interop.lab import (
    INPUT_LIMIT,
    INVALID_FIXTURE,
    POLICY_FIELDS,
    TASK_FIELDS,
    UNCONFIRMED,
    FixtureError,
    json_type,
    parse_json,
    refuse_fixture,
    render_flags,
    require_fields,
    require_identity,
    require_integer,
)

SCHEMA = "twice.decide/v1"
EXTENDED_INPUT_LIMIT = 512 * INPUT_LIMIT
TASK_ID = re.compile(r"[A-Za-z0-9_.:-]{1,256}")
TOP_FIELDS = ("asOf", "deadline", "maxObservationAge", "policy", "tasks")
MAX_ATTEMPTS = 10_000
# Bounds that keep every sum the planner forms (asOf + backoff + duration + validation) finite
# and printable: a year-10000 instant or an infinite float would crash the output, not decide.
MAX_TEACHING_SECONDS = 10**12
MAX_DURATION_MICROS = 36_500 * 86_400 * MICROS  # 100 years
LATEST_INSTANT = "9000-01-01T00:00:00Z"
_LATEST_MICROS = instant_to_micros(parse_instant(LATEST_INSTANT))
_STATE = {state.value: state for state in TaskState}


def _number(value: object, where: str) -> int | float:
    if type(value) is int:
        return value
    if type(value) is float and value == value and value not in (float("inf"), float("-inf")):
        return value
    raise FixtureError(f"{where} must be a number, got {json_type(value)}")


class _Reader:
    """Reads instants and durations in the fixture's one clock, to engine numbers."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def instant(self, value: object, where: str) -> int | float:
        if self.clock.iso:
            if type(value) is not str:
                raise FixtureError(
                    f"{where} must be an ISO-8601 instant like asOf, got {json_type(value)}"
                )
            try:
                micros = instant_to_micros(parse_instant(value))
            except TimeValueError as exc:
                raise FixtureError(f"{where}: {exc}") from None
            if micros >= _LATEST_MICROS:
                raise FixtureError(f"{where} ({value}) must be before {LATEST_INSTANT}")
            return micros
        if type(value) is str:
            raise FixtureError(f"{where} must be teaching-clock seconds like asOf, got a string")
        number = _number(value, where)
        if not 0 <= number <= MAX_TEACHING_SECONDS:
            raise FixtureError(f"{where} ({number}) must be between 0 and {MAX_TEACHING_SECONDS}")
        return number

    def duration(self, value: object, where: str, minimum: float = 0) -> int | float:
        if type(value) is str:
            try:
                micros = duration_to_micros(parse_duration(value))
            except TimeValueError as exc:
                raise FixtureError(f"{where}: {exc}") from None
            amount: int | float = micros if self.clock.iso else micros / MICROS
        else:
            seconds = _number(value, where)
            if abs(seconds) > MAX_TEACHING_SECONDS:  # before scaling: 1e308 s has no microseconds
                raise FixtureError(f"{where} ({seconds}) must be at most {MAX_TEACHING_SECONDS} s")
            amount = round(seconds * MICROS) if self.clock.iso else seconds
        floor = minimum * MICROS if self.clock.iso else minimum
        if amount < floor:
            raise FixtureError(f"{where} must be at least {minimum} s")
        ceiling = MAX_DURATION_MICROS if self.clock.iso else MAX_TEACHING_SECONDS
        if amount > ceiling:
            limit = "100 years (P36500D)" if self.clock.iso else f"{MAX_TEACHING_SECONDS} s"
            raise FixtureError(f"{where} must be at most {limit}")
        return amount


def parse_extended(payload: object) -> tuple[DecisionWindow, list[TaskEvidence], Clock]:
    """Validate an extended fixture and build the engine's model on one numeric clock."""
    if type(payload) is dict and "schema" in payload:
        if payload["schema"] != SCHEMA:
            raise FixtureError(f"schema must be {SCHEMA!r}, got {payload['schema']!r}")
        payload = {key: value for key, value in payload.items() if key != "schema"}
    top = require_fields(payload, TOP_FIELDS, "fixture")
    clock = Clock("iso" if type(top["asOf"]) is str else "teaching")
    read = _Reader(clock)
    as_of = read.instant(top["asOf"], "asOf")
    deadline = read.instant(top["deadline"], "deadline")
    max_age = read.duration(top["maxObservationAge"], "maxObservationAge")
    raw_policy = require_fields(top["policy"], POLICY_FIELDS, "policy")
    initial = read.duration(raw_policy["initialDelay"], "policy.initialDelay")
    max_delay = read.duration(raw_policy["maxDelay"], "policy.maxDelay")
    if max_delay < initial:
        raise FixtureError("policy.maxDelay must be >= policy.initialDelay")
    multiplier = _number(raw_policy["multiplier"], "policy.multiplier")
    if not 1 <= multiplier <= 100:
        raise FixtureError(f"policy.multiplier ({multiplier}) must be between 1 and 100")
    policy = RetryPolicy(
        max_attempts=require_integer(raw_policy["maxAttempts"], 1, MAX_ATTEMPTS,
                                     "policy.maxAttempts"),
        initial_delay=initial, multiplier=multiplier, max_delay=max_delay, jitter="none",
    )
    raw_tasks = top["tasks"]
    if type(raw_tasks) is not list or not raw_tasks:
        raise FixtureError("tasks must be a non-empty array of tasks")
    seen: dict[str, int] = {}
    tasks = [_task(raw, index, as_of, read, seen) for index, raw in enumerate(raw_tasks)]
    return DecisionWindow(as_of, deadline, max_age, policy), tasks, clock


def _task(raw: object, index: int, as_of: int | float, read: _Reader,
          seen: dict[str, int]) -> TaskEvidence:
    where = f"tasks[{index}]"
    task = require_fields(raw, TASK_FIELDS, where)
    identifier, state = require_identity(task, index, TASK_ID, "1-256 of A-Z a-z 0-9 _ . : -",
                                         seen)
    if type(task["safeRepeat"]) is not bool:
        raise FixtureError(f"{where}.safeRepeat must be a boolean")
    attempts = require_integer(task["attempts"], 1, MAX_ATTEMPTS, f"{where}.attempts")
    observed = read.instant(task["observedAt"], f"{where}.observedAt")
    if observed > as_of:
        raise FixtureError(
            f"{where}.observedAt is after asOf: a future observation is invalid input, "
            "not fresher evidence"
        )
    ended = task["lastFinishedAt"]
    if state in UNCONFIRMED:
        if ended is not None:
            raise FixtureError(f"{where}.lastFinishedAt must be null while state is {state}")
        finished = None
    else:
        finished = read.instant(ended, f"{where}.lastFinishedAt")
        if finished > observed:
            raise FixtureError(f"{where}.lastFinishedAt is after observedAt")
    return TaskEvidence(
        identifier, _STATE[state], task["safeRepeat"], attempts, observed, finished,
        read.duration(task["duration"], f"{where}.duration", minimum=1e-6),
        read.duration(task["validation"], f"{where}.validation"),
    )


def render_extended(report: DecisionReport, clock: Clock) -> dict[str, Any]:
    """JSON-ready output: the lab's fields in the input's clock, plus reasons and a summary."""

    def when(value: int | float | None) -> Any:
        if value is None:
            return None
        return clock.when(value) if clock.iso else value

    def span(value: int | float | None) -> Any:
        if value is None:
            return None
        return clock.span(value) if clock.iso else value

    return {
        "schema": SCHEMA,
        "tasks": [
            {
                "id": result.id,
                "decision": result.decision.value,
                "reason": result.reason,
                "backoff": span(result.backoff),
                "earliestStart": when(result.earliest_start),
                "estimatedFinish": when(result.estimated_finish),
            }
            for result in report.tasks
        ],
        "summary": dict(sorted(Counter(r.decision.value for r in report.tasks).items())),
        **render_flags(report),
    }


def decide_extended(raw: str) -> tuple[DecisionReport, Clock]:
    """Fixture text in, the decisions and the clock they are written in out."""
    window, tasks, clock = parse_extended(parse_json(raw))
    return decide(window, tasks, when=clock.when, span=clock.span), clock


def main(output_format: str = "json", stdin: TextIO | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``twice decide --extended``: exit 0, or 2 with a message naming the field."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    try:
        raw = stdin.read(EXTENDED_INPUT_LIMIT + 1)
        if len(raw) > EXTENDED_INPUT_LIMIT:
            raise FixtureError(f"input is larger than {EXTENDED_INPUT_LIMIT} characters")
        report, clock = decide_extended(raw)
    except INVALID_FIXTURE as exc:
        return refuse_fixture(exc, stderr)
    if output_format == "table":
        from twice.interop.decision_table import print_table

        print_table(report, clock, stdout)
    else:
        print(json.dumps(render_extended(report, clock), sort_keys=True), file=stdout)
    return 0
