"""Acceptance criteria: is a finished load also a *correct* one?

"DONE is not success." A BigQuery load with ``maxBadRecords`` finishes DONE without
``errorResult`` while dropping rows; a loader that tolerates bad lines reports success with
warnings. Such a load is technically complete and may still be unacceptable. Each task declares
criteria (minimum rows, maximum rejected rows, maximum non-fatal errors, columns that must not be
null) and twice checks them against what the load reported and what the destination now holds.

A count the load did not report is *unknown*, and an unknown value fails the criterion that
needs it: twice does not assume zero rejected rows because nobody said otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from twice.core.identifiers import validate_identifiers


@dataclass(frozen=True)
class AcceptanceCriteria:
    """What a task's output must satisfy; ``None`` means "not checked"."""

    min_rows: int | None = None
    max_rejected_rows: int | None = 0
    max_nonfatal_errors: int | None = 0
    required_non_null: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("min_rows", "max_rejected_rows", "max_nonfatal_errors"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise ValueError(f"{name} must be a non-negative integer or None, got {value!r}")
        object.__setattr__(
            self, "required_non_null",
            validate_identifiers(self.required_non_null, "required non-null column"),
        )


@dataclass(frozen=True)
class LoadOutcome:
    """What a load reported plus what the destination holds; ``None`` = not known."""

    rows: int | None
    rejected_rows: int | None = None
    nonfatal_errors: int | None = None
    null_counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Assertion:
    """One criterion checked, as data (``checks`` holds the same as text).

    ``kind``: ``row_count``, ``rejected_rows``, ``nonfatal_errors`` or ``not_null`` (then
    ``column`` names the column); ``rule`` the criterion as written in ``checks``;
    ``observed`` None when the load did not report the count (which fails the criterion);
    ``at_least``: the criterion is ``observed >= limit`` (else ``observed <= limit``).
    """

    kind: str
    rule: str
    limit: int
    observed: int | None
    passed: bool
    column: str | None = None
    at_least: bool = False


@dataclass(frozen=True)
class AcceptanceResult:
    """``passed`` plus one reason per failed criterion and every check made, with values."""

    passed: bool
    reasons: tuple[str, ...]
    checks: tuple[str, ...]
    assertions: tuple[Assertion, ...] = ()

    def __bool__(self) -> bool:
        return self.passed


def evaluate(criteria: AcceptanceCriteria, outcome: LoadOutcome) -> AcceptanceResult:
    """Check ``outcome`` against ``criteria`` (pure: no I/O)."""
    reasons: list[str] = []
    checks: list[str] = []
    assertions: list[Assertion] = []

    def bound(kind: str, label: str, observed: int | None, limit: int | None, at_least: bool,
              column: str | None = None) -> None:
        if limit is None:
            return
        rule = f"{label} {'>=' if at_least else '<='} {limit}"
        if observed is None:
            checks.append(f"{rule}: not reported")
            reasons.append(f"{label} was not reported, so '{rule}' cannot be confirmed")
            assertions.append(Assertion(kind, rule, limit, None, False, column, at_least))
            return
        ok = observed >= limit if at_least else observed <= limit
        checks.append(f"{rule}: {observed} ({'ok' if ok else 'FAILED'})")
        assertions.append(Assertion(kind, rule, limit, observed, ok, column, at_least))
        if not ok:
            reasons.append(f"{label} is {observed}, criterion is {rule}")

    bound("row_count", "rows", outcome.rows, criteria.min_rows, at_least=True)
    bound("rejected_rows", "rejected rows", outcome.rejected_rows, criteria.max_rejected_rows,
          at_least=False)
    bound("nonfatal_errors", "non-fatal errors", outcome.nonfatal_errors,
          criteria.max_nonfatal_errors, at_least=False)
    for column in criteria.required_non_null:
        nulls = outcome.null_counts.get(column)
        bound("not_null", f"nulls in {column!r}", nulls, 0, at_least=False, column=column)
    return AcceptanceResult(not reasons, tuple(reasons), tuple(checks), tuple(assertions))
