"""SQLite destinations: ``sqlite:///path/to/file.db#table``.

Writes run in ``BEGIN IMMEDIATE`` transactions (the write lock is taken up front, so two
replacers cannot interleave) and insert with ``executemany``. SQLite has no date, timestamp or
decimal storage, so twice stores those as their canonical text in columns whose declared type
has TEXT affinity (``DATE_TEXT``, ``TIMESTAMP_TEXT``, ``TIMESTAMPTZ_TEXT``, ``DECIMAL_TEXT(p,s)``):
exact, sortable, and hashable as is. A crash mid-transaction leaves a hot journal that SQLite
rolls back on the next open, so the old slice survives. Floats are REAL (exact float64); SQLite
cannot store NaN (it keeps NULL), so a write holding NaN is refused before it starts, and
fingerprints render floats with twice's ``twice_float_text`` function (``CAST AS TEXT`` keeps
only 15 digits).

Commit records of stamped writes (see :mod:`twice.destinations.commits`) go to a
``twice_commits`` table in the same database file, inside the write's ``BEGIN IMMEDIATE``
transaction: the write lock taken up front also makes the fencing read race-free.

A closed destination hands its connection back for the next unit of the process (see
:mod:`twice.destinations.idle_connections`). A kept connection still has the file it opened
open, so it is reused only while the file at the path is that file (same device and inode;
the inode cannot be reused while the connection holds it open): a file deleted or replaced
meanwhile gets a new connection, and the write lands in the file at the path. It goes idle with
every cursor closed (a cursor left with rows unread keeps the file's shared lock, which would
block every other writer) and outside any transaction, so it holds no lock while idle.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from twice.destinations.base import (
    COMMIT_COLUMNS,
    DestinationSpec,
    SchemaMoved,
    SqlDialect,
    split_table_name,
)
from twice.destinations.columns import (
    ColumnType,
    Schema,
    SchemaError,
    canonical_text,
    float_text,
    from_canonical_text,
    python_values,
    schema_of,
)
from twice.destinations.commits import ADOPT_MODE, LEDGER_KEY, CommitRecord, WriteStamp
from twice.destinations.embedded import EmbeddedSqlDestination, database_file
from twice.destinations.errors import DestinationError
from twice.destinations.fingerprint import hash60
from twice.destinations.idle_connections import IdleConnections

_DECIMAL_TEXT = re.compile(r"DECIMAL_TEXT\((\d+),\s*(\d+)\)")
_TEXT_STORED = ("date", "timestamp", "timestamptz", "decimal")
_FINGERPRINT_BATCH_ROWS = 65_536


class SQLiteDialect(SqlDialect):
    name = "sqlite"
    placeholder = "?"
    unit_separator = "char(31)"

    ddl_types: ClassVar[dict[str, str]] = {
        "integer": "BIGINT", "float": "DOUBLE", "boolean": "BOOLEAN", "string": "TEXT",
        "binary": "BLOB", "date": "DATE_TEXT", "timestamp": "TIMESTAMP_TEXT",
        "timestamptz": "TIMESTAMPTZ_TEXT",
    }
    decimal_ddl = "DECIMAL_TEXT({precision},{scale})"
    add_column_if_not_exists = False  # writers are serialised (BEGIN IMMEDIATE): not needed
    alter_type_sql = None  # SQLite cannot change a column's type

    def bind(self, value: Any, ctype: ColumnType) -> Any:
        """Bounds compare as canonical text, exactly as the values are stored."""
        if ctype.kind == "date" and isinstance(value, date):
            return value.isoformat()
        if ctype.kind == "timestamp" and isinstance(value, datetime):
            return value.strftime("%Y-%m-%d %H:%M:%S.%f")
        if ctype.kind == "timestamptz" and isinstance(value, datetime):
            return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%fZ")
        if ctype.kind == "decimal" and isinstance(value, Decimal):
            return format(value, "f")
        return value

    float_text_in_sql = True  # twice_float_text, registered on twice's connections

    text_sql: ClassVar[dict[str, str]] = {
        "boolean": "(CASE WHEN {value} THEN 'true' ELSE 'false' END)",
        "binary": "lower(hex({value}))",
        "float": "twice_float_text({value})",  # CAST(x AS TEXT) keeps 15 digits: not exact
    }
    default_text_sql = "CAST({value} AS TEXT)"

    def hash60_sql(self, text_sql: str) -> str:
        return f"twice_md5_60({text_sql})"

    @staticmethod
    def column_type(declared: str) -> ColumnType:
        """Map a declared type (twice's own or a common foreign one) to a logical type."""
        upper = declared.upper().strip()
        match = _DECIMAL_TEXT.fullmatch(upper)
        if match:
            return ColumnType("decimal", int(match[1]), int(match[2]))
        exact = {
            "DATE_TEXT": "date", "DATE": "date", "TIMESTAMP_TEXT": "timestamp",
            "TIMESTAMP": "timestamp", "DATETIME": "timestamp",
            "TIMESTAMPTZ_TEXT": "timestamptz", "BOOLEAN": "boolean", "BOOL": "boolean",
        }
        if upper in exact:
            return ColumnType(exact[upper])
        if "INT" in upper:
            return ColumnType("integer")
        if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
            return ColumnType("string")
        if "BLOB" in upper:
            return ColumnType("binary")
        if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
            return ColumnType("float")
        return ColumnType("unsupported", engine_type=declared or "untyped")


#: How long a statement waits while another connection or process holds the file's lock
#: before the destination is unavailable ("database is locked").
LOCK_WAIT_SECONDS = 30.0


def _file_id(path: str) -> tuple[int, int] | None:
    """The file at ``path`` (device, inode), or None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


class FileConnection(sqlite3.Connection):
    """A connection that can be kept idle for the next unit (see the module doc): it knows
    the file it opened (``file``: None when that could not be told, and it is never kept) and
    the cursors it made, closed when it goes idle."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path = ""
        self.file: tuple[int, int] | None = None
        self.lock_wait = LOCK_WAIT_SECONDS
        self._cursors: weakref.WeakSet[sqlite3.Cursor] = weakref.WeakSet()
        # what this connection saw under the write lock, with the file's schema cookie then
        # (``PRAGMA schema_version``: SQLite changes it with every change of any schema):
        # a table's columns, and the commit tables whose DDL it ran (see SQLiteDestination)
        self.columns: dict[str, tuple[int, Schema]] = {}
        self.commit_tables: dict[str, int] = {}

    def cursor(self, factory: Any = sqlite3.Cursor) -> Any:
        made = super().cursor(factory)
        self._cursors.add(made)
        return made

    # the connection's own execute and executemany make their cursor without cursor()
    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return self.cursor().execute(sql, parameters)  # type: ignore[no-any-return]

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        return self.cursor().executemany(sql, parameters)  # type: ignore[no-any-return]

    def idle(self) -> bool:
        """Close every cursor; whether the connection is now idle: outside any transaction,
        on the file at its path (so it holds no lock, and does not keep a deleted file's space
        while idle; ``fresh`` is asked again when it is taken)."""
        for made in list(self._cursors):
            made.close()
        return not self.in_transaction and fresh(self)


def fresh(conn: FileConnection) -> bool:
    """Whether the file at the connection's path is still the file it opened."""
    return conn.file is not None and _file_id(conn.path) == conn.file


#: Whether this SQLite library lets a connection move between threads (serialized or
#: multi-thread mode, DB-API threadsafety 1 or more): a kept connection may be taken by another
#: thread of the process; a single-thread build keeps none.
_SHARED_ACROSS_THREADS = sqlite3.threadsafety > 0
#: Connections handed back by closed destinations, for the next unit (see idle_connections).
IDLE: IdleConnections[FileConnection] = IdleConnections(fresh, lambda conn: conn.close())


class SQLiteDestination(EmbeddedSqlDestination[sqlite3.Connection]):
    engine = "sqlite"
    dialect = SQLiteDialect()
    idle_connections = IDLE
    begin_sql = "BEGIN IMMEDIATE"
    open_errors = (sqlite3.Error,)
    # a lock held past the wait, a full disk, an I/O error (also raised for SQL twice got wrong,
    # which a test would have caught: there are no such statements to tell apart here)
    machinery_errors = (sqlite3.OperationalError,)
    #: What the write under way saw, remembered on its connection once it commits: a
    #: table's columns with the schema cookie then, and the cookie under which the commit
    #: table was there (None: not looked at).
    _seen_in_write: dict[str, tuple[int, Schema]] | None = None
    _commits_in_write: int | None = None

    def _open(self) -> sqlite3.Connection:
        """A kept connection to the file (see the module doc), else a new one: any thread of
        the process may take it (one destination uses it at a time)."""
        kept = IDLE.take(self._idle_key())
        if kept is not None:
            if kept.lock_wait != LOCK_WAIT_SECONDS:
                kept.execute(f"PRAGMA busy_timeout = {int(LOCK_WAIT_SECONDS * 1000)}")
                kept.lock_wait = LOCK_WAIT_SECONDS
            return kept
        before = _file_id(self.path)
        conn = sqlite3.connect(self.path, timeout=LOCK_WAIT_SECONDS, isolation_level=None,
                               check_same_thread=False, factory=FileConnection)
        after = _file_id(self.path)
        conn.path = self.path
        conn.file = after if before in (None, after) else None  # replaced while opening
        conn.create_function("twice_md5_60", 1, hash60, deterministic=True)
        conn.create_function("twice_float_text", 1, float_text, deterministic=True)
        return conn

    # -- what a kept connection saw under the write lock (issue 38) ------------------------
    # A replace conforms its rows to the columns its connection saw in the table's last write
    # (``_known_schema``), and its lock checks them; the commit table's DDL runs once per
    # connection. Both hold while the file's schema cookie, read under BEGIN IMMEDIATE (no
    # other connection can change a schema until our COMMIT), is the one seen then: any
    # CREATE, ALTER or DROP by anyone changes it, and then the columns are read and the DDL
    # run as on a new connection. Only what a committed write saw is remembered: the cookie
    # grows with each committed change, so one value names one committed schema, but a write
    # that rolled back its own DDL leaves the file at the earlier value, which later changes
    # by others can bring back to the value it saw (the lifecycle simulation, seed 9).

    def _schema_version(self, tx: sqlite3.Connection) -> int:
        ((version,),) = tx.execute("PRAGMA schema_version").fetchall()
        return int(version)

    def _known_schema(self) -> Schema | None:
        conn = self.connection
        seen = conn.columns.get(self.qualified) if isinstance(conn, FileConnection) else None
        return None if seen is None else seen[1]

    def _lock_for_replace(self, tx: sqlite3.Connection, *,
                          expected: Schema | None = None) -> None:
        """The write lock is BEGIN IMMEDIATE's, held already: read the table's columns under
        it, unless the schema cookie says they are the ones this connection saw last; they
        serve the commit record's fingerprint (``_existing_schema``) and, once this write
        commits, the next replace (``_known_schema``), and must equal ``expected`` when the
        rows were conformed to it (``SchemaMoved`` otherwise, before anything is written)."""
        version = self._schema_version(tx)
        kept = tx.columns if isinstance(tx, FileConnection) else {}
        seen = kept.get(self.qualified)
        if seen is not None and seen[0] == version:
            schema: Schema | None = seen[1]
        else:
            schema = self._read_schema()
            if schema is None:
                kept.pop(self.qualified, None)
            elif self._seen_in_write is not None:
                self._seen_in_write[self.qualified] = (version, schema)
        if self._commits_in_write is not None:
            # this write's own DDL since (its table, its columns) left the commit table as is
            self._commits_in_write = version
        self._schema_in_write = schema
        if expected is not None and schema != expected:
            raise SchemaMoved

    def _create_commits_table(self, tx: sqlite3.Connection) -> None:
        """The commit table's DDL (``CREATE ... IF NOT EXISTS``), unless this connection ran it
        in a committed write under the schema cookie still in force."""
        ran = tx.commit_tables if isinstance(tx, FileConnection) else {}
        version = self._schema_version(tx)
        if ran.get(self.commits_qualified) != version:
            super()._create_commits_table(tx)
            version = self._schema_version(tx)
        self._commits_in_write = version

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """The embedded engine's transaction; what it saw is remembered once it committed."""
        self._seen_in_write, self._commits_in_write = {}, None
        try:
            with super()._transaction() as tx:
                yield tx
            if isinstance(tx, FileConnection):
                tx.columns.update(self._seen_in_write or {})
                if self._commits_in_write is not None:
                    tx.commit_tables[self.commits_qualified] = self._commits_in_write
        finally:
            self._seen_in_write, self._commits_in_write = None, None

    def _idle(self, conn: sqlite3.Connection) -> bool:
        return _SHARED_ACROSS_THREADS and isinstance(conn, FileConnection) and conn.idle()

    def _idle_key(self) -> str:
        return self.path

    def _fence_state(self, owner: WriteStamp) -> tuple[Any, CommitRecord | None]:
        """As the shared read (``SqlDestination._fence_state``: the slot's newest token and the
        table's ledger owner), in a statement SQLite answers from its indexes alone: the owner
        is the row whose ``rowid`` the adoption's, else the first record's, one-row lookup
        gives, where the shared statement ranks a union in temporary B-trees (0.07 against
        0.12 ms a read with 600 records: a stamped write's slowest read after its COMMIT)."""
        if not owner.ledger:
            return super()._fence_state(owner)
        return self._newest_and_owner(self._query(_fence_state_sql(self.commits_qualified), [
            self.table_label, owner.fence_key, self.table_label, ADOPT_MODE, self.table_label]))

    def _has_table(self, name: str) -> bool:
        found = self.connection.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (name,),
        ).fetchone()
        return bool(found and found[0])

    def _read_schema(self) -> Schema | None:
        rows = self.connection.execute(f"PRAGMA table_info({self.qualified})").fetchall()
        if not rows:
            return None
        return {name: SQLiteDialect.column_type(declared) for _, name, declared, *_ in rows}

    def _check_values(self, table: pa.Table) -> None:
        """SQLite stores NaN as NULL: refuse it rather than lose it (and fingerprint NULL)."""
        for name, column in zip(table.column_names, table.columns, strict=True):
            if pa.types.is_floating(column.type):
                nans = pc.sum(pc.is_nan(column)).as_py() or 0
                if nans:
                    raise SchemaError(
                        f"{self.spec}: column {name!r} ({ColumnType('float')}) holds {nans} NaN "
                        "value(s), which SQLite cannot store (it would keep NULL instead); "
                        "nothing was written: replace NaN with NULL upstream or use another "
                        "engine"
                    )

    def _execute(self, tx: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> int:
        return tx.execute(sql, tuple(params)).rowcount

    def _insert_arrow(self, tx: sqlite3.Connection, table: pa.Table) -> None:
        self._insert_rows(tx, table, "")

    def _upsert_arrow(self, tx: sqlite3.Connection, table: pa.Table, conflict_sql: str) -> None:
        try:
            self._insert_rows(tx, table, f" {conflict_sql}")
        except sqlite3.OperationalError as exc:
            if "ON CONFLICT" in str(exc):
                raise self._upsert_key_error(exc) from None
            raise

    def _insert_rows(self, tx: sqlite3.Connection, table: pa.Table, suffix: str) -> None:
        """Insert every row with multi-row ``INSERT ... VALUES (...), (...)`` statements
        (``suffix``: an ``ON CONFLICT`` clause): one prepared statement of ``per`` rows run by
        ``executemany``, then one for the rest. Binding ``per`` rows per step halves SQLite's
        per-row cost against one statement per row."""
        columns = _python_columns(table)
        count = table.num_rows
        per = max(1, min(_ROWS_PER_STATEMENT,
                         tx.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(columns)))
        full = count - count % per
        if full:
            tx.executemany(self._insert_sql(table, per) + suffix,
                           (_flat(columns, start, start + per) for start in range(0, full, per)))
        if count > full:
            tx.execute(self._insert_sql(table, count - full) + suffix,
                       _flat(columns, full, count))

    def _insert_sql(self, table: pa.Table, rows: int) -> str:
        names = self._column_list(table.column_names)
        marks = "(" + ", ".join("?" for _ in table.column_names) + ")"
        return f"INSERT INTO {self.qualified} ({names}) VALUES " + ", ".join([marks] * rows)

    def _column_array(self, values: list[Any], ctype: ColumnType) -> pa.Array:
        return from_canonical_text(values, ctype)

    def _fingerprint_batches(self, where: str, params: Sequence[Any],
                             typed: Sequence[tuple[str, ColumnType]]
                             ) -> Iterator[pa.Table]:
        """The columns in cursor batches turned into Arrow columns (text-stored kinds parsed
        by Arrow): the ``twice-fp-v3`` hash runs on these (see fingerprint_sums). A value the
        column's type cannot hold (SQLite keeps any value in any column) is refused."""
        select = ", ".join(self.dialect.quote(n) for n, _ in typed)
        cursor = self.connection.execute(
            f"SELECT {select} FROM {self.qualified} WHERE {where}", tuple(params))
        names = [n for n, _ in typed]
        while True:
            rows = cursor.fetchmany(_FINGERPRINT_BATCH_ROWS)
            if not rows:
                return
            arrays = []
            for (name, ctype), values in zip(typed, zip(*rows, strict=True), strict=True):
                try:
                    arrays.append(from_canonical_text(list(values), ctype))
                except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                    raise DestinationError(
                        f"{self.spec}: column {name!r} ({ctype}) holds a value that is not "
                        f"a {ctype} ({exc}); it cannot be fingerprinted"
                    ) from None
            yield pa.table(arrays, names=names)


#: A record whose ``extra`` names a ledger (``NAMES_A_LEDGER``'s test: the ledger key with a
#: non-empty string), in literals: SQLite prepares a statement again before every run when a
#: LIKE pattern in it is a bound parameter (its LIKE optimisation depends on the pattern),
#: which cost the fencing read 75 of its 90 microseconds. ``instr`` is also exact about case,
#: as ``CommitRecord.ledger`` is (LIKE ignores the case of ASCII letters).
_NAMES_A_LEDGER_SQL = (f"instr(\"extra\", '\"{LEDGER_KEY}\": \"') > 0 "
                       f"AND instr(\"extra\", '\"{LEDGER_KEY}\": \"\"') = 0")


@functools.lru_cache(maxsize=1024)
def _fence_state_sql(qualified: str) -> str:
    """``SQLiteDestination._fence_state``'s statement for the commit records at ``qualified``
    (the same conditions and order as ``SqlDestination._ledger_owner_query``)."""
    q = SQLiteDialect().quote
    names = ", ".join(f"owners.{q(name)}" for name, _ in COMMIT_COLUMNS)
    named = (f"SELECT rowid FROM {qualified} WHERE {q('table_name')} = ? "
             f"AND {_NAMES_A_LEDGER_SQL} ")
    return (
        f"SELECT newest.twice_newest, {names} FROM (SELECT max({q('token')}) AS twice_newest "
        f"FROM {qualified} WHERE {q('table_name')} = ? AND {q('fence_key')} = ?) AS newest "
        f"LEFT JOIN {qualified} AS owners ON owners.rowid = coalesce(("
        + named + f"AND {q('mode')} = ? ORDER BY {q('token')} DESC, {q('committed_at')} DESC "
        f"LIMIT 1), (" + named + f"ORDER BY {q('committed_at')}, {q('token')} LIMIT 1))"
    )


_ROWS_PER_STATEMENT = 100
"""Rows bound per INSERT statement (fewer when SQLite's variable limit says so)."""


def _flat(columns: list[list[Any]], start: int, stop: int) -> list[Any]:
    """The values of rows ``start`` to ``stop``, row after row, as one parameter list."""
    width = len(columns)
    values: list[Any] = [None] * ((stop - start) * width)
    for index, column in enumerate(columns):
        values[index::width] = column[start:stop]
    return values


def _python_columns(table: pa.Table) -> list[list[Any]]:
    """Columns as lists of SQLite-storable values (text-stored kinds as canonical text)."""
    columns = []
    for (_, ctype), column in zip(schema_of(table).items(), table.columns, strict=True):
        values = canonical_text(column, ctype) if ctype.kind in _TEXT_STORED else column
        columns.append(python_values(values))
    return columns


def open_destination(spec: DestinationSpec) -> SQLiteDestination:
    """Open ``sqlite:///abs/path.db#table`` (or ``sqlite:rel/path.db#table``)."""
    path = database_file(spec)
    _, table = split_table_name(spec.fragment, default_schema=None)
    canonical = f"sqlite://{path}{spec.twice_query()}#{table}"
    return SQLiteDestination(
        str(path), spec=canonical, table=table, partition_column=spec.partition_column,
        key_columns=spec.key_columns, keep_previous=spec.keep_previous,
    )
