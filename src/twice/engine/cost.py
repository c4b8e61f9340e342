"""Cost guard: refuse a query whose estimated bytes read are over the task's limit.

``check_limit`` compares an estimate (``twice.remote.dry_run`` makes one for Parquet datasets; a
remote service's dry run makes others) with ``maximum_bytes_billed``, and ``guard_task`` applies
a task's own limit. The limit comes from the task definition only, so a retry after a refusal is
checked against the same limit; nothing here ever raises it. A refusal is not retry-eligible:
the plan or the budget has to change first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twice.engine.evidence import COST_GUARD
from twice.errors import TwiceError
from twice.remote.dry_run import CostError
from twice.remote.jobs import Estimate

if TYPE_CHECKING:
    from twice.core.interval import Interval
    from twice.define.pipeline import Task

class CostLimitExceeded(TwiceError):
    """A query's estimate is over ``maximum_bytes_billed``: revise the plan or the budget."""

    def __init__(self, task: str, estimate: Estimate, limit: int) -> None:
        bound = " (an upper bound: the real cost may be lower)" if estimate.upper_bound else ""
        super().__init__(
            f"task {task!r}: estimated {estimate.bytes} bytes read{bound} exceeds "
            f"maximum_bytes_billed={limit}; refused before submitting. Revise the query "
            "(columns, partition filter) or get the budget changed: the limit is never raised "
            "automatically on retry"
        )
        self.task = task
        self.estimate = estimate
        self.limit = limit


@dataclass(frozen=True)
class CostCheck:
    """The guard's verdict for one query: allowed or refused, with the numbers behind it."""

    task: str
    estimate: Estimate
    limit: int | None

    @property
    def allowed(self) -> bool:
        return self.limit is None or self.estimate.bytes <= self.limit

    @property
    def reason(self) -> str:
        if self.allowed:
            limit = (
                "no limit" if self.limit is None
                else f"within maximum_bytes_billed={self.limit}"
            )
            return f"task {self.task!r}: estimated {self.estimate.bytes} bytes read, {limit}"
        assert self.limit is not None
        return str(CostLimitExceeded(self.task, self.estimate, self.limit))

    def raise_if_refused(self) -> None:
        if not self.allowed:
            assert self.limit is not None
            raise CostLimitExceeded(self.task, self.estimate, self.limit)

    def to_detail(self) -> dict[str, Any]:
        return {"cause": COST_GUARD, "task": self.task, "limit": self.limit,
                "allowed": self.allowed, "estimate": self.estimate.to_detail()}


def check_limit(task: str, estimate: Estimate, limit: int | None) -> CostCheck:
    """Compare ``estimate`` with ``limit`` (None: no limit). Never adjusts the limit."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise CostError(f"maximum_bytes_billed must be a positive integer, got {limit!r}")
    return CostCheck(task, estimate, limit)


def guard_task(task: Task, interval: Interval) -> CostCheck | None:
    """The executor's pre-submit check: None unless the task has a limit and an estimator.

    An estimator that fails refuses the attempt (the guard cannot show the query is within the
    limit); the refusal's estimate then reports 0 bytes and the error in its notes.
    """
    limit = task.maximum_bytes_billed
    estimator = task.cost_estimate
    if limit is None or estimator is None:
        return None
    try:
        estimate = estimator(interval)
    except Exception as exc:  # the guard fails closed: no estimate, no submit
        failed = Estimate(0, method="estimate failed", notes=(f"{type(exc).__name__}: {exc}",))
        return _Unestimated(task.name, failed, limit)
    if not isinstance(estimate, Estimate):
        raise CostError(
            f"task {task.name!r}: cost_estimate returned {type(estimate).__name__}, not Estimate"
        )
    return check_limit(task.name, estimate, limit)


class _Unestimated(CostCheck):
    """A refusal because no estimate could be made."""

    @property
    def allowed(self) -> bool:
        return False

    @property
    def reason(self) -> str:
        return (
            f"task {self.task!r}: could not estimate bytes read ({'; '.join(self.estimate.notes)})"
            f"; refused before submitting (maximum_bytes_billed={self.limit})"
        )
