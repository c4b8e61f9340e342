"""Translate twice's ``RetryPolicy`` to and from other tools' retry settings.

The classic mistake is counting. twice (like the lab) counts *attempts*: ``max_attempts``
includes the first try. Airflow ``retries``, Workflows ``max_retries``, Step Functions
``MaxAttempts``, Dagster ``max_retries`` and Prefect ``retries`` count *retries* after it, so the
same "3" means four executions there. Temporal ``maximum_attempts``, tenacity
``stop_after_attempt`` and stamina ``attempts`` count the first try, like twice.

So a translation never stops at the numbers: it writes out the attempt sequence as the other
tool would run it, next to twice's plan, and lists what the other tool cannot express (jitter
semantics, deadline awareness, which errors are retried). Each formula below was checked
against the tool's source or reference documentation; where a tool's behaviour depends on its
version, the difference says so.

``to_<tool>(policy)`` translates twice -> tool; ``from_<tool>(...)`` translates tool -> twice
and takes the tool's own setting names. Both return a ``Translation``; ``str()`` of it prints the
configuration, the counting convention, the attempt sequence and the differences.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from twice.core.backoff import jitter_bounds
from twice.core.extras import require
from twice.core.policy import PolicyError, RetryPolicy
from twice.errors import InputError

if TYPE_CHECKING:
    import tenacity

Tool = Literal[
    "airflow", "workflows", "stepfunctions", "temporal", "tenacity", "stamina", "dagster",
    "prefect",
]
TOOL_NAMES: dict[Tool, str] = {
    "airflow": "Apache Airflow",
    "workflows": "Google Cloud Workflows",
    "stepfunctions": "AWS Step Functions",
    "temporal": "Temporal",
    "tenacity": "tenacity",
    "stamina": "stamina",
    "dagster": "Dagster",
    "prefect": "Prefect",
}
TOOLS: tuple[Tool, ...] = tuple(TOOL_NAMES)

ROW_LIMIT = 100
"""Attempt rows written out per translation; the count itself is never truncated."""

UNCAPPED = 10**9
"""Stand-in cap (about 31 years) where a tool has none: beyond any real deadline."""

AIRFLOW_MAX_TASK_RETRY_DELAY = 86400
"""Airflow's ``[core] max_task_retry_delay`` default (24 h since 2.6): caps exponential waits."""

Spread = Literal["fixed", "random", "hash"]


class TranslationError(InputError):
    """A setting cannot be translated; ``setting`` is the offending name as the caller wrote it."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(message)


@dataclass(frozen=True)
class WaitRange:
    """A wait before an attempt: exact (``fixed``) or anywhere in ``[low, high]``."""

    low: float
    high: float
    spread: Spread = "fixed"

    def label(self) -> str:
        if self.low == self.high:
            return seconds(self.low)
        return f"{seconds(self.low)}–{seconds(self.high)} ({self.spread})"


NO_WAIT = WaitRange(0, 0)


@dataclass(frozen=True)
class AttemptRow:
    """One attempt, as twice plans it and as the other tool would run it (seconds)."""

    number: int
    twice_delay: float  # planner: no jitter
    twice_wait: WaitRange  # executor: with the policy's jitter
    tool_wait: WaitRange
    twice_start: float  # cumulative earliest start in twice's plan
    tool_start: WaitRange  # cumulative earliest/latest start under the tool

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.number,
            "twice_delay": self.twice_delay,
            "twice_wait": [self.twice_wait.low, self.twice_wait.high],
            "tool_wait": [self.tool_wait.low, self.tool_wait.high],
            "tool_wait_spread": self.tool_wait.spread,
            "twice_start": self.twice_start,
            "tool_start": [self.tool_start.low, self.tool_start.high],
        }


@dataclass(frozen=True)
class Translation:
    """A retry policy expressed in another tool, with everything that does not carry over.

    ``policy`` is always the twice side: the input of ``to_<tool>``, the result of
    ``from_<tool>``. ``config`` holds the tool's settings (seconds as numbers) and ``snippet``
    shows how to write them in the tool.
    """

    tool: Tool
    direction: Literal["to", "from"]
    policy: RetryPolicy
    config: dict[str, Any]
    snippet: str
    counting: str
    differences: tuple[str, ...]
    executions: int
    tool_wait: Callable[[int], WaitRange] = field(repr=False, compare=False)

    @property
    def title(self) -> str:
        name = TOOL_NAMES[self.tool]
        return f"twice -> {name}" if self.direction == "to" else f"{name} -> twice"

    def rows(self, durations: float = 0.0, limit: int = ROW_LIMIT) -> tuple[AttemptRow, ...]:
        """The attempt sequence if every attempt fails and each runs ``durations`` seconds."""
        rows = []
        tool_low = tool_high = 0.0
        spread: Spread = "fixed"
        for plan in itertools.islice(self.policy.attempts(durations), limit):
            if plan.number == 1:
                twice_wait = tool_wait = NO_WAIT
            else:
                low, high = jitter_bounds(self.policy, plan.number - 1)
                twice_wait = WaitRange(low, high, "fixed" if low == high else "random")
                tool_wait = self.tool_wait(plan.number - 1)
            tool_low += tool_wait.low
            tool_high += tool_wait.high
            if tool_wait.spread != "fixed":
                spread = tool_wait.spread
            rows.append(AttemptRow(
                number=plan.number,
                twice_delay=plan.delay_before,
                twice_wait=twice_wait,
                tool_wait=tool_wait,
                twice_start=plan.earliest_start,
                tool_start=WaitRange(tool_low, tool_high, spread),
            ))
            tool_low += durations
            tool_high += durations
        return tuple(rows)

    def render(self, durations: float = 0.0) -> str:
        """Plain-text report: configuration, counting, attempt sequence, differences."""
        name = TOOL_NAMES[self.tool]
        header = ("attempt", "twice plans", "twice waits", f"{name} waits", "twice start",
                  f"{name} start")
        table = [header] + [
            (str(r.number), seconds(r.twice_delay), r.twice_wait.label(), r.tool_wait.label(),
             seconds(r.twice_start), r.tool_start.label())
            for r in self.rows(durations)
        ]
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        lines = [self.title, "", self.snippet, "", self.counting, ""]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                  for line in table]
        if self.executions > ROW_LIMIT:
            lines.append(f"... {self.executions - ROW_LIMIT} more attempts not shown")
        if self.differences:
            lines += ["", "Not expressible / different:"]
            lines += [f"- {difference}" for difference in self.differences]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def to_dict(self, durations: float = 0.0) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "tool_name": TOOL_NAMES[self.tool],
            "direction": self.direction,
            "counting": self.counting,
            "executions": self.executions,
            "config": self.config,
            "snippet": self.snippet,
            "policy": self.policy.to_dict(),
            "attempts": [row.to_dict() for row in self.rows(durations)],
            "differences": list(self.differences),
        }


def seconds(value: float) -> str:
    """Seconds without float noise: 4, 0.5, 1.953."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _grow(initial: float, multiplier: float, exponent: int, cap: float) -> float:
    """min(cap, initial * multiplier ** exponent) without overflowing for large exponents."""
    if initial > 0 and multiplier > 1 and exponent > 0:
        if exponent * math.log(multiplier) >= math.log(cap / initial):
            return cap
    return min(cap, initial * multiplier**exponent)


def _largest_delay(initial: float, multiplier: float, executions: int) -> float:
    """The longest wait an uncapped tool reaches within its budget: twice's equivalent cap."""
    return _grow(initial, multiplier, max(0, executions - 2), UNCAPPED)


def _exponential(initial: float, multiplier: float, cap: float) -> Callable[[int], WaitRange]:
    """Capped exponential backoff with no spread: Workflows, Temporal, Step Functions NONE."""

    def wait(attempts: int) -> WaitRange:
        value = _grow(initial, multiplier, attempts - 1, cap)
        return WaitRange(value, value)

    return wait


def _number(setting: str, value: Any, *, low: float = 0, integer: bool = False) -> None:
    """Validate a tool setting at the boundary; the message names the setting."""
    kinds = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if integer else "a number"
        raise TranslationError(setting, f"{setting} must be {kind}, got {value!r}")
    if not math.isfinite(value) or value < low:
        raise TranslationError(setting, f"{setting} must be >= {low:g}, got {value!r}")


def _policy(fields: dict[str, str], **values: Any) -> RetryPolicy:
    """Build the twice policy; a rejected field is reported under the tool's setting name."""
    try:
        return RetryPolicy(**values)
    except PolicyError as exc:
        field_name = str(exc).split()[0]
        setting = fields.get(field_name, field_name)
        raise TranslationError(setting, f"{setting}: twice's {exc}") from None


def _error_names(policy: RetryPolicy) -> list[str]:
    return [cls.__name__ for cls in policy.transient]


def _transient_text(policy: RetryPolicy) -> str:
    """twice's transient errors by name, for the differences."""
    return ", ".join(_error_names(policy)) or "none listed yet, so twice retries nothing"


def _tuple(names: list[str]) -> str:
    """Python source for a tuple of names: (A,) or (A, B)."""
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"  # () if none


def _duration(value: float) -> str:
    return f"timedelta(seconds={seconds(value)})"


def _call(name: str, arguments: dict[str, str]) -> str:
    """``name(k=v, ...)`` on one line, or one argument per line when long."""
    flat = f"{name}({', '.join(f'{k}={v}' for k, v in arguments.items())})"
    if len(flat) <= 96:
        return flat
    body = "".join(f"    {k}={v},\n" for k, v in arguments.items())
    return f"{name}(\n{body})"


def _counting(tool: str, setting: str, executions: int, *, counts_first: bool) -> str:
    """The counting convention in one sentence, e.g. 'Airflow retries=3 counts retries only'."""
    rule = "counts the first try" if counts_first else "counts retries only"
    return f"{tool} {setting} {rule}: {executions} execution(s) (twice max_attempts={executions})"


_DEADLINE_PLANNER = "twice's planner refuses a retry whose wait + run time + validation " \
    "cannot finish before the deadline (deadline-infeasible)"
_TIMEOUT_UNKNOWN = "twice treats a timed-out attempt as outcome unknown and reconciles before " \
    "retrying"


def _timeout_difference(timeout: float | None, effect: str) -> list[str]:
    """What the tool does when an attempt times out (``effect``) against what twice does, when
    a timeout is set at all: a timed-out attempt may still have had its effect."""
    return [] if timeout is None else [f"{effect}; {_TIMEOUT_UNKNOWN}"]


# --- Apache Airflow ---------------------------------------------------------------------------


def _airflow_wait(
    retry_delay: float, exponential: bool, max_retry_delay: float | None, multiplier: float
) -> Callable[[int], WaitRange]:
    """TaskInstance.next_retry_datetime: b = max(1, ceil(retry_delay * m^(try-1))), then
    b + sha1(dag#task#logical_date#try) % b, capped by max_retry_delay and the 24 h default."""
    cap: float = AIRFLOW_MAX_TASK_RETRY_DELAY
    if max_retry_delay:
        cap = min(cap, max_retry_delay)

    def wait(attempts: int) -> WaitRange:
        if not exponential:
            return WaitRange(retry_delay, retry_delay)
        base = max(1, math.ceil(_grow(retry_delay, multiplier, attempts - 1, 2 * UNCAPPED)))
        return WaitRange(min(base, cap), min(2 * base - 1, cap), "hash")

    return wait


def _airflow(
    direction: Literal["to", "from"],
    policy: RetryPolicy,
    retries: int,
    retry_delay: float,
    exponential: bool,
    max_retry_delay: float | None,
    multiplier: float,
    execution_timeout: float | None,
) -> Translation:
    config: dict[str, Any] = {"retries": retries, "retry_delay": retry_delay}
    arguments = {"retries": str(retries), "retry_delay": _duration(retry_delay)}
    if exponential:
        config["retry_exponential_backoff"] = True
        arguments["retry_exponential_backoff"] = "True"
        if max_retry_delay is not None:
            config["max_retry_delay"] = max_retry_delay
            arguments["max_retry_delay"] = _duration(max_retry_delay)
        if multiplier != 2:
            config["retry_delay_multiplier"] = multiplier
            arguments["retry_delay_multiplier"] = seconds(multiplier)
    elif max_retry_delay is not None:
        config["max_retry_delay"] = max_retry_delay
        arguments["max_retry_delay"] = _duration(max_retry_delay)
    if execution_timeout is not None:
        config["execution_timeout"] = execution_timeout
        arguments["execution_timeout"] = _duration(execution_timeout)

    differences = []
    if exponential:
        differences.append(
            "Airflow's exponential wait is b + hash % b with b = ceil(retry_delay x "
            f"{seconds(multiplier)}^(n-1)) in whole seconds: a deterministic SHA-1 of dag, task, "
            "logical date and try number (not random), between 1x and 2x twice's plan, then "
            "capped by max_retry_delay and [core] max_task_retry_delay (24 h by default)"
        )
        if multiplier != 2:
            differences.append(
                "retry_delay_multiplier exists only in Airflow releases that include "
                "apache/airflow#56866; older releases always double"
            )
    elif max_retry_delay is not None:
        differences.append("max_retry_delay is ignored without retry_exponential_backoff")
    if policy.jitter != "none":
        differences.append(
            f"twice's random {policy.jitter} jitter "
            + ("(up to 25 % longer than the plan) " if policy.jitter == "additive"
               else "(never longer than the plan) ")
            + "has no Airflow "
            "setting" + ("; the hash spread waits longer than the plan instead" if exponential
                         else "; a constant retry_delay has no spread at all")
        )
    differences += [
        "Airflow retries every exception, twice only its transient errors "
        f"({_transient_text(policy)}): raise AirflowFailException for permanent errors so "
        "Airflow does not retry them",
        "Airflow schedules a retry even when it cannot finish before dagrun_timeout; "
        + _DEADLINE_PLANNER,
        "clearing a task grants a fresh retries budget while try_number keeps growing, so "
        "exponential backoff continues from the higher count",
    ]
    differences += _timeout_difference(
        execution_timeout,
        "execution_timeout raises AirflowTaskTimeout, which Airflow retries like any failure",
    )
    return Translation(
        tool="airflow",
        direction=direction,
        policy=policy,
        config=config,
        snippet=_call("@task", arguments),
        counting=_counting("Airflow", f"retries={retries}", retries + 1, counts_first=False),
        differences=tuple(differences),
        executions=retries + 1,
        tool_wait=_airflow_wait(retry_delay, exponential, max_retry_delay, multiplier),
    )


def to_airflow(policy: RetryPolicy) -> Translation:
    """Airflow operator arguments for ``policy`` (retries = max_attempts - 1)."""
    exponential = policy.multiplier != 1
    return _airflow(
        "to", policy, policy.retries, policy.initial_delay, exponential,
        policy.max_delay if exponential else None, policy.multiplier if exponential else 2,
        policy.attempt_timeout,
    )


def from_airflow(
    retries: int = 0,
    retry_delay: float = 300,
    retry_exponential_backoff: bool = False,
    max_retry_delay: float | None = None,
    retry_delay_multiplier: float = 2,
    execution_timeout: float | None = None,
) -> Translation:
    """twice policy for Airflow task settings (defaults are Airflow's; seconds as numbers).

    Airflow's hash spread cannot be reproduced, so twice plans the lower bound of each wait
    (jitter none); the attempt table shows both.
    """
    _number("retries", retries, integer=True)
    _number("retry_delay", retry_delay)
    _number("retry_delay_multiplier", retry_delay_multiplier, low=1)
    if max_retry_delay is not None:
        _number("max_retry_delay", max_retry_delay)
    if execution_timeout is not None:
        _number("execution_timeout", execution_timeout)
    executions = retries + 1
    if retry_exponential_backoff:
        multiplier = retry_delay_multiplier
        cap = min(AIRFLOW_MAX_TASK_RETRY_DELAY, max_retry_delay or AIRFLOW_MAX_TASK_RETRY_DELAY)
        initial = min(retry_delay, cap)
        max_delay = min(cap, _largest_delay(initial, multiplier, executions))
    else:
        initial = max_delay = retry_delay
        multiplier = 1
    policy = _policy(
        {"max_attempts": "retries", "initial_delay": "retry_delay",
         "attempt_timeout": "execution_timeout"},
        max_attempts=executions, initial_delay=initial, multiplier=multiplier,
        max_delay=max_delay, jitter="none", attempt_timeout=execution_timeout,
    )
    return _airflow("from", policy, retries, retry_delay, retry_exponential_backoff,
                    max_retry_delay, retry_delay_multiplier, execution_timeout)


# --- Google Cloud Workflows -------------------------------------------------------------------

WORKFLOWS_DEFAULT_RETRY = {"max_retries": 5, "initial_delay": 1, "multiplier": 1.25,
                           "max_delay": 60}
"""``http.default_retry``: 5 retries, 1 s initial delay, x1.25, 60 s cap."""


def _workflows(
    direction: Literal["to", "from"], policy: RetryPolicy, max_retries: int,
    initial_delay: float, multiplier: float, max_delay: float,
) -> Translation:
    config = {
        "max_retries": max_retries,
        "backoff": {"initial_delay": initial_delay, "max_delay": max_delay,
                    "multiplier": multiplier},
    }
    snippet = (
        "retry:\n"
        "  predicate: ${transient_errors}  # a subworkflow returning true for transient errors\n"
        f"  max_retries: {max_retries}\n"
        "  backoff:\n"
        f"    initial_delay: {seconds(initial_delay)}\n"
        f"    max_delay: {seconds(max_delay)}\n"
        f"    multiplier: {seconds(multiplier)}"
    )
    differences = []
    if policy.jitter != "none":
        differences.append(
            f"Workflows documents no jitter: twice's {policy.jitter} jitter is lost and every "
            "execution retries on the same schedule"
        )
    differences += [
        "the predicate decides what is retried; write one that matches twice's transient "
        f"errors ({_transient_text(policy)}). A timeout leaves the remote outcome unknown, "
        "which is why http.default_retry_non_idempotent retries fewer errors (429, 503, "
        "ConnectionFailedError)",
        "Workflows does not check that a retry can finish before the execution's deadline; "
        + _DEADLINE_PLANNER,
    ]
    differences += _timeout_difference(
        policy.attempt_timeout,
        "attempt_timeout maps to the http call's own timeout argument, not to the retry block",
    )
    return Translation(
        tool="workflows", direction=direction, policy=policy, config=config, snippet=snippet,
        counting=_counting("Workflows", f"max_retries={max_retries}", max_retries + 1,
                           counts_first=False),
        differences=tuple(differences), executions=max_retries + 1,
        tool_wait=_exponential(initial_delay, multiplier, max_delay),
    )


def to_workflows(policy: RetryPolicy) -> Translation:
    """A Workflows ``retry`` block for ``policy`` (max_retries = max_attempts - 1)."""
    return _workflows("to", policy, policy.retries, policy.initial_delay, policy.multiplier,
                      policy.max_delay)


def from_workflows(
    max_retries: int = 5, initial_delay: float = 1, multiplier: float = 1.25,
    max_delay: float = 60,
) -> Translation:
    """twice policy for a Workflows retry block (defaults are ``http.default_retry``'s).

    Same formula as twice (delay = min(max_delay, initial_delay x multiplier^(n-1))), no jitter.
    """
    _number("max_retries", max_retries, integer=True)
    policy = _policy(
        {"max_attempts": "max_retries"},
        max_attempts=max_retries + 1, initial_delay=initial_delay, multiplier=multiplier,
        max_delay=max_delay, jitter="none",
    )
    return _workflows("from", policy, max_retries, initial_delay, multiplier, max_delay)


# --- AWS Step Functions -----------------------------------------------------------------------

StepFunctionsJitter = Literal["FULL", "NONE"]


def _stepfunctions_wait(
    interval: int, rate: float, max_delay: int | None, jitter: StepFunctionsJitter
) -> Callable[[int], WaitRange]:
    exact = _exponential(interval, rate, UNCAPPED if max_delay is None else max_delay)

    def wait(attempts: int) -> WaitRange:
        value = exact(attempts).high
        return WaitRange(0, value, "random") if jitter == "FULL" else WaitRange(value, value)

    return wait


def _stepfunctions(
    direction: Literal["to", "from"], policy: RetryPolicy, retrier: dict[str, Any],
    timeout_seconds: int | None, notes: list[str],
) -> Translation:
    state: dict[str, Any] = {}
    if timeout_seconds is not None:
        state["TimeoutSeconds"] = timeout_seconds
    state["Retry"] = [retrier]
    retries = retrier["MaxAttempts"]
    counting = _counting("Step Functions", f"MaxAttempts={retries}", retries + 1,
                         counts_first=False)
    if retries == 0:
        counting += "; 0 means never retry"
    differences = [*notes]
    differences += [
        "Step Functions retries only the errors named in ErrorEquals: list the errors twice "
        f"treats as transient ({_transient_text(policy)}); States.ALL would also retry "
        "permanent errors",
        "Step Functions does not check that a retry can finish before the state machine's "
        "TimeoutSeconds; " + _DEADLINE_PLANNER,
    ]
    differences += _timeout_difference(
        timeout_seconds, "TimeoutSeconds raises States.Timeout, retried like any listed error"
    )
    return Translation(
        tool="stepfunctions", direction=direction, policy=policy, config=state,
        snippet=json.dumps(state, indent=2), counting=counting, differences=tuple(differences),
        executions=retries + 1,
        tool_wait=_stepfunctions_wait(retrier["IntervalSeconds"], retrier["BackoffRate"],
                                      retrier.get("MaxDelaySeconds"), retrier["JitterStrategy"]),
    )


def to_stepfunctions(policy: RetryPolicy) -> Translation:
    """A Task state's ``Retry`` for ``policy`` (MaxAttempts = max_attempts - 1: retries only)."""
    notes = []
    interval = max(1, math.ceil(policy.initial_delay))
    if interval != policy.initial_delay:
        notes.append(
            f"IntervalSeconds is a whole number >= 1: initial_delay {seconds(policy.initial_delay)}"
            f" s became {interval} s"
        )
    max_delay = max(interval, math.ceil(policy.max_delay))
    if max_delay != policy.max_delay:
        notes.append(
            f"MaxDelaySeconds is a whole number: max_delay {seconds(policy.max_delay)} s became "
            f"{max_delay} s"
        )
    jitter: StepFunctionsJitter = "NONE" if policy.jitter == "none" else "FULL"
    if policy.jitter in ("equal", "additive"):
        least = "at least half the plan" if policy.jitter == "equal" else "at least the plan"
        notes.append(
            "Step Functions has FULL or NONE jitter: FULL may wait down to 0 s where twice's "
            f"{policy.jitter} jitter waits {least}"
        )
    retrier = {
        "ErrorEquals": _error_names(policy) or ["<TransientErrorName>"],
        "MaxAttempts": policy.retries,
        "IntervalSeconds": interval,
        "BackoffRate": policy.multiplier,
        "MaxDelaySeconds": max_delay,
        "JitterStrategy": jitter,
    }
    timeout = None if policy.attempt_timeout is None else math.ceil(policy.attempt_timeout)
    return _stepfunctions("to", policy, retrier, timeout, notes)


def from_stepfunctions(
    MaxAttempts: int = 3,  # States Language names
    IntervalSeconds: int = 1,
    BackoffRate: float = 2.0,
    MaxDelaySeconds: int | None = None,
    JitterStrategy: StepFunctionsJitter = "NONE",
    ErrorEquals: Iterable[str] = ("States.ALL",),
    TimeoutSeconds: int | None = None,
) -> Translation:
    """twice policy for a Step Functions retrier; ``from_stepfunctions(**retrier_json)`` works.

    The keyword names are the States Language fields so that ``MaxAttempts`` (retries only,
    default 3, 0 = never retry) cannot be mistaken for twice's ``max_attempts``.
    """
    _number("MaxAttempts", MaxAttempts, integer=True)
    _number("IntervalSeconds", IntervalSeconds, low=1, integer=True)
    _number("BackoffRate", BackoffRate, low=1)
    if MaxDelaySeconds is not None:
        _number("MaxDelaySeconds", MaxDelaySeconds, low=1, integer=True)
    if TimeoutSeconds is not None:
        _number("TimeoutSeconds", TimeoutSeconds, low=1, integer=True)
    if JitterStrategy not in ("FULL", "NONE"):
        raise TranslationError("JitterStrategy",
                               f"JitterStrategy must be FULL or NONE, got {JitterStrategy!r}")
    executions = MaxAttempts + 1
    cap = MaxDelaySeconds if MaxDelaySeconds is not None else UNCAPPED
    initial = min(IntervalSeconds, cap)
    policy = _policy(
        {"max_attempts": "MaxAttempts"},
        max_attempts=executions, initial_delay=initial, multiplier=BackoffRate,
        max_delay=min(cap, _largest_delay(initial, BackoffRate, executions)),
        jitter="full" if JitterStrategy == "FULL" else "none", attempt_timeout=TimeoutSeconds,
    )
    retrier: dict[str, Any] = {
        "ErrorEquals": list(ErrorEquals), "MaxAttempts": MaxAttempts,
        "IntervalSeconds": IntervalSeconds, "BackoffRate": BackoffRate,
        "JitterStrategy": JitterStrategy,
    }
    if MaxDelaySeconds is not None:
        retrier["MaxDelaySeconds"] = MaxDelaySeconds
    return _stepfunctions("from", policy, retrier, TimeoutSeconds, [])


# --- Temporal ---------------------------------------------------------------------------------


def _temporal(
    direction: Literal["to", "from"], policy: RetryPolicy, maximum_attempts: int,
    initial_interval: float, backoff_coefficient: float, maximum_interval: float,
    start_to_close_timeout: float | None, notes: list[str],
) -> Translation:
    config: dict[str, Any] = {
        "maximum_attempts": maximum_attempts,
        "initial_interval": initial_interval,
        "backoff_coefficient": backoff_coefficient,
        "maximum_interval": maximum_interval,
        "non_retryable_error_types": ["<PermanentErrorType>"],
    }
    retry_policy = _call("RetryPolicy", {
        "maximum_attempts": str(maximum_attempts),
        "initial_interval": _duration(initial_interval),
        "backoff_coefficient": seconds(backoff_coefficient),
        "maximum_interval": _duration(maximum_interval),
        "non_retryable_error_types": '["<PermanentErrorType>"]',
    })
    snippet = f"retry_policy = {retry_policy}"
    if start_to_close_timeout is not None:
        config["start_to_close_timeout"] = start_to_close_timeout
        snippet += f"\nstart_to_close_timeout = {_duration(start_to_close_timeout)}"
    differences = [*notes]
    if policy.jitter != "none":
        differences.append(
            f"Temporal's RetryPolicy has no jitter setting: twice's {policy.jitter} jitter is lost"
        )
    differences += [
        "Temporal retries every error except non_retryable_error_types (a deny list); twice "
        f"retries only its transient errors, an allow list ({_transient_text(policy)}): raise "
        "ApplicationError(non_retryable=True) for permanent errors",
        "schedule_to_close_timeout bounds all attempts together, but the next attempt's run "
        "time is not weighed against it; " + _DEADLINE_PLANNER,
    ]
    differences += _timeout_difference(
        start_to_close_timeout, "a start_to_close_timeout is retried like a failure"
    )
    return Translation(
        tool="temporal", direction=direction, policy=policy, config=config, snippet=snippet,
        counting=_counting("Temporal", f"maximum_attempts={maximum_attempts}", maximum_attempts,
                           counts_first=True) + "; 0 would mean unlimited",
        differences=tuple(differences), executions=maximum_attempts,
        tool_wait=_exponential(initial_interval, backoff_coefficient, maximum_interval),
    )


def to_temporal(policy: RetryPolicy) -> Translation:
    """A Temporal ``RetryPolicy`` for ``policy`` (maximum_attempts = max_attempts)."""
    notes = []
    initial = policy.initial_delay
    if initial <= 0:
        initial = 1
        notes.append("Temporal needs a positive initial_interval (unset means 1 s): 0 s became 1 s")
    return _temporal("to", policy, policy.max_attempts, initial, policy.multiplier,
                     max(initial, policy.max_delay), policy.attempt_timeout, notes)


def from_temporal(
    maximum_attempts: int = 0,
    initial_interval: float = 1.0,
    backoff_coefficient: float = 2.0,
    maximum_interval: float | None = None,
    start_to_close_timeout: float | None = None,
) -> Translation:
    """twice policy for a Temporal RetryPolicy (defaults are Temporal's).

    ``maximum_attempts=0`` (Temporal's default) means unlimited and is refused: twice's budget is
    always finite. An unset ``maximum_interval`` is 100 x ``initial_interval``, as in Temporal.
    """
    _number("maximum_attempts", maximum_attempts, integer=True)
    if maximum_attempts == 0:
        raise TranslationError(
            "maximum_attempts",
            "Temporal maximum_attempts=0 means unlimited attempts (only timeouts stop them); "
            "twice needs a finite budget that counts the first try: pass maximum_attempts=N "
            "for N executions",
        )
    _number("initial_interval", initial_interval)
    if initial_interval <= 0:
        raise TranslationError("initial_interval", "initial_interval must be > 0 seconds")
    _number("backoff_coefficient", backoff_coefficient, low=1)
    notes = []
    if maximum_interval is None:
        maximum_interval = 100 * initial_interval
        notes.append("maximum_interval unset: Temporal uses 100 x initial_interval")
    policy = _policy(
        {"max_attempts": "maximum_attempts", "initial_delay": "initial_interval",
         "multiplier": "backoff_coefficient", "max_delay": "maximum_interval",
         "attempt_timeout": "start_to_close_timeout"},
        max_attempts=maximum_attempts, initial_delay=initial_interval,
        multiplier=backoff_coefficient, max_delay=maximum_interval, jitter="none",
        attempt_timeout=start_to_close_timeout,
    )
    return _temporal("from", policy, maximum_attempts, initial_interval, backoff_coefficient,
                     maximum_interval, start_to_close_timeout, notes)


# --- tenacity ---------------------------------------------------------------------------------

TenacityWait = Literal["none", "exponential", "random_exponential", "equal"]


def _tenacity_wait(
    kind: TenacityWait, multiplier: float, cap: float, exp_base: float, floor: float
) -> Callable[[int], WaitRange]:
    """wait_exponential: max(min, min(max, multiplier * exp_base^(n-1)));
    wait_random_exponential: uniform(min, that); "equal" is the sum of both at half scale."""

    def wait(attempts: int) -> WaitRange:
        if kind == "none":
            return NO_WAIT
        value = max(floor, _grow(multiplier, exp_base, attempts - 1, cap))
        if kind == "exponential":
            return WaitRange(value, value)
        if kind == "random_exponential":
            return WaitRange(floor, value, "random")
        return WaitRange(value / 2, value, "random")

    return wait


def _tenacity_wait_call(kind: TenacityWait, multiplier: float, cap: float,
                        exp_base: float) -> str:
    if kind == "none":
        return "wait_none()"
    if kind == "equal":
        half = {"multiplier": seconds(multiplier / 2), "max": seconds(cap / 2),
                "exp_base": seconds(exp_base)}
        return f"{_call('wait_exponential', half)} + {_call('wait_random_exponential', half)}"
    arguments = {"multiplier": seconds(multiplier), "max": seconds(cap),
                 "exp_base": seconds(exp_base)}
    return _call(f"wait_{kind}", arguments)


def _tenacity_kind(policy: RetryPolicy) -> TenacityWait:
    if policy.max_delay == 0:
        return "none"
    kinds: dict[str, TenacityWait] = {"none": "exponential", "full": "random_exponential",
                                      "equal": "equal"}
    return kinds[policy.jitter]


def _tenacity(
    direction: Literal["to", "from"], policy: RetryPolicy, config: dict[str, Any], snippet: str,
    stop_after_attempt: int, tool_wait: Callable[[int], WaitRange], notes: list[str],
) -> Translation:
    differences = [
        *notes,
        "tenacity's stop_before_delay refuses a sleep that would cross a deadline but ignores "
        "the next attempt's run time; " + _DEADLINE_PLANNER,
    ]
    differences += _timeout_difference(
        policy.attempt_timeout,
        "tenacity has no per-attempt timeout: wrap the call in twice.engine.timeouts."
        "run_with_timeout or run_in_process",
    )
    return Translation(
        tool="tenacity", direction=direction, policy=policy, config=config, snippet=snippet,
        counting=_counting("tenacity", f"stop_after_attempt({stop_after_attempt})",
                           stop_after_attempt, counts_first=True),
        differences=tuple(differences), executions=stop_after_attempt, tool_wait=tool_wait,
    )


def to_tenacity(policy: RetryPolicy) -> Translation:
    """tenacity strategies for ``policy``; ``to_tenacity_retrying`` builds the real object.

    Exact: stop_after_attempt(max_attempts); wait_exponential (none), wait_random_exponential
    (full), or half of each summed (equal); retry_if_exception_type(transient) so, as in twice,
    only transient errors are retried.
    """
    kind = _tenacity_kind(policy)
    names = _error_names(policy)
    config = {
        "stop_after_attempt": policy.max_attempts,
        "wait": {"strategy": kind, "multiplier": policy.initial_delay, "max": policy.max_delay,
                 "exp_base": policy.multiplier},
        "retry_if_exception_type": names,
        "reraise": True,
    }
    wait = _tenacity_wait_call(kind, policy.initial_delay, policy.max_delay, policy.multiplier)
    snippet = (
        "Retrying(\n"
        f"    stop=stop_after_attempt({policy.max_attempts}),\n"
        f"    wait={wait},\n"
        f"    retry=retry_if_exception_type({_tuple(names)}),\n"
        "    reraise=True,\n"
        ")"
    )
    return _tenacity(
        "to", policy, config, snippet, policy.max_attempts,
        _tenacity_wait(kind, policy.initial_delay, policy.max_delay, policy.multiplier, 0),
        ["keep the retry= line: without it tenacity retries every exception"]
        + ([] if names else ["no transient errors listed: retry_if_exception_type(()) retries "
                             "nothing, exactly as twice would"]),
    )


def to_tenacity_retrying(policy: RetryPolicy, **overrides: Any) -> tenacity.Retrying:
    """A real ``tenacity.Retrying`` for ``policy`` (``overrides``, e.g. ``sleep=``, win)."""
    tenacity = require("tenacity", extra=None, who="tenacity Retrying objects")

    kind = _tenacity_kind(policy)
    wait: Any
    if kind == "none":
        wait = tenacity.wait_none()
    elif kind == "exponential":
        wait = tenacity.wait_exponential(policy.initial_delay, policy.max_delay,
                                         policy.multiplier)
    elif kind == "random_exponential":
        wait = tenacity.wait_random_exponential(policy.initial_delay, policy.max_delay,
                                                policy.multiplier)
    else:
        half = (policy.initial_delay / 2, policy.max_delay / 2, policy.multiplier)
        wait = tenacity.wait_exponential(*half) + tenacity.wait_random_exponential(*half)
    settings: dict[str, Any] = {
        "stop": tenacity.stop_after_attempt(policy.max_attempts),
        "wait": wait,
        "retry": tenacity.retry_if_exception_type(policy.transient),
        "reraise": True,
    }
    settings.update(overrides)
    return tenacity.Retrying(**settings)


def from_tenacity(
    stop_after_attempt: int,
    wait: Literal["none", "exponential", "random_exponential"] = "none",
    wait_multiplier: float = 1,
    wait_max: float | None = None,
    wait_exp_base: float = 2,
    wait_min: float = 0,
) -> Translation:
    """twice policy for ``stop_after_attempt(n)`` with ``wait_<wait>(multiplier, max, exp_base,
    min)``; ``wait="none"`` is tenacity's default (no wait)."""
    _number("stop_after_attempt", stop_after_attempt, low=1, integer=True)
    if wait not in ("none", "exponential", "random_exponential"):
        raise TranslationError(
            "wait", f"wait must be none, exponential or random_exponential, got {wait!r}")
    _number("wait_multiplier", wait_multiplier)
    _number("wait_exp_base", wait_exp_base, low=1)
    _number("wait_min", wait_min)
    if wait_max is not None:
        _number("wait_max", wait_max)
    cap = UNCAPPED if wait_max is None else wait_max
    notes = ["the retry= predicate is not part of this translation: twice retries only errors "
             "listed as transient, tenacity's default retries every exception"]
    if wait == "none":
        initial: float = 0
        max_delay: float = 0
        multiplier: float = 1
    else:
        initial = min(wait_multiplier, cap)
        multiplier = wait_exp_base
        max_delay = min(cap, _largest_delay(initial, multiplier, stop_after_attempt))
        if wait_min > 0:
            notes.append(f"twice has no minimum wait: tenacity's min={seconds(wait_min)} is lost")
    policy = _policy(
        {"max_attempts": "stop_after_attempt", "initial_delay": "wait_multiplier",
         "multiplier": "wait_exp_base", "max_delay": "wait_max"},
        max_attempts=stop_after_attempt, initial_delay=initial, multiplier=multiplier,
        max_delay=max_delay, jitter="full" if wait == "random_exponential" else "none",
    )
    config = {
        "stop_after_attempt": stop_after_attempt,
        "wait": {"strategy": wait, "multiplier": wait_multiplier, "max": wait_max,
                 "exp_base": wait_exp_base, "min": wait_min},
    }
    arguments = {"multiplier": seconds(wait_multiplier), "exp_base": seconds(wait_exp_base)}
    if wait_max is not None:
        arguments["max"] = seconds(wait_max)
    if wait_min:
        arguments["min"] = seconds(wait_min)
    wait_call = "wait_none()" if wait == "none" else _call(f"wait_{wait}", arguments)
    snippet = f"Retrying(stop=stop_after_attempt({stop_after_attempt}), wait={wait_call})"
    return _tenacity("from", policy, config, snippet, stop_after_attempt,
                     _tenacity_wait(wait, wait_multiplier, cap, wait_exp_base, wait_min), notes)


# --- stamina ----------------------------------------------------------------------------------


def _stamina_wait(initial: float, cap: float, jitter: float,
                  exp_base: float) -> Callable[[int], WaitRange]:
    """tenacity.wait_exponential_jitter: min(max, initial * exp_base^(n-1) + uniform(0, jitter))."""

    def wait(attempts: int) -> WaitRange:
        value = _grow(initial, exp_base, attempts - 1, UNCAPPED)
        low, high = min(cap, value), min(cap, value + jitter)
        return WaitRange(low, high, "fixed" if low == high else "random")

    return wait


def _stamina(
    direction: Literal["to", "from"], policy: RetryPolicy, attempts: int, timeout: float | None,
    wait_initial: float, wait_max: float, wait_jitter: float, wait_exp_base: float,
    notes: list[str],
) -> Translation:
    names = _error_names(policy)
    on = _tuple(names) if names else "<TransientError>"
    config = {"on": names, "attempts": attempts, "timeout": timeout,
              "wait_initial": wait_initial, "wait_max": wait_max, "wait_jitter": wait_jitter,
              "wait_exp_base": wait_exp_base}
    snippet = "@" + _call("stamina.retry", {
        "on": on, "attempts": str(attempts),
        "timeout": "None" if timeout is None else seconds(timeout),
        "wait_initial": seconds(wait_initial), "wait_max": seconds(wait_max),
        "wait_jitter": seconds(wait_jitter), "wait_exp_base": seconds(wait_exp_base),
    })
    differences = [*notes]
    if wait_jitter > 0:
        differences.append(
            "stamina's jitter is added: wait = min(wait_max, v + uniform(0, wait_jitter)), never "
            f"shorter than the plan; twice's jitter ({policy.jitter}) only shortens it"
        )
    if timeout is not None:
        differences.append(
            f"stamina also stops once {seconds(timeout)} s have passed since the first try; "
            "twice's policy has no total-time bound (the run's Deadline plays that role) and "
            + _DEADLINE_PLANNER
        )
    else:
        differences.append("stamina does not check that a retry fits before a deadline; "
                           + _DEADLINE_PLANNER)
    differences += _timeout_difference(
        policy.attempt_timeout,
        "stamina has no per-attempt timeout: wrap the call in twice.engine.timeouts",
    )
    return Translation(
        tool="stamina", direction=direction, policy=policy, config=config, snippet=snippet,
        counting=_counting("stamina", f"attempts={attempts}", attempts, counts_first=True),
        differences=tuple(differences), executions=attempts,
        tool_wait=_stamina_wait(wait_initial, wait_max, wait_jitter, wait_exp_base),
    )


def to_stamina(policy: RetryPolicy) -> Translation:
    """``stamina.retry`` arguments for ``policy`` (attempts = max_attempts, timeout=None)."""
    jitter = 0 if policy.jitter == "none" else policy.initial_delay
    notes = ["timeout=None on purpose: stamina's default 45 s total would stop retries early"]
    if jitter:
        notes.append("wait_jitter set to one initial delay to spread retries; pick your own")
    return _stamina("to", policy, policy.max_attempts, None, policy.initial_delay,
                    policy.max_delay, jitter, policy.multiplier, notes)


def from_stamina(
    attempts: int | None = 10, timeout: float | None = 45.0, wait_initial: float = 0.1,
    wait_max: float = 5.0, wait_jitter: float = 1.0, wait_exp_base: float = 2.0,
) -> Translation:
    """twice policy for ``stamina.retry`` settings (defaults are stamina's).

    ``attempts=None`` (unlimited, bounded only by ``timeout``) is refused. twice plans the wait
    without stamina's added jitter (jitter none); the table shows both.
    """
    if attempts is None or attempts == 0:
        raise TranslationError(
            "attempts", "stamina attempts=None means unlimited attempts (only the timeout stops "
            "them); twice needs a finite budget that counts the first try")
    _number("attempts", attempts, low=1, integer=True)
    for name, value in (("wait_initial", wait_initial), ("wait_max", wait_max),
                        ("wait_jitter", wait_jitter)):
        _number(name, value)
    _number("wait_exp_base", wait_exp_base, low=1)
    if timeout is not None:
        _number("timeout", timeout)
    initial = min(wait_initial, wait_max)
    policy = _policy(
        {"max_attempts": "attempts", "initial_delay": "wait_initial",
         "multiplier": "wait_exp_base", "max_delay": "wait_max"},
        max_attempts=attempts, initial_delay=initial, multiplier=wait_exp_base,
        max_delay=wait_max, jitter="none",
    )
    return _stamina("from", policy, attempts, timeout, wait_initial, wait_max, wait_jitter,
                    wait_exp_base, [])


# --- Dagster ----------------------------------------------------------------------------------


def to_dagster(policy: RetryPolicy) -> Translation:
    """A Dagster ``RetryPolicy`` close to ``policy`` (max_retries = max_attempts - 1).

    Dagster's backoff is linear or (2^k - 1) x delay with no cap, so only constant delays
    translate exactly; the table shows Dagster's real schedule.
    """
    delay = policy.initial_delay
    backoff = None if policy.multiplier == 1 else "EXPONENTIAL"
    jitter = {"none": None, "full": "FULL", "equal": "FULL"}[policy.jitter]
    if not delay:  # Dagster refuses backoff or jitter without a delay
        backoff = jitter = None
    config = {"max_retries": policy.retries, "delay": delay or None, "backoff": backoff,
              "jitter": jitter}
    arguments = {"max_retries": str(policy.retries)}
    if delay:
        arguments["delay"] = seconds(delay)
    if backoff:
        arguments["backoff"] = f"Backoff.{backoff}"
    if jitter:
        arguments["jitter"] = f"Jitter.{jitter}"

    def wait(attempts: int) -> WaitRange:
        value = delay * (2**attempts - 1) if backoff else delay
        return WaitRange(0, value, "random") if jitter else WaitRange(value, value)

    differences = []
    if backoff:
        differences.append(
            "Backoff.EXPONENTIAL waits (2^k - 1) x delay (1, 3, 7, 15 x ...) with no cap: "
            f"multiplier {seconds(policy.multiplier)} and max_delay {seconds(policy.max_delay)} "
            "cannot be expressed"
        )
    if policy.jitter == "equal":
        differences.append("Dagster has FULL or PLUS_MINUS jitter, no equal jitter: FULL used")
    differences += [
        "Dagster retries every exception raised in the op, twice only its transient errors "
        f"({_transient_text(policy)}): raise Failure(allow_retries=False) for permanent errors",
        "Dagster does not check that a retry fits before a deadline; " + _DEADLINE_PLANNER,
        "a cancelled run can keep holding its concurrency slots",
    ]
    if policy.attempt_timeout is not None:
        differences.append("Dagster has no op-level timeout: attempt_timeout cannot be expressed")
    return Translation(
        tool="dagster", direction="to", policy=policy, config=config,
        snippet=_call("RetryPolicy", arguments),
        counting=_counting("Dagster", f"RetryPolicy(max_retries={policy.retries})",
                           policy.max_attempts, counts_first=False),
        differences=tuple(differences), executions=policy.max_attempts, tool_wait=wait,
    )


# --- Prefect ----------------------------------------------------------------------------------


def to_prefect(policy: RetryPolicy) -> Translation:
    """Prefect task arguments for ``policy``: retries = max_attempts - 1 and the exact list of
    planned delays, which Prefect accepts as ``retry_delay_seconds``."""
    planned = [plan.delay_before for plan in itertools.islice(policy.attempts(), 1, ROW_LIMIT)]
    config: dict[str, Any] = {"retries": policy.retries, "retry_delay_seconds": planned}
    arguments = {"retries": str(policy.retries),
                 "retry_delay_seconds": "[" + ", ".join(seconds(d) for d in planned) + "]"}
    if policy.attempt_timeout is not None:
        config["timeout_seconds"] = policy.attempt_timeout
        arguments["timeout_seconds"] = seconds(policy.attempt_timeout)

    def wait(attempts: int) -> WaitRange:
        value = planned[min(attempts, len(planned)) - 1]
        return WaitRange(value, value)

    differences = []
    if policy.retries >= ROW_LIMIT:
        differences.append(f"only the first {ROW_LIMIT - 1} delays are listed; Prefect reuses "
                           "the last one for later retries")
    if policy.jitter != "none":
        differences.append(
            f"twice's {policy.jitter} jitter is not applied: Prefect 3's client engine accepts "
            "retry_jitter_factor and ignores it"
        )
    differences += [
        "Prefect retries every exception unless retry_condition_fn says otherwise: pass one "
        f"that returns True for twice's transient errors ({_transient_text(policy)})",
        "a crashed task run (the process died) is never retried",
        "Prefect does not check that a retry fits before a deadline; " + _DEADLINE_PLANNER,
    ]
    differences += _timeout_difference(
        policy.attempt_timeout, "timeout_seconds cannot interrupt a thread blocked in I/O"
    )
    return Translation(
        tool="prefect", direction="to", policy=policy, config=config,
        snippet="@" + _call("task", arguments),
        counting=_counting("Prefect", f"retries={policy.retries}", policy.max_attempts,
                           counts_first=False),
        differences=tuple(differences), executions=policy.max_attempts, tool_wait=wait,
    )


TO: dict[Tool, Callable[[RetryPolicy], Translation]] = {
    "airflow": to_airflow,
    "workflows": to_workflows,
    "stepfunctions": to_stepfunctions,
    "temporal": to_temporal,
    "tenacity": to_tenacity,
    "stamina": to_stamina,
    "dagster": to_dagster,
    "prefect": to_prefect,
}
"""twice -> tool, for every tool."""

FROM: dict[Tool, Callable[..., Translation]] = {
    "airflow": from_airflow,
    "workflows": from_workflows,
    "stepfunctions": from_stepfunctions,
    "temporal": from_temporal,
    "tenacity": from_tenacity,
    "stamina": from_stamina,
}
"""tool -> twice, for the tools whose schedules twice can express (not Dagster or Prefect)."""


def translate(policy: RetryPolicy, tool: Tool) -> Translation:
    """``policy`` expressed in ``tool``."""
    if tool not in TO:
        raise TranslationError("tool", f"unknown tool {tool!r}; one of {', '.join(TOOLS)}")
    return TO[tool](policy)
