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

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline
    from twice.ledger import Ledger

MIN_SAMPLES = 3  # succeeded attempts before the durations say anything about the task
FACTOR = 10  # a timeout this many times the typical attempt delays detection
MIN_EXCESS_SECONDS = 300.0  # nor is a few minutes' margin worth a warning
RECENT_UNITS = 20  # the durations of the task's latest units only: the task changes
SUGGESTED_FACTOR = 3


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
        if typical <= 0 or task.timeout <= FACTOR * typical or (
            task.timeout - typical <= MIN_EXCESS_SECONDS
        ):
            continue
        found.append(
            f"task {task.name!r}: timeout {_spoken(task.timeout)} is "
            f"{task.timeout / typical:.0f}x its typical attempt ({_spoken(typical)}, the "
            f"median of its last {len(durations)} that succeeded): a hung attempt is detected "
            f"only after {_spoken(task.timeout)}, holding its slots meanwhile; a timeout near "
            f"{_spoken(SUGGESTED_FACTOR * typical)} would detect it sooner"
        )
    return found


def _measured(ledger: Ledger, pipeline: str, task: str) -> list[float]:
    units = ledger.units(pipeline=pipeline, task=task)[-RECENT_UNITS:]
    return [
        attempt.duration.total_seconds()
        for unit in units for attempt in ledger.attempts(unit.uow_id)
        if attempt.outcome == "succeeded" and attempt.duration is not None
    ]


def _spoken(seconds: float) -> str:
    """``1 h``, ``2 min``, ``45 s``, ``1 h 30 min``: how an operator says a duration."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h"] if hours else []
    if minutes:
        parts.append(f"{minutes} min")
    if secs and not hours:
        parts.append(f"{secs} s")
    return " ".join(parts) or f"{seconds:g} s"
