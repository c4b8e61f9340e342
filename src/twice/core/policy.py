"""One retry policy type for the planner, the executor and the translations to other tools.

Attempts are counted the way the lab counts them: ``max_attempts`` includes the first try, so
``max_attempts=3`` means at most three executions. Other tools count retries instead; see
``twice.interop.translations`` for the conversions, which always write out the attempt sequence.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from twice.errors import InputError

Jitter = Literal["none", "full", "equal", "additive"]
JITTERS: tuple[Jitter, ...] = ("none", "full", "equal", "additive")
# additive jitter waits the delay plus up to this share of it (the Indonesian chapter's 25 %)
ADDITIVE_JITTER_FRACTION = 0.25


class PolicyError(InputError):
    """A policy field is out of range; the message names the field."""


@dataclass(frozen=True)
class AttemptPlan:
    """One row of a policy's attempt sequence (no jitter: the planner's view)."""

    number: int
    delay_before: float
    earliest_start: float


@dataclass(frozen=True)
class RetryPolicy:
    """How many times to try, how long to wait between tries, and which errors qualify.

    Delay before attempt n+1 = min(max_delay, initial_delay * multiplier ** (n - 1)); the planner
    uses it as is, the executor adds ``jitter`` on top. Only exception classes listed in
    ``transient`` are ever retried: everything else is permanent and stops at once.
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 60.0
    jitter: Jitter = "full"
    transient: tuple[type[BaseException], ...] = field(default=())
    attempt_timeout: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise PolicyError("max_attempts must be an integer (it counts the first try)")
        if self.max_attempts < 1:
            raise PolicyError("max_attempts must be >= 1 (it counts the first try)")
        for name in ("initial_delay", "multiplier", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise PolicyError(f"{name} must be a number of seconds")
            if not math.isfinite(value):
                raise PolicyError(f"{name} must be finite, got {value}")
        if self.initial_delay < 0:
            raise PolicyError("initial_delay must be >= 0 seconds")
        if self.multiplier < 1:
            raise PolicyError("multiplier must be >= 1")
        if self.max_delay < self.initial_delay:
            raise PolicyError("max_delay must be >= initial_delay")
        if self.jitter not in JITTERS:
            raise PolicyError(f"jitter must be one of {', '.join(JITTERS)}")
        if self.attempt_timeout is not None and self.attempt_timeout <= 0:
            raise PolicyError("attempt_timeout must be > 0 seconds")
        for cls in self.transient:
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                raise PolicyError(f"transient must list exception classes, got {cls!r}")

    @property
    def retries(self) -> int:
        """Retries after the first try (what Airflow, Workflows and Dagster call 'retries')."""
        return self.max_attempts - 1

    def backoff_after(self, attempts: int) -> float:
        """Delay to wait after ``attempts`` tries have ended, before the next one (no jitter)."""
        if attempts < 1:
            raise PolicyError("attempts must be >= 1")
        try:
            raw = self.initial_delay * self.multiplier ** (attempts - 1)
        except OverflowError:  # a float power past 1e308 is past any cap
            return self.max_delay
        return min(self.max_delay, raw)

    def allows_another(self, attempts: int) -> bool:
        """Whether the budget admits one more try after ``attempts`` tries."""
        return attempts < self.max_attempts

    def is_transient(self, error: BaseException) -> bool:
        """Only errors explicitly listed as transient are retried."""
        return bool(self.transient) and isinstance(error, self.transient)

    def attempts(self, durations: float = 0.0) -> Iterator[AttemptPlan]:
        """The attempt sequence: number, delay before it, cumulative earliest start.

        ``durations`` is the assumed run time of each failed attempt (0 for the pure delay
        schedule), so earliest start = sum of previous durations and delays.
        """
        start = 0.0
        for number in range(1, self.max_attempts + 1):
            delay = 0.0 if number == 1 else self.backoff_after(number - 1)
            start += delay
            yield AttemptPlan(number=number, delay_before=delay, earliest_start=start)
            start += durations

    def total_delay(self) -> float:
        """Sum of all backoff delays if every attempt fails (the worst-case waiting budget)."""
        return sum(plan.delay_before for plan in self.attempts())

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly view (transient errors by class name) so the CLI and reports print policies
        as values, the same way everywhere."""
        return {
            "max_attempts": self.max_attempts,
            "initial_delay": self.initial_delay,
            "multiplier": self.multiplier,
            "max_delay": self.max_delay,
            "jitter": self.jitter,
            "transient": [cls.__name__ for cls in self.transient],
            "attempt_timeout": self.attempt_timeout,
        }
