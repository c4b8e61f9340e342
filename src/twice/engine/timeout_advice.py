"""Advice on a task's timeout from what its attempts really take.

The Indonesian source's rule: a per-task timeout bounds a hung attempt so that a failure is
detected, and notified, while there is still time to react; "a one-hour limit for a query that
usually finishes in two minutes only delays failure detection". Validation cannot judge that
(it knows the timeout, not the task), the ledger can: once a task has succeeded
``MIN_SAMPLES`` times, a timeout more than ``FACTOR`` times its median attempt (and more than
``MIN_EXCESS_SECONDS`` above it) is called out, with a suggestion. Advice, never a refusal:
the timeout may cover a known slow case the recent attempts did not meet.
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


def timeout_advice(pipeline: Pipeline, ledger: Ledger) -> list[str]:
    """One line per task of ``pipeline`` whose timeout is far above its measured attempts."""
    found = []
    for task in pipeline.tasks.values():
        if task.timeout is None:
            continue
        durations = _measured(ledger, pipeline.name, task.name)
        if len(durations) < MIN_SAMPLES:
            continue
        typical = statistics.median(durations)
        if not timeout_far_above(task.timeout, typical):
            continue
        found.append(
            f"task {task.name!r}: timeout {spoken(task.timeout)} is "
            f"{task.timeout / typical:.0f}x its typical attempt ({spoken(typical)}, the "
            f"median of its last {len(durations)} that succeeded): a hung attempt is detected "
            f"only after {spoken(task.timeout)}, holding its slots meanwhile; a timeout near "
            f"{spoken(SUGGESTED_FACTOR * typical)} would detect it sooner"
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
