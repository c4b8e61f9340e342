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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from twice.destinations.identifiers import validate_identifiers

if TYPE_CHECKING:
    from twice.destinations.base import Destination
    from twice.destinations.slices import PartitionSpec


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
class AcceptanceResult:
    """``passed`` plus one reason per failed criterion and every check made, with values."""

    passed: bool
    reasons: tuple[str, ...]
    checks: tuple[str, ...]

    def __bool__(self) -> bool:
        return self.passed


def evaluate(criteria: AcceptanceCriteria, outcome: LoadOutcome) -> AcceptanceResult:
    """Check ``outcome`` against ``criteria`` (pure: no I/O)."""
    reasons: list[str] = []
    checks: list[str] = []

    def bound(label: str, observed: int | None, limit: int | None, at_least: bool) -> None:
        if limit is None:
            return
        rule = f"{label} {'>=' if at_least else '<='} {limit}"
        if observed is None:
            checks.append(f"{rule}: not reported")
            reasons.append(f"{label} was not reported, so '{rule}' cannot be confirmed")
            return
        ok = observed >= limit if at_least else observed <= limit
        checks.append(f"{rule}: {observed} ({'ok' if ok else 'FAILED'})")
        if not ok:
            reasons.append(f"{label} is {observed}, criterion is {rule}")

    bound("rows", outcome.rows, criteria.min_rows, at_least=True)
    bound("rejected rows", outcome.rejected_rows, criteria.max_rejected_rows, at_least=False)
    bound("non-fatal errors", outcome.nonfatal_errors, criteria.max_nonfatal_errors,
          at_least=False)
    for column in criteria.required_non_null:
        nulls = outcome.null_counts.get(column)
        bound(f"nulls in {column!r}", nulls, 0, at_least=False)
    return AcceptanceResult(not reasons, tuple(reasons), tuple(checks))


def observe(
    destination: Destination,
    partition: PartitionSpec,
    criteria: AcceptanceCriteria,
    *,
    rejected_rows: int | None,
    nonfatal_errors: int | None,
    rows: int | None = None,
) -> LoadOutcome:
    """Build a :class:`LoadOutcome` by asking the destination what it holds in the slice.

    ``rows`` defaults to the slice's row count in the destination; the rejected and non-fatal
    counts can only come from the load itself, so they are required (``None`` = unknown).
    """
    columns: Sequence[str] = criteria.required_non_null
    if rows is None:
        rows = destination.row_count(partition)
    nulls = destination.null_counts(partition, columns) if columns else {}
    return LoadOutcome(rows, rejected_rows, nonfatal_errors, nulls)


class AcceptanceFailed(Exception):
    """An attempt finished but its output failed the task's acceptance criteria.

    Raised by nobody's code: the executor records it as the attempt's permanent error, so the
    ledger says why a finished attempt is not a success.
    """

    def __init__(self, result: AcceptanceResult) -> None:
        super().__init__("acceptance failed: " + "; ".join(result.reasons))
        self.result = result


def check_task_output(
    criteria: AcceptanceCriteria, destination_spec: str, partition: PartitionSpec,
    returned: object, nonfatal_errors: int,
) -> AcceptanceResult:
    """Check one attempt's output: what the task returned plus what its destination holds.

    ``returned`` may be a mapping with ``rejected_rows`` (the task's own count of rows it
    refused); anything else leaves rejected rows unknown, which fails a criterion that needs
    them. ``nonfatal_errors`` is the count the attempt recorded.
    """
    from twice.destinations import open_destination

    rejected = returned.get("rejected_rows") if isinstance(returned, Mapping) else None
    if rejected is not None and (isinstance(rejected, bool) or not isinstance(rejected, int)):
        rejected = None
    with open_destination(destination_spec) as destination:
        outcome = observe(destination, partition, criteria, rejected_rows=rejected,
                          nonfatal_errors=nonfatal_errors)
    return evaluate(criteria, outcome)
