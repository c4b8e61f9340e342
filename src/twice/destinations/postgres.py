"""PostgreSQL destinations: ``postgresql://user@host:5432/db#schema.table``.

Rows travel by ``COPY ... FROM STDIN (FORMAT csv)`` through psycopg 3's ``cursor.copy``, the CSV
rendered by Arrow's C++ writer batch by batch (no per-row Python). ``replace_partition`` runs
``LOCK TABLE ... IN SHARE ROW EXCLUSIVE MODE`` first: concurrent replacers of the same table
queue instead of interleaving (under READ COMMITTED two delete+insert transactions on the same
slice could otherwise both insert), while readers (ACCESS SHARE) are never blocked and keep
seeing the old slice until commit. ``upsert`` copies into a temporary table and merges with
``INSERT ... SELECT ... ON CONFLICT``.

Commit records of stamped writes (see :mod:`twice.destinations.commits`) go to
``<schema>.twice_commits``, in the destination table's own schema (the writer can create
tables there, and the records live and die with the data), in the write's transaction.

Fingerprints run as one aggregate query, except over float columns: PostgreSQL's shortest float
text is not twice's (``1.9999999999999998e+23`` for ``2e+23``, a tie its algorithm excludes), so
the other columns' canonical text is computed in the database and streamed with the float values
in binary (exact), and the rows are hashed in Python
(``twice.destinations.fingerprint.streamed_sql``).
"""

from __future__ import annotations

import io
import itertools
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlencode, urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.csv as pacsv

from twice.core.extras import require
from twice.core.secrets import public_spec, redact
from twice.destinations.base import (
    COMMIT_INDEXES,
    DestinationSpec,
    SchemaMoved,
    SqlDestination,
    SqlDialect,
    split_table_name,
)
from twice.destinations.columns import ColumnType, Schema, schema_of
from twice.destinations.commits import COMMITS_TABLE, WriteStamp
from twice.destinations.errors import (
    DestinationCommitUnknownError,
    DestinationError,
    DestinationSpecError,
    DestinationUnavailableError,
    driver_said,
)
from twice.destinations.idle_connections import IdleConnections, quiet_socket

if TYPE_CHECKING:
    import psycopg
else:  # imported when a postgresql:// destination is opened (this module is imported then)
    psycopg = require("psycopg", extra="postgres", who="postgresql:// destinations")

#: (database, commits table) whose indexes this process has made sure of (``COMMIT_INDEXES``).
_COMMITS_INDEXED: set[tuple[str, str]] = set()

#: (connection string, table) -> the table's columns as the last replace of it in this process
#: saw them under its lock (``_known_schema``), for the next one to conform its rows to.
_KNOWN_SCHEMAS: dict[tuple[str, str], Schema] = {}
_KNOWN_SCHEMAS_KEPT = 256

_COPY_BATCH_ROWS = 65_536
#: Connections handed back by closed destinations, for the next unit (see idle_connections).
IDLE: IdleConnections[psycopg.Connection[Any]] = IdleConnections(
    quiet_socket(lambda conn: conn.pgconn.socket), lambda conn: conn.close())
#: What the server raises when it rolls a transaction back on its own, a deadlock's victim or a
#: serialization failure (even at COMMIT): nothing landed, and running the write again is the
#: remedy (PostgreSQL's documentation, "Serialization Failure Handling"). The rest of SQLSTATE
#: class 40 is not: 40002 (a deferred constraint failed at commit) fails again, 40003 is unknown.
ROLLED_BACK = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
#: How long a writer waits for an advisory lock another writer of the same slot holds.
ADVISORY_WAIT_SECONDS = 300.0
_STREAM_BATCH_ROWS = 10_000
_CLOCK_SQL = ("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', "
              "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
_TYPES = {
    "smallint": "integer", "integer": "integer", "bigint": "integer", "boolean": "boolean",
    "text": "string", "character varying": "string", "character": "string", "bytea": "binary",
    "date": "date", "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz", "real": "float", "double precision": "float",
}

# Whether a relation (parameters: its schema, its name) exists, as this statement's snapshot
# sees it: read from pg_class itself (``PostgresDestination._table_exists`` says why).
_EXISTS_SQL = ("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace "
               "n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s)")

# The table's (or view's) columns, in order; a domain as its base type. Relations that
# information_schema.columns lists: tables, views, foreign and partitioned tables.
_SCHEMA_SQL = (
    "SELECT a.attname, "
    "format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END, NULL), "
    "CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END "
    "FROM pg_catalog.pg_attribute a "
    "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
    "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
    "WHERE a.attrelid = to_regclass(%s) AND c.relkind IN ('r', 'v', 'f', 'p') "
    "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)


def _numeric_precision(modifier: int | None) -> tuple[int | None, int | None]:
    """(precision, scale) of a ``numeric`` type modifier (None, None without one); the scale
    is an 11-bit signed field since PostgreSQL 15."""
    if modifier is None or modifier < 4:
        return None, None
    packed = modifier - 4
    scale = packed & 0x7FF
    return (packed >> 16) & 0xFFFF, scale - 0x800 if scale & 0x400 else scale


class PostgresDialect(SqlDialect):
    name = "postgresql"
    placeholder = "%s"
    unit_separator = "chr(31)"

    ddl_types: ClassVar[dict[str, str]] = {
        "integer": "bigint", "float": "double precision", "boolean": "boolean", "string": "text",
        "binary": "bytea", "date": "date", "timestamp": "timestamp",
        "timestamptz": "timestamptz",
    }
    decimal_ddl = "numeric({precision},{scale})"
    alter_type_sql = ("ALTER TABLE {table} ALTER COLUMN {column} TYPE {type} "
                      "USING {column}::{type}")

    # to_char, not ::text: the text output of dates and timestamps follows DateStyle.
    text_sql: ClassVar[dict[str, str]] = {
        "date": "to_char({value}, 'YYYY-MM-DD')",
        "timestamp": "to_char({value}, 'YYYY-MM-DD HH24:MI:SS.US')",
        "timestamptz": "(to_char({value} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || 'Z')",
        "binary": "encode({value}, 'hex')",
    }
    default_text_sql = "({value})::text"

    def hash60_sql(self, text_sql: str) -> str:
        # md5(), not hashtext(): hashtext is internal and has changed between major versions.
        return f"('x' || substr(md5({text_sql}), 1, 15))::bit(60)::bigint"


class PostgresDestination(SqlDestination["psycopg.Connection[Any]"]):
    engine = "postgresql"
    dialect = PostgresDialect()
    idle_connections = IDLE

    def __init__(self, conninfo: str, *, spec: str, table: str, **kwargs: Any) -> None:
        super().__init__(spec=spec, table=table, **kwargs)
        self._conninfo = conninfo
        self._copy_settings_in_write = False  # see _lock_fence
        self._commits_seen_in_write: bool | None = None  # see _lock_fence
        self._clock_in_write: str | None = None  # see _lock_for_replace

    def _connect(self) -> psycopg.Connection[Any]:
        kept = IDLE.take(self._idle_key())
        if kept is not None:
            return kept
        try:
            return psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            # libpq may echo the connection string it could not parse: mask it.
            raise DestinationUnavailableError(
                f"{self.spec}: cannot connect{self._whom()}: {redact(str(exc).strip())}"
            ) from None

    def _idle(self, conn: psycopg.Connection[Any]) -> bool:
        return not conn.closed and \
            conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    def _idle_key(self) -> str:
        return self._conninfo

    def _whom(self) -> str:
        """`` to database D as user U on H:P``, as far as the spec says (libpq's defaults
        apply to the rest); never the password."""
        try:
            said = psycopg.conninfo.conninfo_to_dict(self._conninfo)
        except psycopg.Error:
            return ""
        parts = [f" to database {said['dbname']}" if said.get("dbname") else "",
                 f" as user {said['user']}" if said.get("user") else "",
                 f" on {said['host']}:{said.get('port') or 5432}" if said.get("host") else ""]
        return redact("".join(str(part) for part in parts))

    def _usable(self, conn: psycopg.Connection[Any]) -> bool:
        return not conn.closed

    def schema(self) -> Schema | None:
        """Read from the catalog itself (``pg_attribute``): ``information_schema.columns`` is
        a view over it that takes several milliseconds a call, and a write reads the schema
        two or three times. Names and precisions as the information schema gives them: a
        domain column as its base type, ``numeric(p, s)`` from the type modifier."""
        return _schema_of(self._query(_SCHEMA_SQL, [self._in_schema(self.table)]))

    def _schema_sql_of_table(self) -> psycopg.sql.Composed:
        """``_SCHEMA_SQL`` of this table with its name as a literal (for a batch of several
        statements, which the simple protocol sends without parameters)."""
        from psycopg import sql

        return sql.SQL(_SCHEMA_SQL.replace("%s", "{}")).format(
            sql.Literal(self._in_schema(self.table)))

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        sent = False  # the block ended: what fails now is the COMMIT
        try:
            with self.connection.transaction(), self.connection.cursor() as cur:
                try:
                    yield cur
                finally:  # what _lock_fence and _lock_for_replace read for this one
                    self._copy_settings_in_write = False
                    self._commits_seen_in_write = None
                    self._schema_in_write = None
                    self._clock_in_write = None
                sent = True
        except ROLLED_BACK as exc:  # before the OperationalError it is
            raise DestinationUnavailableError(
                f"{self.spec}: the server rolled the write back ({driver_said(exc)}); nothing "
                "landed, and it can run again") from exc
        except psycopg.OperationalError as exc:
            state = getattr(exc, "sqlstate", None)
            if sent and (state is None or state.startswith(("08", "57P"))):
                raise DestinationCommitUnknownError.of(
                    self.spec, "the connection was lost while committing the write", exc
                ) from exc
            raise

    def _execute(self, tx: psycopg.Cursor[Any], sql: str, params: Sequence[Any] = ()) -> int:
        tx.execute(sql, list(params) or None)
        return max(tx.rowcount, 0)

    def _advisory(self, tx: psycopg.Cursor[Any], key: str, *, bounded: bool = False) -> None:
        """Take the transaction-scoped advisory lock ``key``, waiting for another writer that
        holds it; ``bounded``: at most ``ADVISORY_WAIT_SECONDS``. The fence of one slot is
        bounded: only writers of that same slice contend for it, and a writer stopped inside
        its transaction (SIGSTOP, a paused VM) holds it until resumed or ended, so a takeover
        must not hang behind it for ever, renewing a lease nobody else can take. Locks that
        writers of different slices share (a new table's creation, keep_previous) are held
        for whole writes and are waited for as long as those take."""
        if not bounded:
            tx.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])
            return
        tx.execute(f"SET LOCAL lock_timeout = '{int(ADVISORY_WAIT_SECONDS * 1000)}ms'")
        try:
            tx.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])
        except psycopg.errors.LockNotAvailable:
            raise self._held_too_long(key) from None
        tx.execute("SET LOCAL lock_timeout TO DEFAULT")  # table locks wait as configured

    def _held_too_long(self, key: str) -> DestinationUnavailableError:
        return DestinationUnavailableError(
            f"{self.spec}: another writer held the lock of {key!r} for over "
            f"{ADVISORY_WAIT_SECONDS:g} s (a process stopped inside its write holds it "
            "until resumed or ended); not waiting longer"
        )

    def _lock_for_replace(self, tx: psycopg.Cursor[Any], *,
                          expected: Schema | None = None) -> None:
        """Lock the table against other replaces and any change of its columns, and read in
        the same round trip its columns (from here to the commit they cannot change, so the
        commit record's fingerprint reads them from this: ``_existing_schema``) and the clock
        the commit record is stamped with (``_clock``: the lock is held from then on, so
        records of one table still follow the order their writers held it in). The columns
        are kept for the next replace of the table in this process (``_known_schema``), and
        must equal ``expected`` when the write conformed its rows to those."""
        from psycopg import sql

        try:
            tx.execute(sql.SQL("; ").join([
                sql.SQL(f"LOCK TABLE {self.qualified} IN SHARE ROW EXCLUSIVE MODE"),
                self._schema_sql_of_table(), sql.SQL(_CLOCK_SQL)]), prepare=False)
        except psycopg.errors.UndefinedTable:
            _KNOWN_SCHEMAS.pop(self._known_key, None)
            if expected is None:
                raise
            raise SchemaMoved from None  # dropped since: read (and create) it again
        columns, ((clock,),) = _results(tx)
        self._schema_in_write, self._clock_in_write = _schema_of(columns), str(clock)
        if self._schema_in_write is None:
            _KNOWN_SCHEMAS.pop(self._known_key, None)
        else:
            _KNOWN_SCHEMAS[self._known_key] = self._schema_in_write
            while len(_KNOWN_SCHEMAS) > _KNOWN_SCHEMAS_KEPT:
                _KNOWN_SCHEMAS.pop(next(iter(_KNOWN_SCHEMAS)), None)
        if expected is not None and self._schema_in_write != expected:
            raise SchemaMoved

    def _known_schema(self) -> Schema | None:
        return _KNOWN_SCHEMAS.get(self._known_key)

    @property
    def _known_key(self) -> tuple[str, str]:
        return self._conninfo, self.qualified

    def _lock_fence(self, tx: psycopg.Cursor[Any], stamp: WriteStamp) -> None:
        """Serialise stamped writers of one (table, fence key), race-free.

        Under READ COMMITTED the fencing ``SELECT max(token)`` alone could run in two writers at
        once, both see no newer token, and both commit. A transaction-scoped advisory lock on
        (table, fence key) makes the second writer wait until the first commits; its SELECT,
        a later statement, then takes a snapshot that includes the first writer's record.
        Advisory rather than ``LOCK TABLE twice_commits``: it serialises only writers of the
        same slot in the same table (the only ones whose fencing decisions interact), not every
        stamped write in the schema, and it never blocks readers. ``SET TRANSACTION`` first
        (it must be the transaction's first statement): under REPEATABLE READ the snapshot
        would be taken before the wait, and the SELECT would miss the record.
        A hash collision only serialises two unrelated writers. The wait is bounded (see
        :meth:`_advisory`).

        The same round trip sets, for the rest of the write's transaction, the settings the
        fingerprint's COPY reads values back with (``_COPY_SETTINGS``; the write's own
        statements send and read nothing these change), so the commit record's fingerprint
        needs no savepoint or settings of its own. Last, whether ``twice_commits`` exists, for
        ``_create_commits_table`` next. One simple-protocol query of several statements: each
        is a round trip otherwise, and a small write is mostly round trips.
        """
        from psycopg import sql

        statements = sql.SQL("; ").join([
            sql.SQL("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"),
            sql.SQL("SET LOCAL lock_timeout = {}").format(
                sql.Literal(f"{int(ADVISORY_WAIT_SECONDS * 1000)}ms")),
            sql.SQL("SELECT pg_advisory_xact_lock(hashtextextended({}, 0))").format(
                sql.Literal(f"{COMMITS_TABLE}|{self.table_label}|{stamp.fence_key}")),
            sql.SQL("SET LOCAL lock_timeout TO DEFAULT"),
            _settings_sql(),
            # to_regclass for this first look (cheaper); a "no" stays cached for the rest of
            # the transaction, so the look again after the creation lock is _table_exists
            sql.SQL("SELECT to_regclass({}) IS NOT NULL").format(
                sql.Literal(self.commits_qualified)),
        ])
        try:
            tx.execute(statements, prepare=False)
        except psycopg.errors.LockNotAvailable:
            raise self._held_too_long(f"{COMMITS_TABLE}|{self.table_label}|{stamp.fence_key}"
                                      ) from None
        self._copy_settings_in_write = True
        self._commits_seen_in_write = bool(_results(tx)[-1][0][0])

    def _lock_claim(self, tx: psycopg.Cursor[Any]) -> None:
        """Writers of different slices hold different fence locks: two ledgers' first writes
        to a table nobody owns yet would both see no owner. Claimers (and adopters) queue
        here and read the owner again after the wait; writers of an owned table never take
        it."""
        self._advisory(tx, f"{COMMITS_TABLE}|{self.table_label}|claim")

    def _create_table(self, tx: psycopg.Cursor[Any], schema: Schema) -> None:
        """First writers of a new table queue on an advisory lock: two concurrent ``CREATE
        TABLE IF NOT EXISTS`` of one name can both pass the check and one then fails on the
        catalog's unique index (``pg_type_typname_nsp_index``). The second one in finds the
        table (committed by the first before it let go) and sends no DDL at all: ``CREATE
        INDEX IF NOT EXISTS`` of an existing index still takes SHARE on the table to the end
        of the transaction, which blocks the first writer's next writes while this one may
        wait for locks that writer holds (a deadlock, ``tests/destinations/
        test_postgres_late_creator.py``)."""
        self._advisory(tx, f"{self.qualified}|create")
        if not self._table_exists(self.table):
            super()._create_table(tx, schema)

    def _create_commits_table(self, tx: psycopg.Cursor[Any]) -> None:
        """Create ``twice_commits`` once: concurrent ``CREATE TABLE IF NOT EXISTS`` can fail
        on the catalog's unique index, so first writers take an advisory lock per schema, and
        one that finds it created meanwhile sends no DDL (see :meth:`_create_table`: every
        writer's commit record would wait for its SHARE lock). A table an earlier release
        created gets the indexes it lacks (``COMMIT_INDEXES``), once per process and
        database, under the same lock, each only if it is still missing then."""
        key = (self.spec.partition("#")[0], self.commits_qualified)
        lock = f"{COMMITS_TABLE}|create|{self.schema_name}"
        if not self._commits_table_exists():
            self._advisory(tx, lock)
            if not self._commits_table_found():
                super()._create_commits_table(tx)
                _COMMITS_INDEXED.add(key)
                return
        if key in _COMMITS_INDEXED:
            return
        if self._missing_commit_indexes():
            self._advisory(tx, lock)
            self._create_commit_indexes(tx, self._missing_commit_indexes())
        _COMMITS_INDEXED.add(key)

    def _missing_commit_indexes(self) -> list[str]:
        return [name for name in COMMIT_INDEXES if not self._table_exists(name)]

    def _commits_table_found(self) -> bool:
        """Whether ``twice_commits`` exists now (what this statement sees committed, see
        :meth:`_table_exists`)."""
        return self._table_exists(COMMITS_TABLE)

    def _lock_previous(self, tx: psycopg.Cursor[Any]) -> None:
        """keep_previous: writers of one table queue here (side tables, version numbers)."""
        self._advisory(tx, f"{self.qualified}|keep_previous")

    def _in_schema(self, name: str) -> str:
        """``name`` quoted and qualified by the destination's schema (``public`` by default)."""
        return f"{self.dialect.quote(self.schema_name or 'public')}.{self.dialect.quote(name)}"

    def _table_exists(self, name: str) -> bool:
        """Whether relation ``name`` exists in the destination's schema, committed as this
        statement sees it: read from ``pg_class`` itself, not by ``to_regclass``. A name
        lookup goes through the backend's catalog cache, which remembers a name it did not
        find for the rest of the transaction until it processes invalidations (taking a
        table lock does, an advisory lock does not): a writer that looked for
        ``twice_commits`` in its fence step, then waited for the creation lock while another
        writer created it, would still not find it (``test_postgres_late_creator.py``)."""
        ((found,),) = self._query(_EXISTS_SQL, [self.schema_name or "public", name])
        return bool(found)

    def _commits_table_exists(self) -> bool:
        """Read once by a write's ``_lock_fence``, for the ``_create_commits_table`` next."""
        seen, self._commits_seen_in_write = self._commits_seen_in_write, None
        return seen if seen is not None else self._commits_table_found()

    def _clock(self, tx: psycopg.Cursor[Any]) -> str:
        """The server's clock (``clock_timestamp()``: now, not the transaction's start), or
        the one ``_lock_for_replace`` read for this write's commit record."""
        read, self._clock_in_write = self._clock_in_write, None
        if read is not None:
            return read
        tx.execute(_CLOCK_SQL)
        row = tx.fetchone()
        assert row is not None
        return str(row[0])

    def _copy(self, tx: psycopg.Cursor[Any], target_sql: str, table: pa.Table) -> None:
        names = self._column_list(table.column_names)
        with tx.copy(f"COPY {target_sql} ({names}) FROM STDIN (FORMAT csv)") as copy:
            for chunk in _csv_chunks(table):
                copy.write(chunk)

    def _insert_arrow(self, tx: psycopg.Cursor[Any], table: pa.Table) -> None:
        self._copy(tx, self.qualified, table)

    def _upsert_arrow(self, tx: psycopg.Cursor[Any], table: pa.Table, conflict_sql: str) -> None:
        stage = self.dialect.quote("twice_upsert_stage")
        tx.execute(f"CREATE TEMPORARY TABLE {stage} (LIKE {self.qualified}) ON COMMIT DROP")
        self._copy(tx, stage, table)
        names = self._column_list(table.column_names)
        try:
            tx.execute(
                f"INSERT INTO {self.qualified} ({names}) SELECT {names} FROM {stage} "
                f"{conflict_sql}"
            )
        except psycopg.errors.InvalidColumnReference as exc:
            raise self._upsert_key_error(exc) from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cur:
            cur.execute(sql, list(params) or None)
            return cur.fetchall()

    def _stream(self, sql: str, params: Sequence[Any]) -> Iterator[Sequence[Any]]:
        """Rows in batches through a server-side cursor, in BINARY format so that float8
        values arrive as the exact doubles (text output depends on extra_float_digits). Inside
        a write's transaction it runs in it (a savepoint), so it sees the uncommitted rows."""
        conn = self.connection
        name = f"twice_fp_{uuid.uuid4().hex[:12]}"
        with conn.transaction(), conn.cursor(name, binary=True) as cur:
            cur.execute(sql, list(params) or None)
            while True:
                batch = cur.fetchmany(_STREAM_BATCH_ROWS)
                if not batch:
                    return
                yield from batch

    def fingerprint_sums_v2(
        self, partition: Any, columns: Sequence[str]
    ) -> tuple[int, int, int]:
        encoding = self.connection.info.parameter_status("server_encoding")
        if encoding != "UTF8":
            raise DestinationError(
                f"{self.spec}: server_encoding is {encoding}; md5() hashes stored bytes, so "
                "twice-fp-v2 fingerprints match other engines only in UTF8 databases"
            )
        return super().fingerprint_sums_v2(partition, columns)

    def _fingerprint_batches(self, where: str, params: Sequence[Any],
                             typed: Sequence[tuple[str, ColumnType]]
                             ) -> Iterator[pa.RecordBatch]:
        """The columns by ``COPY (SELECT ...) TO STDOUT (FORMAT csv)``, parsed by Arrow's CSV
        reader as they stream in (no Python per value): the ``twice-fp-v3`` hash runs on these
        batches (see fingerprint_sums). Each value travels as text that Arrow reads back
        exactly, whatever the session's settings: dates as days since 1970-01-01, timestamps
        in ISO style (timestamptz at UTC), float8 with 17 significant digits, UTF-8. Those
        settings hold for one transaction only: a stamped write's, where the fence set them
        (see :meth:`_lock_fence`); the COPY's own, outside any; or a savepoint that sets and
        restores them inside another transaction. Inside a write it runs in that
        transaction, so it sees its rows."""
        conn = self.connection
        q = self.dialect.quote
        exprs, types = [], {}
        for name, ctype in typed:
            exprs.append(_COPY_VALUE.get(ctype.kind, "{v}").format(v=q(name)))
            types[name] = _copy_arrow_type(ctype)
        sql = f"COPY (SELECT {', '.join(exprs)} FROM {self.qualified} WHERE {where}) " \
              "TO STDOUT (FORMAT csv)"
        names = [n for n, _ in typed]
        if self._copy_settings_in_write:  # set for the whole write by _lock_fence
            with conn.cursor() as cur:
                yield from self._copy_batches(cur, sql, params, names, types, typed)
            return
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            # a transaction of its own: the settings end with it
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(_settings_sql(), prepare=False)
                yield from self._copy_batches(cur, sql, params, names, types, typed)
            return
        with conn.transaction(), conn.cursor() as cur:  # a savepoint in a transaction
            cur.execute("SELECT " + ", ".join(
                f"current_setting('{n}')" for n in _COPY_SETTINGS))
            saved = cur.fetchone()
            assert saved is not None
            cur.execute(_settings_sql(), prepare=False)
            try:
                yield from self._copy_batches(cur, sql, params, names, types, typed)
            finally:
                if not conn.closed and conn.info.transaction_status != \
                        psycopg.pq.TransactionStatus.INERROR:
                    cur.execute("SELECT " + ", ".join(
                        f"set_config('{n}', %s, true)" for n in _COPY_SETTINGS), list(saved))

    def _copy_batches(self, cur: psycopg.Cursor[Any], sql: str, params: Sequence[Any],
                      names: list[str], types: dict[str, pa.DataType],
                      typed: Sequence[tuple[str, ColumnType]]) -> Iterator[pa.RecordBatch]:
        with cur.copy(sql, list(params) or None) as copy:
            reader = _open_copy_csv(copy, names, types)
            if reader is None:  # no rows
                return
            try:
                for batch in reader:
                    yield _from_copy(batch, typed)
            except pa.ArrowInvalid as exc:
                raise DestinationError(
                    f"{self.spec}: a value could not be read back exactly for the "
                    f"fingerprint ({exc})") from None


def _schema_of(rows: Sequence[Sequence[Any]]) -> Schema | None:
    """The columns ``_SCHEMA_SQL`` read (None: no such table)."""
    if not rows:
        return None
    schema: Schema = {}
    for name, data_type, modifier in rows:
        precision, scale = _numeric_precision(modifier)
        if data_type == "numeric" and precision is not None and 0 < precision <= 38:
            schema[name] = ColumnType("decimal", precision, scale)
        elif data_type in _TYPES:
            schema[name] = ColumnType(_TYPES[data_type])
        else:
            shown = "numeric without (precision, scale)" if data_type == "numeric" else (
                data_type
            )
            schema[name] = ColumnType("unsupported", engine_type=shown)
    return schema


def _results(cur: psycopg.Cursor[Any]) -> list[list[tuple[Any, ...]]]:
    """The rows of each statement of a batch ``cur`` just ran that returns rows, in order
    (psycopg stands on the first result)."""
    found = []
    while True:
        if cur.description is not None:
            found.append(cur.fetchall())
        if not cur.nextset():
            return found


def _settings_sql() -> psycopg.sql.Composed:
    """``set_config`` of ``_COPY_SETTINGS`` for the current transaction only."""
    from psycopg import sql

    return sql.SQL("SELECT ") + sql.SQL(", ").join(
        sql.SQL("set_config({}, {}, true)").format(sql.Literal(n), sql.Literal(v))
        for n, v in _COPY_SETTINGS.items())


# How each kind travels in the fingerprint's COPY (see _fingerprint_batches), and as what
# Arrow type it is parsed; kinds not listed travel as themselves.
_COPY_VALUE = {
    "string": "({v})::text",
    "binary": "encode({v}, 'hex')",
    "date": "({v} - DATE '1970-01-01')",
    "timestamptz": "({v} AT TIME ZONE 'UTC')",
    "float": "({v})::float8",
}
_COPY_SETTINGS = {"DateStyle": "ISO, YMD", "extra_float_digits": "3",
                  "client_encoding": "UTF8"}
_CSV_BLOCK_BYTES = 1 << 22
_JOIN_BLOCKS = 512


def _open_copy_csv(copy: psycopg.Copy, names: list[str], types: dict[str, pa.DataType]
                   ) -> pacsv.CSVStreamingReader | None:
    """Arrow's streaming CSV reader over a COPY's output; None when it is empty."""
    try:
        return pacsv.open_csv(
            io.BufferedReader(_CopyStream(copy), 1 << 20),
            read_options=pacsv.ReadOptions(column_names=names, block_size=_CSV_BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=types, true_values=["t"], false_values=["f"], null_values=[""],
                strings_can_be_null=True, quoted_strings_can_be_null=False),
        )
    except pa.ArrowInvalid as exc:
        if "Empty CSV file" in str(exc):
            for _ in copy:  # drain (nothing is left), so the COPY ends cleanly
                pass
            return None
        raise


def _copy_arrow_type(ctype: ColumnType) -> pa.DataType:
    if ctype.kind in ("date", "integer"):
        return pa.int64()
    if ctype.kind in ("string", "binary"):
        return pa.string()
    if ctype.kind in ("timestamp", "timestamptz"):
        return pa.timestamp("us")
    return ctype.arrow()


def _from_copy(batch: pa.RecordBatch, typed: Sequence[tuple[str, ColumnType]]
               ) -> pa.RecordBatch:
    """COPY's columns as the fingerprint reads them: dates from day numbers, bytea from hex."""
    arrays = []
    for array, (_, ctype) in zip(batch.columns, typed, strict=True):
        if ctype.kind == "date":
            array = array.cast(pa.int32()).cast(pa.date32())
        elif ctype.kind == "binary":
            array = pa.array([None if v is None else bytes.fromhex(v)
                              for v in array.to_pylist()], pa.binary())
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


class _CopyStream(io.RawIOBase):
    """A COPY TO STDOUT as a readable byte stream (for Arrow's streaming CSV reader)."""

    def __init__(self, copy: psycopg.Copy) -> None:
        self._blocks = iter(copy)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` with COPY blocks (one row each), joined in C a few hundred at a
        time; a block that does not fit waits for the next call."""
        view = memoryview(buffer).cast("B")
        while len(self._pending) < len(view):
            blocks = list(itertools.islice(self._blocks, _JOIN_BLOCKS))
            if not blocks:
                break
            self._pending = memoryview(b"".join([self._pending, *blocks]))
        size = min(len(view), len(self._pending))
        view[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def _csv_chunks(table: pa.Table) -> Iterator[bytes]:
    """CSV as PostgreSQL's COPY reads it: unquoted empty = NULL, ``""`` = empty string.

    Arrow quotes every string value, so the two never mix; bytea goes as ``\\x`` hex text.
    """
    schema = schema_of(table)
    for index, (name, ctype) in enumerate(schema.items()):
        if ctype.kind == "binary":
            values = table.column(index).to_pylist()
            texts = [None if v is None else "\\x" + v.hex() for v in values]
            table = table.set_column(index, name, pa.array(texts, pa.string()))
    options = pacsv.WriteOptions(include_header=False)
    for batch in table.to_batches(max_chunksize=_COPY_BATCH_ROWS):
        buffer = io.BytesIO()
        pacsv.write_csv(batch, buffer, options)
        yield buffer.getvalue()


def open_destination(spec: DestinationSpec) -> PostgresDestination:
    """Open ``postgresql://user@host:port/db[?libpq options]#[schema.]table``."""
    parts = urlsplit(f"postgresql:{spec.location}")
    if not parts.path.strip("/"):
        raise DestinationSpecError("postgresql destination names no database: postgresql://host/DB")
    schema_name, table = split_table_name(spec.fragment, default_schema="public")
    conninfo = urlunsplit(parts._replace(query=urlencode(spec.options)))
    shown = urlunsplit(parts._replace(query=""))
    extra = "&".join(filter(None, [spec.twice_query().lstrip("?"), urlencode(spec.options)]))
    # never echo a password (user:password@ or ?password=) into the ledger or the logs
    canonical = public_spec(f"{shown}{'?' + extra if extra else ''}#{schema_name}.{table}")
    return PostgresDestination(
        conninfo, spec=canonical, table=table, schema_name=schema_name,
        partition_column=spec.partition_column, key_columns=spec.key_columns,
        keep_previous=spec.keep_previous,
    )
