"""``LedgerReader``: what reading a ledger needs, for code that must never write to it.

Reports, ``twice status`` / ``explain`` / ``report`` / ``update`` / ``handover`` and the
planner's evidence gathering only read; typing them against this protocol instead of ``Ledger``
keeps a write from slipping in, and lets them read any object that answers these methods.
``Ledger`` implements it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from twice.ledger.history import History
from twice.ledger.records import (
    AttemptRecord,
    DecisionRecord,
    ErrorRecord,
    FingerprintDiff,
    FingerprintRecord,
    JobGenerationRecord,
    NonfatalErrorRecord,
    ObservationRecord,
    ResolutionRecord,
    TimelineEvent,
    UnitRecord,
)


class LedgerReader(Protocol):
    """The read methods of ``Ledger`` that reports and the read-only commands use."""

    @property
    def url(self) -> str:
        """The ledger's URL with any password masked."""
        ...

    def now(self) -> datetime: ...

    def snapshot(self) -> AbstractContextManager[LedgerReader]: ...

    def unit(self, uow_id: str) -> UnitRecord | None: ...

    def history(self, uow_id: str) -> History:
        """The unit, its attempts, observations and decisions, read together."""
        ...

    def units(
        self, *, pipeline: str | None = None, task: str | None = None,
        starting: datetime | None = None,
    ) -> list[UnitRecord]: ...

    def attempts(self, uow_id: str) -> list[AttemptRecord]: ...

    def latest_attempt(self, uow_id: str) -> AttemptRecord | None: ...

    def observations(self, uow_id: str) -> list[ObservationRecord]: ...

    def errors(self, uow_id: str) -> list[ErrorRecord]: ...

    def nonfatal_errors(self, uow_id: str) -> list[NonfatalErrorRecord]: ...

    def decisions(self, uow_id: str) -> list[DecisionRecord]: ...

    def job_generations(self, uow_id: str) -> list[JobGenerationRecord]: ...

    def resolutions(self, uow_id: str) -> list[ResolutionRecord]: ...

    def fingerprints(self, destination: str, partition: str) -> list[FingerprintRecord]: ...

    def latest_fingerprints(self, destination: str | None = None) -> list[FingerprintRecord]: ...

    def fingerprint_diff(
        self, destination: str, partition: str, version: int | None = None
    ) -> FingerprintDiff | None: ...

    def timeline(self, uow_id: str) -> list[TimelineEvent]: ...

    def timelines(self, uow_ids: Sequence[str]) -> dict[str, list[TimelineEvent]]: ...
