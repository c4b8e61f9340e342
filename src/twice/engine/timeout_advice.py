"""Advice on a task's timeout from what its attempts really take.

The Indonesian source's rule: a per-task timeout bounds a hung attempt so that a failure is
detected, and notified, while there is still time to react; "a one-hour limit for a query that
usually finishes in two minutes only delays failure detection". Validation cannot judge that
(it knows the timeout, not the task), the ledger can: once a task has succeeded
``MIN_SAMPLES`` times, a timeout more than ``FACTOR`` times its median attempt (and more than
``MIN_EXCESS_SECONDS`` above it) is called out, with a suggestion. Advice, never a refusal:
the timeout may cover a known slow case the recent attempts did not meet.

The issue's rule compares the timeout with the measured p95, not the median: a timeout that
covers the slow attempts that succeeded (a month-end run) is not "far above" the task, however
quick its typical day. With the few recent samples kept, the p95 is the nearest-rank 95th
percentile (the slowest of fewer than 20). The suggestion is ``SUGGESTED_FACTOR`` times that
p95, and the line names the median too.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from twice.define.pipeline import (
    SUGGESTED_TIMEOUT_FACTOR,
    TIMEOUT_FACTOR,
    TIMEOUT_MIN_EXCESS_SECONDS,
    timeout_far_above,
)
from twice.engine.evidence import spoken

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline
    from twice.ledger import Ledger

MIN_SAMPLES = 3  # succeeded attempts before the durations say anything about the task
# a timeout this many times the typical attempt delays detection, unless only a few minutes
# above it: the rule ``Pipeline.validate`` applies to an estimated_duration, here measured
FACTOR = TIMEOUT_FACTOR
MIN_EXCESS_SECONDS = TIMEOUT_MIN_EXCESS_SECONDS
RECENT_UNITS = 20  # the durations of the task's latest units only: the task changes
SUGGESTED_FACTOR = SUGGESTED_TIMEOUT_FACTOR


def timeout_advice(pipeline: Pipeline, ledger: Ledger) -> list[str]:
    """One line per task of ``pipeline`` whose timeout is far above its measured attempts."""
    found = []
    for task in pipeline.tasks.values():
        if task.timeout is None:
            continue
        durations = _measured(ledger, pipeline.name, task.name)
        if len(durations) < MIN_SAMPLES:
            continue
        typical, p95 = statistics.median(durations), percentile_95(durations)
        if not timeout_far_above(task.timeout, p95):
            continue
        found.append(
            f"task {task.name!r}: timeout {spoken(task.timeout)} is "
            f"{task.timeout / p95:.0f}x the p95 of its attempts ({spoken(p95)}; median "
            f"{spoken(typical)}; its last {len(durations)} that succeeded): a hung attempt is "
            f"detected only after {spoken(task.timeout)}, holding its slots meanwhile; a "
            f"timeout near {spoken(SUGGESTED_FACTOR * p95)} would detect it sooner"
        )
    return found


def percentile_95(durations: list[float]) -> float:
    """The nearest-rank 95th percentile: the smallest duration at or above 95% of them."""
    ordered = sorted(durations)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _measured(ledger: Ledger, pipeline: str, task: str) -> list[float]:
    from twice.ledger.ranges import latest_units

    # the latest units only: reading every unit of the task cost a year of hourly units
    # ~26,000 rows before its backfill could start
    units = latest_units(ledger, pipeline, task, RECENT_UNITS)
    return [
        attempt.duration.total_seconds()
        for unit in units for attempt in ledger.attempts(unit.uow_id)
        if attempt.outcome == "succeeded" and attempt.duration is not None
    ]
