"""The ledger's tables (SQLAlchemy Core), shared by SQLite and PostgreSQL.

Every event the ledger records gets a row in ``twice_events``, the append-only journal: its
``seq`` is the ledger-wide recording order, so a timeline sorts by time and then by ``seq``
even when a frozen clock gives several events the same instant. Detail tables (observations,
errors, decisions, ...) use that ``seq`` as their primary key.

Timestamps go through :class:`UTCDateTime`: ``timestamptz`` on PostgreSQL, fixed-width
ISO-8601 text with ``+00:00`` on SQLite (so text order is time order), aware UTC on read.

This module describes the *current* schema. Creating or changing it is the job of
``twice.ledger.migrations``; a change here needs a new migration step there.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import SchemaItem
from sqlalchemy.types import TypeDecorator, TypeEngine

from twice.core.outcomes import ATTEMPT_OUTCOMES, ERROR_CLASSIFICATIONS
from twice.ledger.errors import LedgerError
from twice.ledger.records import (
    EVENT_KINDS,
    GENERATION_STATES,
    INTERMEDIATE_ACTIONS,
    INTERMEDIATE_STATUSES,
)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware instant stored as UTC; naive datetimes are refused, never guessed."""

    impl = String(32)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(DateTime(timezone=True))
        return dialect.type_descriptor(String(32))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise LedgerError(f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise LedgerError(f"naive datetime {value.isoformat()}: ledger times must be aware")
        if dialect.name == "postgresql":
            return value.astimezone(UTC)
        return _utc_text(value, value.fold)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:  # only if someone wrote the table by hand
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


@functools.lru_cache(maxsize=256)
def _utc_text(value: datetime, fold: int) -> str:
    """An aware instant as stored text, remembered: a unit's rows carry the same few instants
    (its clock readings) in dozens of columns. Keyed by the datetime and its ``fold``: two
    datetimes of one zone are equal whatever their fold, yet the wall time repeated when the
    clocks go back is two instants (PEP 495); otherwise equal aware datetimes are one instant."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _one_of(column: str, values: tuple[str, ...], name: str) -> CheckConstraint:
    allowed = ", ".join(f"'{value}'" for value in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=name)


# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
SeqType = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()


def _journal_seq() -> Column[int]:
    """A detail row's key: the ``seq`` of its journal entry."""
    return Column(
        "seq", SeqType, ForeignKey("twice_events.seq"), primary_key=True, autoincrement=False
    )


def _unit_ref(*, nullable: bool = False) -> Column[str]:
    return Column("uow_id", String(400), ForeignKey("twice_units_of_work.uow_id"),
                  nullable=nullable)

schema_versions = Table(
    "twice_schema",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("description", Text, nullable=False),
    Column("applied_at", UTCDateTime, nullable=False),
)

units = Table(
    "twice_units_of_work",
    metadata,
    Column("uow_id", String(400), primary_key=True),
    Column("pipeline", String(200), nullable=False),
    Column("task", String(200), nullable=False),
    # The identity strings exactly as UnitOfWork.identity() gives them (offset kept), so the
    # unit rebuilt from the ledger has the same uow_id and job ids.
    Column("interval_start", String(64), nullable=False),
    Column("interval_end", String(64), nullable=False),
    Column("input_partition", Text, nullable=False),
    Column("input_version", Text, nullable=False),
    Column("transform_version", Text, nullable=False),
    Column("destination", Text, nullable=False),
    # The same bounds as instants, for range queries and ordering.
    Column("interval_start_utc", UTCDateTime, nullable=False),
    Column("interval_end_utc", UTCDateTime, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_twice_units_pipeline_task", "pipeline", "task", "interval_start_utc"),
)

events = Table(
    "twice_events",
    metadata,
    Column("seq", SeqType, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    _unit_ref(nullable=True),
    Column("attempt", Integer, nullable=True),
    Column("at", UTCDateTime, nullable=False),
    Column("recorded_at", UTCDateTime, nullable=False),
    Column("summary", Text, nullable=False),
    Column("data", Text, nullable=False, default="{}"),
    _one_of("kind", EVENT_KINDS, "ck_twice_events_kind"),
    Index("ix_twice_events_uow_at", "uow_id", "at", "seq"),
)

attempts = Table(
    "twice_attempts",
    metadata,
    _unit_ref(),
    Column("number", Integer, nullable=False),
    Column("holder", String(400), nullable=False),
    Column("generation", Integer, nullable=True),
    Column("job_id", String(1024), nullable=True),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("outcome", String(24), nullable=False),
    Column("started_seq", SeqType, ForeignKey("twice_events.seq"), nullable=False),
    Column("finished_seq", SeqType, ForeignKey("twice_events.seq"), nullable=True),
    PrimaryKeyConstraint("uow_id", "number", name="pk_twice_attempts"),
    CheckConstraint("number >= 1", name="ck_twice_attempts_number"),
    _one_of("outcome", ATTEMPT_OUTCOMES, "ck_twice_attempts_outcome"),
)


def _attempt_fk(table: str) -> ForeignKeyConstraint:
    # A NULL attempt is not checked (MATCH SIMPLE), a given one must exist.
    return ForeignKeyConstraint(
        ["uow_id", "attempt"],
        ["twice_attempts.uow_id", "twice_attempts.number"],
        name=f"fk_{table}_attempt",
    )


def _evidence(name: str, *items: SchemaItem) -> Table:
    """A journaled detail table about one unit of work: the entry's ``seq``, the unit and its
    attempt, the table's own ``items``, when it was recorded and a JSON ``detail``."""
    columns = [item for item in items if isinstance(item, Column)]
    return Table(
        name,
        metadata,
        _journal_seq(),
        _unit_ref(),
        Column("attempt", Integer, nullable=True),
        *columns,
        Column("recorded_at", UTCDateTime, nullable=False),
        Column("detail", Text, nullable=False, default="{}"),
        *[item for item in items if not isinstance(item, Column)],
    )


observations = _evidence(
    "twice_observations",
    Column("state", String(200), nullable=False),
    Column("source", String(200), nullable=False),
    Column("observed_at", UTCDateTime, nullable=False),
    _attempt_fk("twice_observations"),
    Index("ix_twice_observations_uow", "uow_id", "observed_at", "seq"),
)

errors = _evidence(
    "twice_errors",
    Column("error_class", String(400), nullable=False),
    Column("message", Text, nullable=False),
    Column("classification", String(16), nullable=False),
    _attempt_fk("twice_errors"),
    _one_of("classification", ERROR_CLASSIFICATIONS, "ck_twice_errors_classification"),
    Index("ix_twice_errors_uow", "uow_id", "seq"),
)

nonfatal_errors = _evidence(
    "twice_nonfatal_errors",
    Column("message", Text, nullable=False),
    Column("count", BigInteger, nullable=False),
    _attempt_fk("twice_nonfatal_errors"),
    CheckConstraint("count >= 1", name="ck_twice_nonfatal_errors_count"),
    Index("ix_twice_nonfatal_errors_uow", "uow_id", "seq"),
)

job_generations = Table(
    "twice_job_generations",
    metadata,
    _unit_ref(),
    Column("generation", Integer, nullable=False),
    Column("job_id", String(1024), nullable=False),
    Column("state", String(24), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("seq", SeqType, ForeignKey("twice_events.seq"), nullable=False),
    PrimaryKeyConstraint("uow_id", "generation", name="pk_twice_job_generations"),
    UniqueConstraint("job_id", name="uq_twice_job_generations_job_id"),
    CheckConstraint("generation >= 1", name="ck_twice_job_generations_generation"),
    _one_of("state", GENERATION_STATES, "ck_twice_job_generations_state"),
)

fingerprints = Table(
    "twice_fingerprints",
    metadata,
    _journal_seq(),
    Column("destination", Text, nullable=False),
    Column("partition", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("row_count", BigInteger, nullable=False),
    Column("checksum", Text, nullable=False),
    _unit_ref(nullable=True),
    Column("attempt", Integer, nullable=True),
    Column("columns", Text, nullable=True),
    Column("algorithm", String(64), nullable=True),
    Column("schema_signature", Text, nullable=True),
    Column("recorded_at", UTCDateTime, nullable=False),
    UniqueConstraint("destination", "partition", "version", name="uq_twice_fingerprints_version"),
    _attempt_fk("twice_fingerprints"),
    CheckConstraint("version >= 1", name="ck_twice_fingerprints_version"),
    CheckConstraint("row_count >= 0", name="ck_twice_fingerprints_row_count"),
)

# No attempt foreign key: a not-started decision names an attempt number that does not exist.
decisions = _evidence(
    "twice_decisions",
    Column("not_started", Boolean, nullable=False, default=False),
    Column("decision", String(64), nullable=False),
    Column("reason", Text, nullable=False),
    Column("as_of", UTCDateTime, nullable=False),
    Index("ix_twice_decisions_uow", "uow_id", "seq"),
)

leases = Table(
    "twice_leases",
    metadata,
    Column("uow_id", String(400), ForeignKey("twice_units_of_work.uow_id"), primary_key=True),
    Column("holder", String(400), nullable=False),
    # Fencing token: from the ledger-wide counter (version 3); per-unit before that.
    Column("token", BigInteger, nullable=False),
    Column("acquired_at", UTCDateTime, nullable=False),
    Column("renewed_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("released_at", UTCDateTime, nullable=True),
)

pool_holdings = Table(
    "twice_pool_holdings",
    metadata,
    Column("id", SeqType, primary_key=True, autoincrement=True),
    Column("pool", String(200), nullable=False),
    Column("holder", String(400), nullable=False),
    Column("slots", Integer, nullable=False),
    Column("capacity", Integer, nullable=False),
    Column("acquired_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("released_at", UTCDateTime, nullable=True),
    CheckConstraint("slots >= 1 AND slots <= capacity", name="ck_twice_pool_holdings_slots"),
    Index("ix_twice_pool_holdings_pool", "pool", "released_at", "expires_at"),
)

# Rows that PostgreSQL transactions lock (SELECT ... FOR UPDATE) to serialise writers of one
# pool or one fingerprinted partition; SQLite serialises every writer with BEGIN IMMEDIATE.
locks = Table(
    "twice_locks",
    metadata,
    Column("kind", String(32), nullable=False),
    Column("name", Text, nullable=False),
    PrimaryKeyConstraint("kind", "name", name="pk_twice_locks"),
)

# -- version 2: the catalog of materialized intermediates (twice.engine.intermediates)
# ---------------

# One row per (name, version): where the result is stored, who owns it, how long it is kept,
# the fingerprint it had when written and what computing it cost (measured). Rows are kept
# after they are superseded or expired, as evidence of what was stored when.
intermediates = Table(
    "twice_intermediates",
    metadata,
    Column("name", String(200), nullable=False),
    Column("version", String(64), nullable=False),
    _unit_ref(),
    Column("owner", String(200), nullable=False),
    Column("retention_seconds", BigInteger, nullable=False),
    Column("location", Text, nullable=False),
    Column("partition", Text, nullable=False),
    Column("identity", Text, nullable=False),
    Column("columns", Text, nullable=False),
    Column("algorithm", String(64), nullable=False),
    Column("row_count", BigInteger, nullable=False),
    Column("checksum", Text, nullable=False),
    Column("bytes_stored", BigInteger, nullable=False),
    Column("compute_seconds", Float, nullable=False),
    Column("bytes_scanned", BigInteger, nullable=True),
    Column("verify_seconds", Float, nullable=False, default=0.0),
    Column("materializations", Integer, nullable=False, default=1),
    Column("reuse_count", Integer, nullable=False, default=0),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("last_reused_at", UTCDateTime, nullable=True),
    Column("status", String(16), nullable=False),
    Column("status_reason", Text, nullable=False),
    Column("status_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("name", "version", name="pk_twice_intermediates"),
    CheckConstraint("owner <> ''", name="ck_twice_intermediates_owner"),
    CheckConstraint("retention_seconds >= 1", name="ck_twice_intermediates_retention"),
    CheckConstraint("row_count >= 0", name="ck_twice_intermediates_row_count"),
    CheckConstraint("bytes_stored >= 0", name="ck_twice_intermediates_bytes_stored"),
    CheckConstraint("reuse_count >= 0", name="ck_twice_intermediates_reuse_count"),
    _one_of("status", INTERMEDIATE_STATUSES, "ck_twice_intermediates_status"),
    Index("ix_twice_intermediates_location", "location", "partition", "status"),
)

# What happened to each intermediate, in recording order: materialized, reused (with the
# fingerprint evidence), refused (and why), recomputed, superseded, expired. A table of its own
# rather than ``twice_events`` rows: that journal's kind constraint is part of version 1.
intermediate_events = Table(
    "twice_intermediate_events",
    metadata,
    Column("seq", SeqType, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("version", String(64), nullable=False),
    Column("action", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("detail", Text, nullable=False, default="{}"),
    ForeignKeyConstraint(
        ["name", "version"],
        ["twice_intermediates.name", "twice_intermediates.version"],
        name="fk_twice_intermediate_events_entry",
    ),
    _one_of("action", INTERMEDIATE_ACTIONS, "ck_twice_intermediate_events_action"),
    Index("ix_twice_intermediate_events_entry", "name", "version", "seq"),
)

# -- version 3: ledger-wide fencing tokens for leases ---------------------------------------

# Lease tokens are fencing tokens compared across units of work writing the same slot, so they
# come from one ledger-wide counter, never per unit. SQLite keeps it in this one-row-per-counter
# table (every write transaction holds the database write lock, so an UPDATE ... RETURNING is
# race-free); PostgreSQL uses the sequence below instead and has no such table.
counters = Table(
    "twice_counters",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)
#: ``twice_counters`` row (SQLite) holding the last lease token handed out.
LEASE_TOKEN_COUNTER = "lease-token"
#: PostgreSQL sequence of lease tokens (``CACHE 1``: values are handed out in order).
LEASE_TOKEN_SEQUENCE = "twice_lease_tokens"

# -- version 4: the ledger's identity ------------------------------------------------------

# One row, made once when the ledger is created (or migrated to version 4): a random id that
# every owned write stamps into its commit record, so a destination refuses another ledger's
# writes (twice.destinations.commits.check_ledger). It never changes: a copy of the ledger
# (a backup restored) keeps it and so keeps its destinations.
identity = Table(
    "twice_ledger",
    metadata,
    Column("identity", String(64), primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
)

# Each ``twice adopt``: a destination made to belong to this ledger, by whom and why (the
# destination keeps the matching ``adopt`` commit record).
adoptions = Table(
    "twice_adoptions",
    metadata,
    Column("seq", SeqType, primary_key=True, autoincrement=True),
    Column("destination", Text, nullable=False),
    Column("previous", String(64), nullable=False),  # the ledger it belonged to ("": none)
    Column("previous_at", Text, nullable=False),  # where that ledger was, masked ("": unknown)
    Column("token", BigInteger, nullable=False),
    Column("operator", String(200), nullable=False),
    Column("note", Text, nullable=False),
    Column("adopted_at", UTCDateTime, nullable=False),
)

#: The schema version that introduced each table; tables not listed are version 1.
INTRODUCED_IN: dict[str, int] = {
    intermediates.name: 2,
    intermediate_events.name: 2,
    counters.name: 3,
    identity.name: 4,
    adoptions.name: 4,
}
