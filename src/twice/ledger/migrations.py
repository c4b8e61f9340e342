"""Schema versions as ordered migration steps, applied when a ledger is opened.

``twice_schema`` has one row per applied step; the schema version is the highest. Opening a
ledger applies the missing steps in one transaction (DDL is transactional on both engines),
under the SQLite write lock or a PostgreSQL advisory lock, so workers starting together do
not race to create tables. A ledger newer than this code is refused: older code writing into
a schema it does not understand could lose or misread evidence.

To change the schema: append a ``Migration(version=N + 1, ...)`` whose step alters existing
databases, and change ``schema.py`` to match. Step 1 builds the version-1 tables from
``schema.py``; before a later step alters one of them, copy that table's version-1 definition
into step 1 so fresh databases still replay every step (the tests migrate from empty). A
table added by a later step is listed in ``schema.INTRODUCED_IN`` so step 1 leaves it alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Table, func, insert, inspect, select, text
from sqlalchemy.engine import Connection

from twice.ledger import schema
from twice.ledger.engine import is_postgres
from twice.ledger.errors import LedgerDamagedError, LedgerError, SchemaVersionError

# pg_advisory_xact_lock key: the bytes of "twice" as an integer, unlikely to clash.
_MIGRATION_LOCK_KEY = int.from_bytes(b"twice", "big")


@dataclass(frozen=True)
class Migration:
    """One step from ``version - 1`` to ``version``."""

    version: int
    description: str
    apply: Callable[[Connection], None]


def _tables_of(version: int) -> list[Table]:
    """The tables ``schema.py`` describes that step ``version`` creates (dependency order)."""
    return [
        table
        for table in schema.metadata.sorted_tables
        if table is not schema.schema_versions
        and schema.INTRODUCED_IN.get(table.name, 1) == version
    ]


def _create_version_1(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=_tables_of(1))


def _create_intermediates_catalog(conn: Connection) -> None:
    schema.metadata.create_all(conn, tables=_tables_of(2))


def _create_fencing_counter(conn: Connection) -> None:
    """One ledger-wide counter of lease tokens, starting above every token already handed out
    (existing leases keep theirs). PostgreSQL: a sequence, so acquisitions of different units
    never queue on one counter row; SQLite: a counter row, its writers being serialised anyway.
    """
    top = int(conn.execute(select(func.coalesce(func.max(schema.leases.c.token), 0))).scalar_one())
    if is_postgres(conn):
        name = schema.LEASE_TOKEN_SEQUENCE
        conn.execute(text(
            f"CREATE SEQUENCE IF NOT EXISTS {name} AS BIGINT MINVALUE 1 START WITH 1 CACHE 1 "
            "NO CYCLE"
        ))
        conn.execute(text("SELECT setval(:name, :next, false)"), {"name": name, "next": top + 1})
        return
    schema.metadata.create_all(conn, tables=[schema.counters])
    conn.execute(insert(schema.counters).values(name=schema.LEASE_TOKEN_COUNTER, value=top))


def _create_identity(conn: Connection) -> None:
    """The ledger's identity: a random id, made once (``schema.identity``); and the record
    of adoptions (``schema.adoptions``)."""
    schema.metadata.create_all(conn, tables=_tables_of(4))
    conn.execute(insert(schema.identity).values(
        identity=uuid.uuid4().hex, created_at=datetime.now(UTC)))


def read_identity(conn: Connection) -> str | None:
    """The ledger's identity; None before schema version 4 (a ledger read without migrating)."""
    if not inspect(conn).has_table(schema.identity.name):
        return None
    value = conn.execute(select(schema.identity.c.identity)).scalar()
    return None if value is None else str(value)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "units of work, attempts, observations, errors, job generations, fingerprints, "
        "decisions, leases, pool holdings, event journal",
        _create_version_1,
    ),
    Migration(
        2,
        "catalog of materialized intermediates and their history",
        _create_intermediates_catalog,
    ),
    Migration(
        3,
        "ledger-wide fencing tokens for leases (a counter above every existing token)",
        _create_fencing_counter,
    ),
    Migration(
        4,
        "the ledger's identity (a random id destinations check owned writes against) and "
        "its adoptions of destinations",
        _create_identity,
    ),
)
LATEST_VERSION: int = MIGRATIONS[-1].version


def read_version(conn: Connection) -> int:
    """The applied schema version; 0 for a database the ledger never touched."""
    if not inspect(conn).has_table(schema.schema_versions.name):
        return 0
    version = conn.execute(select(func.max(schema.schema_versions.c.version))).scalar()
    return int(version or 0)


def _refuse_newer(version: int, label: str) -> None:
    if version > LATEST_VERSION:
        raise SchemaVersionError(
            f"ledger schema version {version} is newer than this twice "
            f"(knows {LATEST_VERSION}); upgrade twice (ledger {label})"
        )


def check_readable(conn: Connection, *, label: str) -> int:
    """The schema version of a ledger opened read-only (nothing is migrated).

    An older schema is fine to read (later steps only add tables the readers do not need); a
    newer one is refused as when writing, and a database without ledger tables is not a ledger.
    """
    version = read_version(conn)
    if version == 0:
        raise LedgerError(
            f"{label} is not a twice ledger (it has no {schema.schema_versions.name} table) and "
            "cannot be created: it was opened read-only"
        )
    _refuse_newer(version, label)
    check_complete(conn, version, label=label)
    return version


def check_complete(conn: Connection, version: int, *, label: str) -> None:
    """Refuse a ledger missing a table its schema version has (dropped by hand, a partial
    restore): opened anyway, every run would fail on the missing table and leave its unit
    unknown, while the reports read what is left and say nothing. Nothing is recreated: the
    evidence that table held is gone, and restoring a backup is the operator's call."""
    present = set(inspect(conn).get_table_names())
    expected = [schema.schema_versions.name] + [
        table.name for table in schema.metadata.sorted_tables
        if table is not schema.schema_versions
        and schema.INTRODUCED_IN.get(table.name, 1) <= version
        and not (table is schema.counters and is_postgres(conn))  # a sequence there
    ]
    missing = [name for name in expected if name not in present]
    if missing:
        more = f" (and {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise LedgerDamagedError(
            f"ledger {label} is damaged: table {missing[0]} is missing (schema version "
            f"{version} has it){more}; restore the ledger from a backup, or move it aside "
            "to start a new one (twice recreates nothing: what the table held is gone)"
        )


def migrate(conn: Connection, *, now: datetime, label: str) -> int:
    """Bring the schema to ``LATEST_VERSION`` inside the caller's write transaction.

    ``label`` (the masked URL) names the ledger in the refusal message.
    """
    if is_postgres(conn):
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
    version = read_version(conn)
    _refuse_newer(version, label)
    if version == 0:
        schema.schema_versions.create(conn, checkfirst=True)
    for step in MIGRATIONS[version:]:
        step.apply(conn)
        conn.execute(
            insert(schema.schema_versions).values(
                version=step.version, description=step.description, applied_at=now
            )
        )
    check_complete(conn, LATEST_VERSION, label=label)
    return LATEST_VERSION
