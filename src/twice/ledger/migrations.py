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

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Table, func, insert, inspect, select, text
from sqlalchemy.engine import Connection

from twice.ledger import schema
from twice.ledger.engine import is_postgres
from twice.ledger.errors import SchemaVersionError

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
)
LATEST_VERSION: int = MIGRATIONS[-1].version


def read_version(conn: Connection) -> int:
    """The applied schema version; 0 for a database the ledger never touched."""
    if not inspect(conn).has_table(schema.schema_versions.name):
        return 0
    version = conn.execute(select(func.max(schema.schema_versions.c.version))).scalar()
    return int(version or 0)


def migrate(conn: Connection, *, now: datetime, label: str) -> int:
    """Bring the schema to ``LATEST_VERSION`` inside the caller's write transaction.

    ``label`` (the masked URL) names the ledger in the refusal message.
    """
    if is_postgres(conn):
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
    version = read_version(conn)
    if version > LATEST_VERSION:
        raise SchemaVersionError(
            f"ledger schema version {version} is newer than this twice "
            f"(knows {LATEST_VERSION}); upgrade twice (ledger {label})"
        )
    if version == 0:
        schema.schema_versions.create(conn, checkfirst=True)
    for step in MIGRATIONS[version:]:
        step.apply(conn)
        conn.execute(
            insert(schema.schema_versions).values(
                version=step.version, description=step.description, applied_at=now
            )
        )
    return LATEST_VERSION
