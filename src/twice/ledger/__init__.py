"""The durable ledger: every unit of work, attempt, observation, error, job generation,
fingerprint, decision, lease and pool-slot holding, in SQLite (embedded) or PostgreSQL (shared).

Operators decide from what the ledger recorded, so it refuses invalid evidence (future
observation times, unknown vocabulary, a second job generation before the first is confirmed
failed) instead of storing it. SQLAlchemy is imported only by this package::

    from twice.ledger import Ledger

    with Ledger.open("sqlite:///twice-ledger.db") as ledger:
        ledger.record_unit(uow)
        lease = ledger.acquire_lease(uow.uow_id, holder="worker-1", ttl_seconds=300)
"""

from __future__ import annotations

from twice.core.outcomes import (
    ATTEMPT_OUTCOMES,
    ERROR_CLASSIFICATIONS,
    FINISH_OUTCOMES,
    AttemptOutcome,
    ErrorClassification,
)
from twice.ledger.adoptions import AdoptionRecord
from twice.ledger.errors import (
    LedgerCommitUnknownError,
    LedgerDamagedError,
    LedgerError,
    LedgerStorageError,
    LedgerUnavailableError,
    SchemaVersionError,
    UnknownUnitError,
)
from twice.ledger.migrations import LATEST_VERSION, MIGRATIONS, Migration
from twice.ledger.reader import LedgerReader
from twice.ledger.records import (
    DECISIONS,
    EVENT_KINDS,
    GENERATION_STATES,
    INTERMEDIATE_ACTIONS,
    INTERMEDIATE_STATUSES,
    LEASE_SOURCE,
    LEASE_TAKEOVER_STATE,
    OPERATOR_SOURCE_PREFIX,
    RESOLUTION_OUTCOMES,
    RESOLUTION_STATES,
    RESOLVED_ATTEMPT_OUTCOME,
    RESOLVED_FAILED_AFTER_ACTING_STATE,
    RESOLVED_FAILED_STATE,
    RESOLVED_SUCCEEDED_STATE,
    AttemptRecord,
    DecisionName,
    DecisionRecord,
    ErrorRecord,
    EventKind,
    FingerprintDiff,
    FingerprintRecord,
    GenerationState,
    IntermediateAction,
    IntermediateEvent,
    IntermediateRecord,
    IntermediateStatus,
    JobGenerationRecord,
    LeaseRecord,
    LeaseResult,
    NonfatalErrorRecord,
    ObservationRecord,
    PoolHolding,
    ResolutionOutcome,
    ResolutionRecord,
    TimelineEvent,
    UnitRecord,
    operator_source,
    resolution_outcome,
)
from twice.ledger.store import Clock, Ledger

__all__ = [
    "ATTEMPT_OUTCOMES",
    "DECISIONS",
    "ERROR_CLASSIFICATIONS",
    "EVENT_KINDS",
    "FINISH_OUTCOMES",
    "GENERATION_STATES",
    "INTERMEDIATE_ACTIONS",
    "INTERMEDIATE_STATUSES",
    "LATEST_VERSION",
    "LEASE_SOURCE",
    "LEASE_TAKEOVER_STATE",
    "MIGRATIONS",
    "OPERATOR_SOURCE_PREFIX",
    "RESOLUTION_OUTCOMES",
    "RESOLUTION_STATES",
    "RESOLVED_ATTEMPT_OUTCOME",
    "RESOLVED_FAILED_AFTER_ACTING_STATE",
    "RESOLVED_FAILED_STATE",
    "RESOLVED_SUCCEEDED_STATE",
    "AdoptionRecord",
    "AttemptOutcome",
    "AttemptRecord",
    "Clock",
    "DecisionName",
    "DecisionRecord",
    "ErrorClassification",
    "ErrorRecord",
    "EventKind",
    "FingerprintDiff",
    "FingerprintRecord",
    "GenerationState",
    "IntermediateAction",
    "IntermediateEvent",
    "IntermediateRecord",
    "IntermediateStatus",
    "JobGenerationRecord",
    "LeaseRecord",
    "LeaseResult",
    "Ledger",
    "LedgerCommitUnknownError",
    "LedgerDamagedError",
    "LedgerError",
    "LedgerReader",
    "LedgerStorageError",
    "LedgerUnavailableError",
    "Migration",
    "NonfatalErrorRecord",
    "ObservationRecord",
    "PoolHolding",
    "ResolutionOutcome",
    "ResolutionRecord",
    "SchemaVersionError",
    "TimelineEvent",
    "UnitRecord",
    "UnknownUnitError",
    "operator_source",
    "resolution_outcome",
]
