"""Typed events the engine emits as it drives a unit of work (one lifecycle for every driver).

Drivers (``twice run``, ``twice worker``, ``twice backfill``, the Airflow runner) and reports
listen to these instead of re-reading the ledger to learn what the engine did. A listener is
any callable taking one event; it runs on the engine's thread, so it must be quick and must not
raise (an exception from a listener is swallowed: observing never changes the outcome).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twice.core.interval import Interval

if TYPE_CHECKING:
    from twice.define.acceptance import Assertion


@dataclass(frozen=True)
class UnitEvent:
    """Fields every event carries: which unit of work, of which task and interval."""

    uow_id: str
    task: str
    interval: Interval


@dataclass(frozen=True)
class AttemptStarted(UnitEvent):
    attempt: int
    generation: int
    job_id: str | None
    token: int


@dataclass(frozen=True)
class AttemptFinished(UnitEvent):
    attempt: int
    outcome: str  # the ledger's attempt outcome (succeeded, failed-transient, ...)
    error: str | None = None


@dataclass(frozen=True)
class Reconciled(UnitEvent):
    """An unknown outcome settled: ``basis`` says from what (commit record, the task's
    reconcile function, the caller's safe_repeat assertion)."""

    attempt: int
    state: str  # succeeded | failed | not-found | running | unknown
    basis: str
    job_id: str | None = None


@dataclass(frozen=True)
class OutputVerified(UnitEvent):
    """The validate-output step passed: acceptance, then the partition's fingerprint recorded.

    ``diff`` is the partition's new fingerprint against the previous recorded version (a
    ``twice.drivers.backfill.PartitionDiff``), None for tasks without a destination.
    ``assertions``: the acceptance criteria checked, as data (empty: the task has none).
    """

    attempt: int
    acceptance: tuple[str, ...] = ()
    diff: Any = None
    source: str = ""  # "commit-record" or "fingerprinted after the attempt"
    assertions: tuple[Assertion, ...] = ()


@dataclass(frozen=True)
class OutputRejected(UnitEvent):
    """The validate-output step refused the attempt's output: its acceptance criteria failed
    (``assertions`` says which), or its schema changed (``schema_change``), or it could not be
    fingerprinted."""

    attempt: int
    reason: str
    schema_change: bool = False
    assertions: tuple[Assertion, ...] = ()
    #: ``reason`` is a destination's complete refusal of a schema change (it names the table,
    #: the columns and what to do): shown as it is
    advised: bool = False


@dataclass(frozen=True)
class UnitSettled(UnitEvent):
    """The engine left the unit: ``result`` is its ``twice.engine.executor.UnitResult``."""

    outcome: str
    result: Any = field(default=None, compare=False, repr=False)


Event = AttemptStarted | AttemptFinished | Reconciled | OutputVerified | OutputRejected | (
    UnitSettled
)
Listener = Callable[[Event], None]
