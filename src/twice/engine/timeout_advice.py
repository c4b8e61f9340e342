"""Advice on a task's timeout from what its attempts really take.

The Indonesian source's rule: a per-task timeout bounds a hung attempt so that a failure is
detected, and notified, while there is still time to react; "a one-hour limit for a query that
usually finishes in two minutes only delays failure detection". Validation cannot judge that
(it knows the timeout, not the task), the ledger can: once a task has succeeded
``MIN_SAMPLES`` times, a timeout more than ``FACTOR`` times its median attempt (and more than
``MIN_EXCESS_SECONDS`` above it) is called out, with a suggestion. Advice, never a refusal:
the timeout may cover a known slow case the recent attempts did not meet.

The median says what is typical, so it decides whether the timeout is far above it; the
suggestion must not cut off the slow attempts that succeeded, so it is the longer of
``SUGGESTED_FACTOR`` times the median and ``SLOWEST_MARGIN`` times the slowest (a p95 of a
handful of samples is the slowest anyway). When that suggestion is not well below the timeout
(``MIN_EXCESS_SECONDS``), the timeout already fits the slow case and nothing is said.
"""

from __future__ import annotations

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
SLOWEST_MARGIN = 1.5  # a suggested timeout leaves the slowest success this much room


def timeout_advice(pipeline: Pipeline, ledger: Ledger) -> list[str]:
    """One line per task of ``pipeline`` whose timeout is far above its measured attempts."""
    found = []
    for task in pipeline.tasks.values():
        if task.timeout is None:
            continue
        durations = _measured(ledger, pipeline.name, task.name)
        if len(durations) < MIN_SAMPLES:
            continue
        typical, slowest = statistics.median(durations), max(durations)
        suggested = max(SUGGESTED_FACTOR * typical, SLOWEST_MARGIN * slowest)
        if not timeout_far_above(task.timeout, typical) or (
            task.timeout - suggested <= MIN_EXCESS_SECONDS
        ):
            continue
        basis = (f"{SUGGESTED_FACTOR:g}x the median" if suggested > SLOWEST_MARGIN * slowest
                 else f"{SLOWEST_MARGIN:g}x the slowest")
        found.append(
            f"task {task.name!r}: timeout {spoken(task.timeout)} is "
            f"{task.timeout / typical:.0f}x its typical attempt ({spoken(typical)}, the "
            f"median of its last {len(durations)} that succeeded; the slowest took "
            f"{spoken(slowest)}): a hung attempt is detected only after "
            f"{spoken(task.timeout)}, holding its slots meanwhile; a timeout near "
            f"{spoken(suggested)} ({basis}) would detect it sooner"
        )
    return found


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
