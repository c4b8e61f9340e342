"""The engine's events as standard ``logging`` records (logger ``twice.engine``).

Every executor hands its typed events (``twice.engine.events``) to :func:`log_event` before its
own listeners, so every driver (``twice run``, ``worker``, ``backfill``, the Airflow runner)
logs alike. Each record carries the unit's fields as ``extra`` (``pipeline``, ``uow_id``,
``task``, ``interval``, ``attempt``, ``outcome``, ``job_id``, ...), which a JSON log formatter
(``twice.cli.logs``) prints as keys. Levels: an attempt starting, a verified output and a unit
settled are ``info`` (the command shows how each unit ended); a failed attempt, a refused
output and an unknown outcome reconciled are ``warning``. Nothing is formatted when the
level is off.
"""

from __future__ import annotations

import logging
from typing import Any

from twice.engine.events import (
    AttemptFinished,
    AttemptStarted,
    Event,
    OutputRejected,
    OutputVerified,
    Reconciled,
    UnitSettled,
)

log = logging.getLogger("twice.engine")
# a program that configured no logging sees nothing from the engine (Python's last-resort
# handler would print its warnings); a configured one (the CLI's, Airflow's) gets every record
log.addHandler(logging.NullHandler())


def _fields(event: Event, pipeline: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"pipeline": pipeline, "uow_id": event.uow_id, "task": event.task,
                              "interval": event.interval.label}
    attempt = getattr(event, "attempt", None)
    if attempt is not None:
        fields["attempt"] = attempt
    return fields


def log_event(event: Event, pipeline: str | None = None) -> None:
    """Log ``event`` (see the module docstring); never raises into the engine."""
    level, message, extra = _describe(event)
    if not log.isEnabledFor(level):
        return
    log.log(level, message, extra={**_fields(event, pipeline), **extra})


def _describe(event: Event) -> tuple[int, str, dict[str, Any]]:
    if isinstance(event, AttemptStarted):
        return logging.INFO, f"attempt {event.attempt} started", {"job_id": event.job_id}
    if isinstance(event, AttemptFinished):
        level = logging.INFO if event.outcome == "succeeded" else logging.WARNING
        text = f"attempt {event.attempt} {event.outcome}"
        return level, text + (f": {event.error}" if event.error else ""), {
            "outcome": event.outcome, "error": event.error}
    if isinstance(event, Reconciled):
        return logging.WARNING, (f"outcome of attempt {event.attempt} reconciled from "
                                 f"{event.basis}: {event.state}"), {
            "state": event.state, "basis": event.basis, "job_id": event.job_id}
    if isinstance(event, OutputVerified):
        return logging.INFO, "output verified (acceptance, fingerprint recorded)", {}
    if isinstance(event, OutputRejected):
        return logging.WARNING, f"output refused: {event.reason}", {}
    assert isinstance(event, UnitSettled)  # info: the command shows how each unit ended
    level = logging.INFO
    result = event.result
    return level, f"unit settled: {event.outcome}", {
        "outcome": event.outcome,
        "error": getattr(result, "error", None) if event.outcome != "succeeded" else None}
