"""The destination contract and the machinery every SQL engine shares.

A *destination* is a table (or a Parquet dataset) a task writes to. It offers two idempotent
writes, both safe to repeat, and an append that is exactly-once when stamped:

* :meth:`Destination.replace_partition` replaces the slice of one interval (or one explicit
  partition value): delete + insert in ONE transaction, so readers and crashes see the old slice
  or the new one, never both, never neither. Rows outside the slice are refused up front.
* :meth:`Destination.upsert` inserts or updates by a deterministic key, for tables shared with
  other writers; a rerun updates, never appends, and a batch repeating a key is refused.
* :meth:`Destination.append` inserts the rows. With a :class:`~twice.destinations.commits.
  WriteStamp` it happens once per unit of work and generation (a repeat is a no-op); without
  one it is a plain insert, and a retry appends again.

Every write takes ``stamp=`` (default: the attempt's active stamp, see
:mod:`twice.destinations.commits`). A stamped write commits a commit record with its rows, in
the same transaction, after checking the fencing token; :meth:`Destination.commit_records`
reads them back.

:class:`SqlDestination` owns the SQL text (one place, parameters always bound); an engine module
supplies a :class:`SqlDialect` (types, quoting, canonical text for fingerprints) and a handful
of primitives (transaction, bulk insert). Adding an engine is one new module.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar, runtime_checkable
from urllib.parse import parse_qsl, unquote

import pyarrow as pa

from twice.core.identifiers import (
    quote_identifier,
    validate_identifier,
    validate_identifiers,
)
from twice.core.resources import Closeable
from twice.destinations import commits
from twice.destinations.columns import ColumnType, Schema, require_columns, schema_of
from twice.destinations.commits import (
    ACTIVE,
    ADOPT_MODE,
    COMMIT_COLUMNS,
    COMMITS_TABLE,
    LEDGER_KEY,
    CommitRecord,
    Holder,
    StampArg,
    WriteStamp,
    check_fence,
    resolve_stamp,
    utc_now_text,
)
from twice.destinations.errors import DestinationError, DestinationSpecError
from twice.destinations.idle_connections import IdleConnections
from twice.destinations.landing import Landing, admit
from twice.destinations.rows import (
    RowsLike,
    SchemaChangeRefusedError,
    SchemaMismatchError,
    check_keys,
    to_arrow,
)
from twice.destinations.slices import PartitionSpec, Slice


class SchemaMoved(Exception):
    """The table's columns are not those a replace conformed its rows to without reading them
    (``SqlDestination._replace``): it reads them and starts again. Raised by an engine's
    ``_lock_for_replace`` and caught by ``replace_partition``: it never reaches a caller."""


@dataclass(frozen=True)
class WriteResult:
    """What one write did, as evidence for the ledger (counts come from the engine)."""

    destination: str
    partition: str
    mode: str  # "replace", "upsert", or for Parquet "static" / "dynamic"
    rows_written: int
    rows_deleted: int | None = None
    partitions_written: tuple[str, ...] = ()
    partitions_removed: tuple[str, ...] = ()
    commit: CommitRecord | None = None  # the commit record of a stamped write (None: unstamped)
    #: The table's columns as the commit record's fingerprint read them, inside the write's
    #: transaction (SQL engines; None elsewhere): the check after the write takes its schema
    #: signature from here instead of opening the destination again.
    schema: Schema | None = None


@runtime_checkable
class Destination(Protocol):
    """What the executor, the fingerprint and the CLI need from any destination."""

    engine: str
    spec: str
    partition_column: str | None
    key_columns: tuple[str, ...]

    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...
    def schema(self) -> Schema | None: ...
    def replace_partition(
        self, rows: RowsLike, partition: PartitionSpec, *, stamp: StampArg = ACTIVE
    ) -> WriteResult: ...
    def upsert(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult: ...
    def append(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult: ...
    def commit_records(self, uow_id: str | None = None) -> list[CommitRecord]: ...
    def slot_records(self, fence_key: str) -> list[CommitRecord]: ...
    def marked_attempt(self, uow_id: str) -> tuple[int, int] | None: ...
    def seal(self, stamp: WriteStamp) -> bool: ...
    def adopt(self, stamp: WriteStamp, *, note: str, operator: str) -> CommitRecord: ...
    def read_partition(
        self, partition: PartitionSpec = None, columns: Sequence[str] | None = None
    ) -> pa.Table: ...
    def fingerprint_sums(
        self, partition: PartitionSpec, columns: Sequence[str]
    ) -> tuple[int, int, int]: ...
    def null_counts(self, partition: PartitionSpec, columns: Sequence[str]) -> dict[str, int]: ...
    def row_count(self, partition: PartitionSpec = None) -> int: ...
    def close(self) -> None: ...


# --------------------------------------------------------------------------- spec strings


@dataclass(frozen=True)
class DestinationSpec:
    """A parsed ``scheme:location?query#fragment`` destination string.

    ``partition_column`` and ``key_columns`` (comma-separated) in the query belong to twice, so
    a single string names a destination completely for the ledger and the CLI; any other query
    parameter is left to the engine (e.g. PostgreSQL's ``sslmode``). ``keep_previous=DAYS``
    (SQL engines: keep each replaced slice DAYS days, see :mod:`twice.destinations.previous`)
    is twice's too, but it says how to write, not which table: :meth:`twice_query` leaves it
    out, so the canonical spec (the destination's identity) is the same with or without it.
    """

    scheme: str
    location: str
    fragment: str
    options: dict[str, str] = field(default_factory=dict)
    partition_column: str | None = None
    key_columns: tuple[str, ...] = ()
    keep_previous: int | None = None  # days; None: keep no replaced slices

    @classmethod
    def parse(cls, text: str) -> DestinationSpec:
        if not isinstance(text, str) or ":" not in text:
            raise DestinationSpecError(
                f"destination {text!r} must look like scheme:location#table, e.g. "
                "sqlite:///data/out.db#positions or parquet:///data/positions"
            )
        scheme, _, rest = text.partition(":")
        if not scheme or not scheme.isascii() or not scheme.isalnum() or not scheme[0].isalpha():
            raise DestinationSpecError(f"destination scheme {scheme!r} is not a plain word")
        rest, _, fragment = rest.partition("#")
        location, _, query = rest.partition("?")
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
        names = [name for name, _ in pairs]
        for name in ("partition_column", "key_columns", "keep_previous"):
            if names.count(name) > 1:
                raise DestinationSpecError(f"destination option {name} is given twice")
            if (name, "") in pairs:
                raise DestinationSpecError(f"destination option {name} is empty: give a value "
                                           "or leave it out")
        options = dict(pairs)
        partition_column = options.pop("partition_column", None) or None
        if partition_column is not None:
            validate_identifier(partition_column, "partition_column")
        keys = options.pop("key_columns", "")
        key_columns = validate_identifiers([k for k in keys.split(",") if k], "key column")
        days = options.pop("keep_previous", None)
        keep_previous = None
        if days is not None:
            if not (days.isascii() and days.isdigit() and int(days) > 0):
                raise DestinationSpecError(
                    f"keep_previous={days!r}: give a positive whole number of days, e.g. "
                    "keep_previous=7"
                )
            keep_previous = int(days)
        return cls(scheme.lower(), location, fragment, options, partition_column, key_columns,
                   keep_previous)

    def file_path(self) -> str:
        """The local path of a file destination: ``scheme:///abs/path`` or ``scheme:rel/path``."""
        location = self.location
        if location.startswith("//"):
            host, slash, path = location[2:].partition("/")
            if host not in ("", "localhost"):
                raise DestinationSpecError(
                    f"{self.scheme} destinations are local files: host {host!r} is not allowed "
                    f"(write {self.scheme}:///absolute/path)"
                )
            if slash and path and "/" not in path.rstrip("/"):
                # scheme:///name is a file at the root of the file system here, but a
                # relative one in SQLAlchemy's sqlite:///name (the ledger's form): refused,
                # never guessed, so data never lands in / by a copied URL
                raise DestinationSpecError(
                    f"{self.scheme}:///{path} names /{path}, at the root of the file system: "
                    f"for {path} in the working directory write {self.scheme}:{path}; for the "
                    f"root itself write {self.scheme}:////{path}"
                )
            location = slash + path
        if not location:
            raise DestinationSpecError(f"{self.scheme} destination needs a file path")
        return unquote(location)

    def twice_query(self) -> str:
        """The twice-owned query part, for canonical spec strings."""
        parts = []
        if self.partition_column:
            parts.append(f"partition_column={self.partition_column}")
        if self.key_columns:
            parts.append("key_columns=" + ",".join(self.key_columns))
        return ("?" + "&".join(parts)) if parts else ""


def split_table_name(fragment: str, *, default_schema: str | None) -> tuple[str | None, str]:
    """``schema.table`` or ``table`` from a spec fragment, both parts validated."""
    if not fragment:
        raise DestinationSpecError("destination names no table: add '#table' (or '#schema.table')")
    if fragment.count(".") > 1:
        raise DestinationSpecError(f"table {fragment!r} must be 'table' or 'schema.table'")
    if "." in fragment:
        schema, table = fragment.split(".")
        if default_schema is None:
            raise DestinationSpecError(f"table {fragment!r}: this engine takes no schema name")
        return validate_identifier(schema, "schema name"), validate_identifier(table, "table name")
    return default_schema, validate_identifier(fragment, "table name")


# --------------------------------------------------------------------------- shared shell


class BaseDestination(Closeable):
    """What every destination class shares: its validated names, ``with`` support (closing
    releases nothing unless the engine holds something open), repr."""

    engine: str  # the engine's name, set by each class

    def __init__(
        self, *, spec: str, partition_column: str | None = None, key_columns: Sequence[str] = ()
    ) -> None:
        self.spec = spec
        self.partition_column = (
            None if partition_column is None
            else validate_identifier(partition_column, "partition_column")
        )
        self.key_columns = validate_identifiers(key_columns, "key column")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec}>"

    def commit_records(self, uow_id: str | None = None) -> list[CommitRecord]:
        raise NotImplementedError  # every engine keeps them its own way

    def slot_records(self, fence_key: str) -> list[CommitRecord]:
        """The commit records of one slot (``fence_key``), by (token, committed_at): what a
        dependent's pinned inputs compare (``twice.engine.inputs``). Engines that can filter
        where the records live do (the SQL engines, on their (table, fence_key) index)."""
        return [r for r in self.commit_records() if r.fence_key == fence_key]

    def marked_attempt(self, uow_id: str) -> tuple[int, int] | None:
        """(generation, attempt) of the unit's last stamped write as the table's metadata keeps
        it after routine maintenance pruned the history holding its commit record (Delta log
        retention, Iceberg snapshot expiry); None where records are never pruned (here)."""
        return None

    def seal(self, stamp: WriteStamp) -> bool:
        """Make ``stamp.token`` the newest token of its slice (fence key) without writing rows,
        so that from now on a write under an older token is refused: a ``fence`` commit record
        (see ``twice.destinations.commits``). Made by the holder that took a unit over before
        it concludes that the earlier holder's attempt never committed: that holder may only
        be paused, and would otherwise commit after the conclusion. False where the
        destination cannot seal (Spark; Delta and Iceberg before their table exists): its
        earlier holder is then fenced only once the taker's own write commits. Raises
        ``FencedWriteError`` if a newer token already holds the slice."""
        return False

    def adopt(self, stamp: WriteStamp, *, note: str, operator: str) -> CommitRecord:
        """Make this destination belong to ``stamp.ledger`` from now on (``twice adopt``): an
        ``adopt`` commit record, writing no rows, under ``stamp.token``, which must be above
        every token present (``FencedWriteError`` otherwise: nothing written), so the adopting
        ledger's later writes are never fenced by the earlier ledger's tokens."""
        raise DestinationError(f"{self.spec}: this destination cannot be adopted")


class ArrowScanned(BaseDestination, ABC):
    """A destination without a query engine to ask: null counts and fingerprint sums are
    computed in Arrow over the rows :meth:`read_partition` returns."""

    @abstractmethod
    def read_partition(
        self, partition: PartitionSpec = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows of one slice (all rows when ``partition`` is None), as Arrow."""

    def null_counts(self, partition: PartitionSpec, columns: Sequence[str]) -> dict[str, int]:
        table = self.read_partition(partition, columns)
        return {c: table.column(c).null_count for c in columns}

    def fingerprint_sums(
        self, partition: PartitionSpec, columns: Sequence[str]
    ) -> tuple[int, int, int]:
        """Arrow-computed sums (see :mod:`twice.destinations.fingerprint`) over a read of the
        slice; no SQL engine involved."""
        from twice.destinations.fingerprint import arrow_sums

        table = self.read_partition(partition, columns)
        return arrow_sums(table, list(schema_of(table).items()))


def _columns_named(names: Any, what: str) -> str:
    """``column 'a' is`` / ``columns 'a', 'b' are`` (``what``: "column", "new column")."""
    names = list(names)
    shown = ", ".join(repr(name) for name in names)
    if what == "column":
        return f"column {shown} is" if len(names) == 1 else f"columns {shown} are"
    return f"{what} {shown}" if len(names) == 1 else f"{what}s {shown}"


def required_partition_column(dest: BaseDestination) -> str:
    """``dest``'s partition column; a partition spec without one is refused."""
    if dest.partition_column is None:
        raise DestinationError(
            f"{dest.spec}: no partition_column configured (add ?partition_column=NAME to "
            "the destination or pass partition_column=...)"
        )
    return dest.partition_column


def checked_slice_label(dest: BaseDestination, schema: Schema, table: pa.Table,
                        partition: PartitionSpec) -> str:
    """The slice label of ``partition`` ("all rows" if None), refusing rows of ``table``
    outside it (every engine whose rows arrive as one Arrow table checks them this way)."""
    if partition is None:
        return "all rows"
    column = required_partition_column(dest)
    require_columns(schema, [column])
    slc = Slice.of(column, schema[column], partition)
    slc.check_rows(table)
    return slc.label


# --------------------------------------------------------------------------- SQL machinery


#: The indexes of ``twice_commits`` (where the engine indexes it): the fence's (a slot's newest
#: token), and the two that make reading a table's ledger owner (``_ledger_owner``: its newest
#: adoption, else its first record naming a ledger) a walk of a few index entries. Without them
#: every owned write scanned all of its table's records: the per-unit time of a backfill grew
#: with the range (a year of hourly units on PostgreSQL: 24 ms a unit at a month, 48 ms at a
#: year).
COMMIT_INDEXES: dict[str, tuple[str, ...]] = {
    "twice_commits_fence_ix": ("table_name", "fence_key", "token"),
    "twice_commits_adopt_ix": ("table_name", "mode", "token"),
    "twice_commits_first_ix": ("table_name", "committed_at", "token"),
}


class SqlDialect:
    """Per-engine SQL details; subclasses fill in types and canonical-text expressions."""

    name: ClassVar[str] = "ansi"
    placeholder: ClassVar[str] = "?"
    unit_separator: ClassVar[str] = "chr(31)"
    index_partition_column: ClassVar[bool] = True
    index_commits: ClassVar[bool] = True
    # Whether a table twice creates declares PRIMARY KEY (key_columns): engines whose upsert
    # needs the constraint (ON CONFLICT); DuckDB merges by key without one (see duckdb.py).
    key_constraint: ClassVar[bool] = True
    # Column kind -> DDL type; decimals use ``decimal_ddl`` with their precision and scale.
    ddl_types: ClassVar[dict[str, str]] = {}
    decimal_ddl: ClassVar[str] = "DECIMAL({precision},{scale})"
    # Whether ALTER TABLE ... ADD COLUMN takes IF NOT EXISTS (a concurrent writer may have
    # added the column while this one waited for the table's lock).
    add_column_if_not_exists: ClassVar[bool] = True
    # How to change a column's type ({table}, {column} quoted; {type} DDL); None: the engine
    # cannot (SQLite), the data must go to a new table.
    alter_type_sql: ClassVar[str | None] = "ALTER TABLE {table} ALTER COLUMN {column} TYPE {type}"

    def quote(self, name: str) -> str:
        return quote_identifier(name, self.name)

    def ddl_type(self, ctype: ColumnType) -> str:
        if ctype.kind == "decimal":
            return self.decimal_ddl.format(precision=ctype.precision, scale=ctype.scale)
        return self.ddl_types[ctype.kind]

    def bind(self, value: Any, ctype: ColumnType) -> Any:
        """A Python value as the engine should receive it as a parameter."""
        return value

    # SQL templates giving the canonical text (see :mod:`twice.destinations.columns`) of a
    # non-null ``{value}``: one per column kind whose text the engine's CAST does not give,
    # ``default_text_sql`` for the others.
    text_sql: ClassVar[dict[str, str]] = {}
    default_text_sql: ClassVar[str] = "CAST({value} AS VARCHAR)"

    def canonical_text_sql(self, column_sql: str, ctype: ColumnType) -> str:
        """SQL giving the canonical text of a non-null value of ``column_sql``."""
        return self.text_sql.get(ctype.kind, self.default_text_sql).format(value=column_sql)

    def hash60_sql(self, text_sql: str) -> str:
        """SQL giving the first 15 hex digits of md5(UTF-8 of ``text_sql``) as an integer."""
        raise NotImplementedError

    # Whether canonical_text_sql handles floats (a twice function registered on the
    # connection computes :func:`twice.destinations.columns.float_text`). Without it, float
    # columns are streamed to Python (see twice.destinations.fingerprint.streamed_sql).
    float_text_in_sql: ClassVar[bool] = False

    def float_sql(self, column_sql: str) -> str:
        """SQL giving a float column's value as a double, exactly (float32 widened)."""
        return f"CAST({column_sql} AS DOUBLE PRECISION)"


class Connection(Protocol):
    """What :class:`SqlDestination` itself needs of an engine's connection."""

    def close(self) -> None: ...


ConnT = TypeVar("ConnT", bound=Connection)


class SqlDestination(BaseDestination, ABC, Generic[ConnT]):
    """replace_partition / upsert / read / fingerprint for SQL engines, over a few primitives.

    The destination holds one connection of type ``ConnT``, opened on first use by
    :meth:`_connect` (reopened when :meth:`_usable` says it is not) and closed by :meth:`close`,
    or handed back to the engine's ``idle_connections`` for the next unit.
    """

    dialect: ClassVar[SqlDialect]
    #: Where a closed destination hands its connection back for the next unit of the process
    #: (:mod:`twice.destinations.idle_connections`: the engine's ``_connect`` takes it from
    #: there); None: it is closed.
    idle_connections: ClassVar[IdleConnections[Any] | None] = None

    def __init__(
        self,
        *,
        spec: str,
        table: str,
        schema_name: str | None = None,
        partition_column: str | None = None,
        key_columns: Sequence[str] = (),
        keep_previous: int | None = None,
    ) -> None:
        self.table = validate_identifier(table, "table name")
        self.schema_name = (
            None if schema_name is None else validate_identifier(schema_name, "schema name")
        )
        super().__init__(spec=spec, partition_column=partition_column, key_columns=key_columns)
        if keep_previous is not None and keep_previous < 1:
            raise DestinationError(f"{spec}: keep_previous must be a positive number of days")
        # days each replaced slice is kept (twice.destinations.previous); None: not kept
        self.keep_previous = keep_previous
        self._conn: ConnT | None = None
        self._opened_in: int | None = None  # the thread that opened (or took) the connection
        self._schema_in_write: Schema | None = None  # see _commit_record

    # -- the connection ---------------------------------------------------------------------

    @property
    def connection(self) -> ConnT:
        if self._conn is None or not self._usable(self._conn):
            self._opened_in = threading.get_ident()
            self._conn = self._connect()
        return self._conn

    def close(self) -> None:
        """Close the connection, or hand it back to ``idle_connections`` when the engine keeps
        them, the thread that opened it closes it (the ``with`` block around the write or the
        check), and :meth:`_idle` says nothing of this destination is left on it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        kept = self.idle_connections
        if not (kept is not None and self._opened_in == threading.get_ident()
                and self._idle(conn) and kept.give(self._idle_key(), conn)):
            conn.close()

    def _idle(self, conn: ConnT) -> bool:
        """Whether ``conn`` can be kept for another destination (no transaction open or
        failed, nothing of this one's work pending on it), for engines that keep them."""
        return False

    def _idle_key(self) -> str:
        """The ``idle_connections`` key of this destination's connections: what another
        destination must share to take one (the server, database and user; the file)."""
        return self.spec

    @abstractmethod
    def _connect(self) -> ConnT:
        """A new connection; :class:`DestinationUnavailableError` when there can be none."""

    def _usable(self, conn: ConnT) -> bool:
        """Whether the held connection can still serve (engines whose connections drop)."""
        return True

    # -- engine primitives ------------------------------------------------------------------

    @abstractmethod
    def schema(self) -> Schema | None:
        """Column name -> type of the existing table, or None if it does not exist."""

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """One transaction; commits on normal exit, rolls back on any exception."""

    @abstractmethod
    def _execute(self, tx: Any, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement inside ``tx``; return the affected row count."""

    @abstractmethod
    def _insert_arrow(self, tx: Any, table: pa.Table) -> None:
        """Bulk-insert a conformed table with the engine's native bulk path."""

    @abstractmethod
    def _upsert_arrow(self, tx: Any, table: pa.Table, conflict_sql: str) -> None:
        """Bulk insert-or-update; ``conflict_sql`` is the ``ON CONFLICT ...`` clause."""

    def _fetch(self, sql: str, params: Sequence[Any], columns: Schema) -> pa.Table:
        """Run a read query returning ``columns`` (in order) as a normalised table; by
        default from the rows of :meth:`_query`, each column built by :meth:`_column_array`."""
        rows = self._query(sql, params)
        values = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
        arrays = [self._column_array(list(v), t)
                  for v, t in zip(values, columns.values(), strict=True)]
        return pa.table(arrays, names=list(columns))

    def _column_array(self, values: list[Any], ctype: ColumnType) -> pa.Array:
        """One fetched column as Arrow (engines storing values as text parse them here)."""
        return pa.array(values, ctype.arrow())

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a small read query on the destination's connection.

        Outside a write it reads committed data; inside :meth:`_transaction` it runs in that
        transaction (every engine uses one connection), so it sees the uncommitted rows: the
        commit record's fingerprint relies on this.
        """

    @abstractmethod
    def _commits_table_exists(self) -> bool:
        """Whether ``twice_commits`` exists (never creating anything, not even the file)."""

    @property
    def row_key(self) -> tuple[str, ...]:
        """A row's key within its slice: ``key_columns``, and the partition column when the
        table has one, since an interval's rows may repeat another's keys (the same fund every
        day). The table's PRIMARY KEY, the upsert's conflict target and the uniqueness check
        of incoming rows all use it."""
        if self.key_columns and self.partition_column and (
                self.partition_column not in self.key_columns):
            return (*self.key_columns, self.partition_column)
        return self.key_columns

    def _upsert_key_error(self, detail: object) -> DestinationError:
        """The error of an upsert whose table has no unique constraint on the key columns."""
        return DestinationError(
            f"{self.spec}: upsert needs a PRIMARY KEY or UNIQUE constraint on exactly "
            f"{list(self.row_key)}: {str(detail).strip()}"
        )

    def _column_list(self, names: Sequence[str]) -> str:
        """``"a", "b"``: quoted column names for an INSERT or SELECT list."""
        return ", ".join(self.dialect.quote(n) for n in names)

    def _lock_for_replace(self, tx: Any, *, expected: Schema | None = None) -> None:
        """Serialise concurrent replacers of this table (engines whose writers can interleave).
        ``expected``: the columns the write conformed its rows to without reading them
        (``_known_schema``); an engine that gives one checks them under its lock."""
        return None

    def _known_schema(self) -> Schema | None:
        """The table's columns as the last write of it in this process saw them under its lock,
        when the engine keeps them (None: read them). A replace conforms its rows to these
        without a read of the catalog, and its lock checks them (``_replace``)."""
        return None

    def _after_delete(self) -> None:
        """Seam between the delete and the insert, inside the transaction.

        Does nothing; crash tests override it to kill the process right here and prove the
        old slice survives.
        """
        return None

    def _owned_write_lock(self) -> AbstractContextManager[Any]:
        """Held around a stamped write's transaction (engines whose transactions would not
        serialise the fencing read on their own)."""
        return nullcontext()

    def _lock_previous(self, tx: Any) -> None:
        """Serialise keeping writers of this table (keep_previous numbers versions by reading
        the newest): engines whose write transactions do not already serialise them."""
        return None

    def _table_exists(self, name: str) -> bool:
        """Whether table ``name`` exists in this table's schema (never creating anything)."""
        raise NotImplementedError

    def _keep_previous(self, tx: Any, schema: Schema, partition: PartitionSpec, label: str,
                       where: tuple[str, list[Any]] | None = None) -> None:
        """With keep_previous: copy the slice about to change, in the write's transaction."""
        if self.keep_previous is None:
            return
        from twice.destinations.previous import retain, slice_label

        sql, params = where if where is not None else self._where_for(schema, partition)
        retain(self, tx, schema, sql, params, slice_label(self, partition, schema))

    def versions(self, partition: PartitionSpec = None) -> list[int]:
        """The versions of one slice still held (keep_previous; see
        :mod:`twice.destinations.previous`): per slice, unlike Delta's table versions."""
        from twice.destinations.previous import versions

        return versions(self, partition)

    def read_partition_at(self, partition: PartitionSpec, version: int) -> pa.Table:
        """The slice ``partition`` as it was at one of :meth:`versions` (keep_previous)."""
        from twice.destinations.previous import read_at

        return read_at(self, partition, version)

    def _lock_fence(self, tx: Any, stamp: WriteStamp) -> None:
        """First statement of a stamped transaction: serialise writers of the same fence key."""
        return None

    def _lock_claim(self, tx: Any) -> None:
        """Serialise the writers that claim this table for a ledger (none owns it yet) or
        adopt it, where writers of different slices would otherwise run at once."""
        return None

    def _clock(self, tx: Any) -> str:
        """``committed_at``: the destination's clock, ISO-8601 UTC text."""
        return utc_now_text()

    def _check_values(self, table: pa.Table) -> None:
        """Refuse, before any write starts, values this engine cannot store as they are (so
        its fingerprint would differ from the other engines'); SQLite refuses NaN."""
        return None

    # -- shared implementation --------------------------------------------------------------

    @property
    def qualified(self) -> str:
        q = self.dialect.quote
        return f"{q(self.schema_name)}.{q(self.table)}" if self.schema_name else q(self.table)

    @property
    def table_label(self) -> str:
        """The table as commit records name it: ``schema.table`` or ``table``, unquoted."""
        return f"{self.schema_name}.{self.table}" if self.schema_name else self.table

    @property
    def commits_qualified(self) -> str:
        """``twice_commits`` in the destination table's schema (see commits.py)."""
        q = self.dialect.quote
        return (
            f"{q(self.schema_name)}.{q(COMMITS_TABLE)}" if self.schema_name else q(COMMITS_TABLE)
        )

    def replace_partition(
        self, rows: RowsLike, partition: PartitionSpec, *, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Replace exactly the slice ``partition`` with ``rows`` (all inside it), atomically.

        With a stamp (default: the active one) the commit record is committed in the same
        transaction, after the fencing check (:class:`FencedWriteError`: nothing written).
        """
        owner = resolve_stamp(stamp)
        known = self._known_schema() if isinstance(rows, pa.Table | pa.RecordBatch) else None
        if known is not None:
            try:
                return self._replace(rows, partition, owner, known)
            except SchemaMoved:
                pass  # read the table's columns now, and conform the rows to them
        return self._replace(rows, partition, owner, None)

    def _replace(self, rows: RowsLike, partition: PartitionSpec, owner: WriteStamp | None,
                 known: Schema | None) -> WriteResult:
        """:meth:`replace_partition`, conforming the rows to ``known``, the columns the last
        write of this table saw under its lock (``_known_schema``), or else to the table's
        columns read now. The lock's own read of them must then equal ``known``
        (:class:`SchemaMoved` otherwise, before anything is written: the caller reads them
        and starts again), and the rows must need no column added: what the rows were checked
        and converted against is what the table has while the write holds it, as with a read
        before the write (a column changed between that read and the lock was not seen)."""
        column = self._require_partition_column()
        try:
            existing = self.schema() if known is None else known
            table, added = self._conformed(rows, existing, owner)
            if known is not None and added:
                raise SchemaMoved
            self._check_values(table)
            schema = {**existing, **added} if existing is not None else schema_of(table)
            require_columns(schema, [column, *self.key_columns])
            slc = Slice.of(column, schema[column], partition)
            slc.check_rows(table)
            check_keys(table, self.row_key)
        except Exception:
            if known is None:
                raise
            raise SchemaMoved from None  # judged again against the columns as read now
        where, params = self._where(slc)
        commit = written = None
        with self._owned(owner) as tx:
            if existing is None:
                self._create_table(tx, schema)
            changed = self._add_columns(tx, added)
            self._lock_for_replace(tx, expected=known)
            self._keep_previous(tx, schema, partition, slc.label, (where, params))
            deleted = self._execute(tx, f"DELETE FROM {self.qualified} WHERE {where}", params)
            self._after_delete()
            if table.num_rows:
                self._insert_arrow(tx, table)
            if owner is not None:
                commit, written = self._commit_record(
                    tx, owner, "replace", slc.label, partition, table.num_rows,
                    {"rows_deleted": deleted, **changed},
                )
        return WriteResult(self.spec, slc.label, "replace", table.num_rows, deleted,
                           commit=commit, schema=written)

    def append(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Insert ``rows`` (inside ``partition`` when given).

        With a stamp (default: the active one) this is exactly once per unit of work and
        generation: if this table already has an ``append`` commit record of the stamp's
        ``uow_id`` and ``generation``, nothing is written and the result carries that record
        (``rows_written=0``). Without a stamp it is a plain INSERT, NOT exactly-once: a retry
        after an unknown outcome appends the rows again.
        """
        owner = resolve_stamp(stamp)
        existing, schema, table, label, added = self._incoming(rows, partition, owner)
        commit = written = None
        with self._owned(owner) as tx:
            if owner is not None:
                done = self._appended(owner)
                if done is not None:
                    return WriteResult(self.spec, label, "append", 0, None, commit=done)
            if existing is None:
                self._create_table(tx, schema)
            changed = self._add_columns(tx, added)
            if table.num_rows:
                self._keep_previous(tx, schema, partition, label)
                self._insert_arrow(tx, table)
            if owner is not None:
                commit, written = self._commit_record(
                    tx, owner, "append", label, partition, table.num_rows, changed
                )
        return WriteResult(self.spec, label, "append", table.num_rows, None, commit=commit,
                           schema=written)

    def upsert(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        """Insert or update by the row key (``key_columns``, with the partition column:
        :attr:`row_key`); with ``partition``, rows must lie inside it.

        With a stamp (default: the active one) the commit record (fingerprint of ``partition``,
        or of all rows) is committed in the same transaction, after the fencing check.
        """
        owner = resolve_stamp(stamp)
        if not self.key_columns:
            raise DestinationError(f"{self.spec}: upsert needs key_columns (e.g. source id)")
        existing, schema, table, label, added = self._incoming(rows, partition, owner)
        q = self.dialect.quote
        keys = ", ".join(q(k) for k in self.row_key)
        updates = [c for c in schema if c not in self.row_key]
        if updates:
            sets = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in updates)
            conflict = f"ON CONFLICT ({keys}) DO UPDATE SET {sets}"
        else:
            conflict = f"ON CONFLICT ({keys}) DO NOTHING"
        commit = written = None
        with self._owned(owner) as tx:
            if existing is None:
                self._create_table(tx, schema)
            changed = self._add_columns(tx, added)
            if table.num_rows:
                self._keep_previous(tx, schema, partition, label)
                self._upsert_arrow(tx, table, conflict)
            if owner is not None:
                commit, written = self._commit_record(
                    tx, owner, "upsert", label, partition, table.num_rows, changed
                )
        return WriteResult(self.spec, label, "upsert", table.num_rows, None, commit=commit,
                           schema=written)

    def commit_records(self, uow_id: str | None = None) -> list[CommitRecord]:
        """This table's commit records (of ``uow_id`` only, if given), by (token, committed_at).

        ``[]`` when there is no ``twice_commits`` table (nothing is created by looking).
        """
        if not self._commits_table_exists():
            return []
        p = self.dialect.placeholder
        sql = (
            f"SELECT {self._commit_names()} FROM {self.commits_qualified} "
            f"WHERE {self.dialect.quote('table_name')} = {p}"
        )
        params: list[Any] = [self.table_label]
        if uow_id is not None:
            sql += f" AND {self.dialect.quote('uow_id')} = {p}"
            params.append(uow_id)
        sql += f" ORDER BY {self.dialect.quote('token')}, {self.dialect.quote('committed_at')}"
        return [CommitRecord.from_row(row) for row in self._query(sql, params)]

    def slot_records(self, fence_key: str) -> list[CommitRecord]:
        """See :meth:`BaseDestination.slot_records`: read on the (table, fence_key) index."""
        if not self._commits_table_exists():
            return []
        q, p = self.dialect.quote, self.dialect.placeholder
        sql = (f"SELECT {self._commit_names()} FROM {self.commits_qualified} "
               f"WHERE {q('table_name')} = {p} AND {q('fence_key')} = {p} "
               f"ORDER BY {q('token')}, {q('committed_at')}")
        return [CommitRecord.from_row(row)
                for row in self._query(sql, [self.table_label, fence_key])]

    def seal(self, stamp: WriteStamp) -> bool:
        """See :meth:`BaseDestination.seal`: a ``fence`` record in ``twice_commits``, in the
        fenced transaction every stamped write takes (so it waits for a write in progress,
        and a later one under an older token sees it)."""
        with self._owned_transaction(stamp) as tx:
            self._insert_record(tx, CommitRecord.fence(stamp, table=self.table_label,
                                                        committed_at=self._clock(tx)))
        return True

    # -- commit records (stamped writes) ------------------------------------------------------

    def _owned(self, owner: WriteStamp | None) -> AbstractContextManager[Any]:
        """The write's transaction; for a stamped write, opened by the fencing steps."""
        if owner is None:
            return self._transaction()
        return self._owned_transaction(owner)

    @contextmanager
    def _owned_transaction(self, owner: WriteStamp) -> Iterator[Any]:
        if self.table == COMMITS_TABLE:
            raise DestinationError(f"{self.spec}: {COMMITS_TABLE} is twice's own table")
        with self._owned_write_lock(), self._transaction() as tx:
            self._lock_fence(tx, owner)
            self._create_commits_table(tx)
            q, p = self.dialect.quote, self.dialect.placeholder
            newest, claim = self._fence_state(owner)

            def holders(token: int) -> list[Holder]:
                return [(str(u), int(g), int(a)) for u, g, a in self._query(
                    f"SELECT {q('uow_id')}, {q('generation')}, {q('attempt')} FROM "
                    f"{self.commits_qualified} WHERE {q('table_name')} = {p} AND "
                    f"{q('fence_key')} = {p} AND {q('token')} = {p}",
                    [self.table_label, owner.fence_key, token])]

            if owner.ledger:
                if claim is None:  # this write claims the table: no other claim at once
                    self._lock_claim(tx)
                    claim = self._ledger_owner()
                commits.check_ledger(owner, claim, self.spec)
            check_fence(owner, None if newest is None else int(newest), self.spec, holders)
            yield tx

    def _fence_state(self, owner: WriteStamp) -> tuple[Any, CommitRecord | None]:
        """The newest token of ``owner``'s slot and, when it writes for a ledger, the table's
        ledger owner (``_ledger_owner``), in one statement: the owner's one-row query joined
        to the token's."""
        q, p = self.dialect.quote, self.dialect.placeholder
        newest = (f"SELECT max({q('token')}) AS twice_newest FROM {self.commits_qualified} "
                  f"WHERE {q('table_name')} = {p} AND {q('fence_key')} = {p}")
        params = [self.table_label, owner.fence_key]
        if not owner.ledger:
            ((token,),) = self._query(newest, params)
            return token, None
        owners, owner_params = self._ledger_owner_query()
        names = ", ".join(f"owners.{self.dialect.quote(name)}" for name, _ in COMMIT_COLUMNS)
        return self._newest_and_owner(self._query(
            f"SELECT newest.twice_newest, {names} FROM ({newest}) AS newest "
            f"LEFT JOIN ({owners}) AS owners ON 1 = 1", [*params, *owner_params]))

    @staticmethod
    def _newest_and_owner(rows: Sequence[Sequence[Any]]) -> tuple[Any, CommitRecord | None]:
        """``_fence_state``'s answer from its one row: the newest token, then the owner's
        ``COMMIT_COLUMNS`` (all NULL when the table has none)."""
        ((token, *record),) = rows
        found = [CommitRecord.from_row(record)] if record[0] is not None else []  # table_name
        return token, commits.ledger_owner(found)

    def _ledger_owner(self) -> CommitRecord | None:
        """:func:`~twice.destinations.commits.ledger_owner` of this table (see
        ``_ledger_owner_query``)."""
        owners, params = self._ledger_owner_query()
        rows = self._query(owners, params)
        return commits.ledger_owner(CommitRecord.from_row(row) for row in rows)

    def _ledger_owner_query(self) -> tuple[str, list[Any]]:
        """The statement reading the table's ledger owner in one small statement instead of
        every record: the newest adoption naming a ledger, else the first record naming one
        (its key in the ``extra`` JSON text; a record naming none claims nothing, adoption or
        not: :func:`~twice.destinations.commits.ledger_owner`). Each is a one-row subquery
        tagged with its rank, so one round trip answers both (SQLite, DuckDB and PostgreSQL
        all take ``ORDER BY ... LIMIT`` inside a subquery of ``FROM``)."""
        q, p = self.dialect.quote, self.dialect.placeholder
        names = self._commit_names()
        select = (f"SELECT {names} FROM {self.commits_qualified} "
                  f"WHERE {q('table_name')} = {p} AND {q('extra')} LIKE {p} "
                  f"AND {q('extra')} NOT LIKE {p} ")
        adoption = (select + f"AND {q('mode')} = {p} ORDER BY {q('token')} DESC, "
                    f"{q('committed_at')} DESC LIMIT 1")
        first = select + f"ORDER BY {q('committed_at')}, {q('token')} LIMIT 1"
        return (
            f"SELECT {names} FROM (SELECT 0 AS twice_rank, * FROM ({adoption}) AS adopted "
            f"UNION ALL SELECT 1 AS twice_rank, * FROM ({first}) AS named) AS owners "
            "ORDER BY twice_rank LIMIT 1",
            [self.table_label, *NAMES_A_LEDGER, ADOPT_MODE, self.table_label, *NAMES_A_LEDGER])

    def adopt(self, stamp: WriteStamp, *, note: str, operator: str) -> CommitRecord:
        """See :meth:`BaseDestination.adopt`: an ``adopt`` record in ``twice_commits``."""
        if self.table == COMMITS_TABLE:
            raise DestinationError(f"{self.spec}: {COMMITS_TABLE} is twice's own table")
        with self._owned_write_lock(), self._transaction() as tx:
            self._lock_fence(tx, stamp)
            self._lock_claim(tx)
            self._create_commits_table(tx)
            q, p = self.dialect.quote, self.dialect.placeholder
            ((newest,),) = self._query(
                f"SELECT max({q('token')}) FROM {self.commits_qualified} "
                f"WHERE {q('table_name')} = {p}", [self.table_label])
            commits.check_adoption(stamp, None if newest is None else int(newest), self.spec)
            record = CommitRecord.adoption(stamp, table=self.table_label, note=note,
                                           operator=operator, committed_at=self._clock(tx))
            self._insert_record(tx, record)
        return record

    def _create_commits_table(self, tx: Any) -> None:
        self._execute(tx, _commits_ddl(self.dialect, self.commits_qualified))
        if self.dialect.index_commits:
            self._create_commit_indexes(tx)

    def _create_commit_indexes(self, tx: Any, names: Iterable[str] | None = None) -> None:
        """``COMMIT_INDEXES`` (or those of them named), each unless it exists."""
        for name in COMMIT_INDEXES if names is None else names:
            self._execute(tx, _commit_index_ddl(self.dialect, self.commits_qualified, name))

    def _commit_names(self) -> str:
        return ", ".join(self.dialect.quote(name) for name, _ in COMMIT_COLUMNS)

    def _appended(self, owner: WriteStamp) -> CommitRecord | None:
        """The existing ``append`` record of this unit and generation in this table, if any."""
        q, p = self.dialect.quote, self.dialect.placeholder
        rows = self._query(
            f"SELECT {self._commit_names()} FROM {self.commits_qualified} "
            f"WHERE {q('table_name')} = {p} AND {q('uow_id')} = {p} AND {q('generation')} = {p} "
            f"AND {q('mode')} = {p} ORDER BY {q('token')}, {q('committed_at')}",
            [self.table_label, owner.uow_id, owner.generation, "append"],
        )
        return CommitRecord.from_row(rows[0]) if rows else None

    def _commit_record(
        self, tx: Any, owner: WriteStamp, mode: str, label: str, partition: PartitionSpec,
        rows_written: int, extra: dict[str, Any],
    ) -> tuple[CommitRecord, Schema]:
        """Fingerprint the slice as it is inside ``tx``, let the attempt's admission decide on
        it (``twice.destinations.landing``: raising rolls the whole write back), and insert
        the commit record; returns it with the table's columns the fingerprint read."""
        schema = self._existing_schema()
        self._schema_in_write = schema  # nothing in here changes it: read it once
        try:
            count, checksum, algorithm, columns = self._slice_fingerprint(partition, schema)
            record = CommitRecord.create(
                owner, table=self.table_label, slice=label, mode=mode,
                rows_written=rows_written, row_count=count, checksum=checksum,
                algorithm=algorithm, columns=columns, committed_at=self._clock(tx), extra=extra,
            )
            admit(Landing(self.spec, label, mode, rows_written, count,
                          lambda names: self.null_counts(partition, names)))
        finally:
            self._schema_in_write = None
        self._insert_record(tx, record)
        return record, schema

    def _insert_record(self, tx: Any, record: CommitRecord) -> None:
        marks = ", ".join(self.dialect.placeholder for _ in COMMIT_COLUMNS)
        self._execute(
            tx,
            f"INSERT INTO {self.commits_qualified} ({self._commit_names()}) VALUES ({marks})",
            record.to_row(),
        )

    def _slice_fingerprint(
        self, partition: PartitionSpec, schema: Schema
    ) -> tuple[int, str, str, tuple[str, ...]]:
        """(row count, checksum, algorithm, columns) of the slice, as ``fingerprint()`` will
        compute it by default afterwards (``twice-fp-v3`` over every column, key or not);
        ``algorithm "none"`` (row count only, empty checksum) when the slice cannot be
        fingerprinted (a PostgreSQL database that is not UTF8): the write still commits."""
        from twice.destinations.fingerprint import record_fingerprint

        return record_fingerprint(self, schema, partition)

    def read_partition(
        self, partition: PartitionSpec = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows of one slice (all rows when ``partition`` is None), as Arrow."""
        schema = self._existing_schema()
        names = list(schema) if columns is None else list(columns)
        require_columns(schema, names)
        where, params = self._where_for(schema, partition)
        select = ", ".join(self.dialect.quote(n) for n in names)
        return self._fetch(
            f"SELECT {select} FROM {self.qualified} WHERE {where}", params,
            {n: schema[n] for n in names},
        )

    def null_counts(self, partition: PartitionSpec, columns: Sequence[str]) -> dict[str, int]:
        """Nulls per column within the slice (acceptance: required non-null columns)."""
        schema = self._existing_schema()
        require_columns(schema, columns)
        if not columns:
            return {}
        where, params = self._where_for(schema, partition)
        q = self.dialect.quote
        exprs = ", ".join(f"count(*) - count({q(c)})" for c in columns)
        (row,) = self._query(f"SELECT {exprs} FROM {self.qualified} WHERE {where}", params)
        return {c: int(v or 0) for c, v in zip(columns, row, strict=True)}

    def row_count(self, partition: PartitionSpec = None) -> int:
        """``count(*)`` of the slice (all rows when ``partition`` is None)."""
        where, params = self._where_for(self._existing_schema(), partition)
        ((count,),) = self._query(f"SELECT count(*) FROM {self.qualified} WHERE {where}", params)
        return int(count)

    def fingerprint_sums(
        self, partition: PartitionSpec, columns: Sequence[str]
    ) -> tuple[int, int, int]:
        """(row count, high sum, low sum) of ``twice-fp-v3`` over ``columns`` (sorted).

        The slice's columns are read as Arrow record batches (:meth:`_fingerprint_batches`,
        each engine's fastest bulk read) and hashed vectorised in
        :func:`twice.destinations.fingerprint.batches_sums`; inside a write it reads in that
        transaction, as :meth:`_query`.
        """
        from twice.destinations.fingerprint import batches_sums

        schema = self._existing_schema()
        require_columns(schema, columns)
        where, params = self._where_for(schema, partition)
        typed = [(c, schema[c]) for c in columns]
        return batches_sums(self._fingerprint_batches(where, params, typed), typed)

    def _fingerprint_batches(self, where: str, params: Sequence[Any],
                             typed: Sequence[tuple[str, ColumnType]]
                             ) -> Iterator[pa.RecordBatch | pa.Table]:
        """The ``typed`` columns of the rows matching ``where``, in that order, as Arrow
        (engines override with their bulk read; this default reads through :meth:`_fetch`)."""
        select = ", ".join(self.dialect.quote(n) for n, _ in typed)
        yield self._fetch(f"SELECT {select} FROM {self.qualified} WHERE {where}", params,
                          dict(typed))

    def fingerprint_sums_v2(
        self, partition: PartitionSpec, columns: Sequence[str]
    ) -> tuple[int, int, int]:
        """(row count, sum of high 30 bits, sum of low 30 bits) of the ``twice-fp-v2`` row
        hashes, in-database (md5 of the row text; recorded v2 fingerprints still verify).

        :mod:`twice.destinations.fingerprint` turns these into a checksum; see it for the
        definition.
        Float columns on an engine without twice's float function in SQL (PostgreSQL): the
        other columns' text is computed in the database, the float values are streamed
        (exactly) and the rows hashed in Python, with the same definition.
        """
        from twice.destinations.fingerprint import fingerprint_sql, streamed_sql, streamed_sums

        schema = self._existing_schema()
        require_columns(schema, columns)
        where, params = self._where_for(schema, partition)
        typed = [(c, schema[c]) for c in columns]
        if not self.dialect.float_text_in_sql and any(t.kind == "float" for _, t in typed):
            sql, floats = streamed_sql(self.dialect, self.qualified, where, typed)
            return streamed_sums(self._stream(sql, params), floats)
        sql = fingerprint_sql(self.dialect, self.qualified, where, typed)
        ((count, high, low),) = self._query(sql, params)
        return int(count), int(high or 0), int(low or 0)

    def _stream(self, sql: str, params: Sequence[Any]) -> Iterator[Sequence[Any]]:
        """The rows of a read query, for streamed fingerprints (engines override to fetch in
        batches); inside a write it runs in that transaction, as :meth:`_query`."""
        yield from self._query(sql, params)

    # -- helpers ----------------------------------------------------------------------------

    def _incoming(
        self, rows: RowsLike, partition: PartitionSpec, owner: WriteStamp | None
    ) -> tuple[Schema | None, Schema, pa.Table, str, Schema]:
        """Rows conformed to the table (existing schema, schema, rows, slice label, columns
        to add), checked before any write starts: key columns present and unique, rows inside
        ``partition``, a change of the table's columns one the write may make
        (:meth:`_conformed`)."""
        existing = self.schema()
        table, added = self._conformed(rows, existing, owner)
        self._check_values(table)
        schema = {**existing, **added} if existing is not None else schema_of(table)
        require_columns(schema, self.key_columns)
        label = self._check_slice(schema, table, partition)
        check_keys(table, self.row_key)
        return existing, schema, table, label, added

    # -- schema changes -----------------------------------------------------------------------

    def _conformed(self, rows: RowsLike, existing: Schema | None, owner: WriteStamp | None
                   ) -> tuple[pa.Table, Schema]:
        """``rows`` conformed to the table, and the new columns (name -> type) the write adds.

        An additive change (new nullable columns of a known type, nothing else different) is
        made only by a stamped write whose run accepted schema changes (``WriteStamp.
        add_columns``: ``--accept-schema-change``); any other change is refused
        (:class:`SchemaChangeRefusedError`, one line naming the table, the columns and what to
        do), before anything is written."""
        if existing is None:
            return to_arrow(rows), {}
        try:
            table = to_arrow(rows, target=existing, new_columns=True)
        except SchemaMismatchError as exc:
            raise self._schema_refusal(exc) from None
        added = {name: ctype for name, ctype in schema_of(table).items() if name not in existing}
        if added and (owner is None or not owner.add_columns):
            shown = ", ".join(f"{name!r} ({self.dialect.ddl_type(ctype)})"
                              for name, ctype in added.items())
            statements = "; ".join(self._add_column_sql(name, ctype)
                                   for name, ctype in added.items())
            raise SchemaChangeRefusedError(
                f"{self.spec}: the output has new column{'s' if len(added) > 1 else ''} "
                f"{shown} that table {self.table_label} lacks, an additive schema change that "
                "twice makes only when told to: rerun with --accept-schema-change (twice "
                "run or twice backfill) and it "
                f"runs {statements} in the write's transaction (rows already in the table hold "
                "NULL)" + ("" if owner is not None else "; this write is no twice run's (it has "
                           "no write stamp): run that statement yourself first"), added=added,
            )
        return table, added

    def _add_column_sql(self, name: str, ctype: ColumnType, *, if_not_exists: bool = False,
                        suffix: str = "", table: str | None = None) -> str:
        """``ALTER TABLE t ADD COLUMN name TYPE`` for this engine."""
        guard = "IF NOT EXISTS " if if_not_exists else ""
        return (f"ALTER TABLE {table or self.qualified} ADD COLUMN {guard}"
                f"{self.dialect.quote(name)} {self.dialect.ddl_type(ctype)}{suffix}")

    def _add_columns(self, tx: Any, added: Schema) -> dict[str, Any]:
        """Inside the write's transaction ``tx``: add the ``added`` columns (nullable) the
        table still lacks, and to the side table of replaced rows (keep_previous) when there is
        one. What was added (``{"columns_added": {name: DDL type}}``, empty when nothing was)
        goes into the commit record's ``extra``: the commit record, and the ledger's
        observation of the attempt holding it, record the change."""
        if not added:
            return {}
        now = self._existing_schema()  # in the transaction: another writer may have added it
        missing = {name: ctype for name, ctype in added.items() if name not in now}
        if not missing:
            return {}
        guard = self.dialect.add_column_if_not_exists
        targets = [self.qualified]
        if self.keep_previous is not None:
            from twice.destinations.previous import side_tables

            rows_name = side_tables(self)[0]
            if self._table_exists(rows_name):
                q = self.dialect.quote
                targets.append(f"{q(self.schema_name)}.{q(rows_name)}" if self.schema_name
                               else q(rows_name))
        for name, ctype in missing.items():
            for target in targets:
                self._execute(tx, self._add_column_sql(name, ctype, if_not_exists=guard,
                                                       table=target))
        return {"columns_added": {name: self.dialect.ddl_type(ctype)
                                  for name, ctype in missing.items()}}

    def _schema_refusal(self, exc: SchemaMismatchError) -> SchemaChangeRefusedError:
        """The one-line refusal of a change twice does not make itself: the table, the
        columns, and the statement to run (or a new table) instead."""
        q, dialect = self.dialect.quote, self.dialect
        where = f"{self.spec}: table {self.table_label}"
        then = "then rerun with --accept-schema-change"
        kinds: dict[str, Any] = {"added": exc.added, "not_null": exc.not_null,
                                 "missing": exc.missing, "retyped": exc.retyped}
        if exc.retyped:
            shown = "; ".join(f"column {name!r} is {got} in the output but {has} in the table"
                              for name, (got, has) in exc.retyped.items())
            if dialect.alter_type_sql is None:
                todo = (f"write to a new table ({self.engine} cannot change a column's "
                        "type)")
            else:
                statements = "; ".join(
                    dialect.alter_type_sql.format(table=self.qualified, column=q(name),
                                                  type=dialect.ddl_type(got))
                    for name, (got, _) in exc.retyped.items())
                todo = f"change it yourself ({statements}), {then}, or write to a new table"
            return SchemaChangeRefusedError(
                f"{where}: {shown}; twice changes no column's type: convert it in the task, "
                f"or {todo}", **kinds)
        if exc.missing:
            gone = _columns_named(exc.missing, "column")
            if exc.added:
                old, new = exc.missing[0], next(iter(exc.added))
                return SchemaChangeRefusedError(
                    f"{where}: {gone} not in the output and "
                    f"{_columns_named(list(exc.added), 'new column')} in it: twice neither "
                    f"drops nor renames a column; if {old!r} was renamed to {new!r}, run ALTER "
                    f"TABLE {self.qualified} RENAME COLUMN {q(old)} TO {q(new)}, {then}; "
                    f"otherwise return {old!r} (NULL where it has no value) or write to a new "
                    "table", **kinds)
            drops = "; ".join(f"ALTER TABLE {self.qualified} DROP COLUMN {q(name)}"
                              for name in exc.missing)
            return SchemaChangeRefusedError(
                f"{where}: {gone} not in the output: twice never drops a column: return it "
                f"(NULL where it has no value), or drop it yourself ({drops}), {then}, or write "
                "to a new table", **kinds)
        if exc.not_null:
            name = exc.not_null[0]
            ctype = exc.added[name]
            assert ctype is not None
            statement = self._add_column_sql(name, ctype, suffix=" NOT NULL DEFAULT <value>")
            return SchemaChangeRefusedError(
                f"{where}: new column {name!r} is NOT NULL (a non-nullable field) without a "
                "default, which the rows already in the table cannot satisfy: twice adds "
                f"nullable columns only; make the field nullable, or add the column yourself "
                f"({statement}), {then}", **kinds)
        unknown = [name for name, ctype in exc.added.items() if ctype is None]
        if unknown:
            return SchemaChangeRefusedError(
                f"{where}: new column {unknown[0]!r} holds only nulls, so its type is unknown "
                "and twice cannot add it: return it typed (e.g. pa.array(values, pa.string())), "
                f"or add it yourself (ALTER TABLE {self.qualified} ADD COLUMN {q(unknown[0])} "
                f"<type>), {then}", **kinds)
        return SchemaChangeRefusedError(f"{where}: {exc}", **kinds)

    def _check_slice(self, schema: Schema, table: pa.Table, partition: PartitionSpec) -> str:
        return checked_slice_label(self, schema, table, partition)

    def _require_partition_column(self) -> str:
        return required_partition_column(self)

    def _existing_schema(self) -> Schema:
        if self._schema_in_write is not None:
            return self._schema_in_write
        schema = self.schema()
        if schema is None:
            raise DestinationError(f"{self.spec}: table {self.qualified} does not exist")
        return schema

    def _where_for(self, schema: Schema, partition: PartitionSpec) -> tuple[str, list[Any]]:
        if partition is None:
            return "1 = 1", []
        column = self._require_partition_column()
        require_columns(schema, [column])
        return self._where(Slice.of(column, schema[column], partition))

    def _where(self, slc: Slice) -> tuple[str, list[Any]]:
        column = self.dialect.quote(slc.column)
        p = self.dialect.placeholder
        bind = self.dialect.bind
        if slc.is_range:
            return f"{column} >= {p} AND {column} < {p}", [
                bind(slc.low, slc.ctype), bind(slc.high, slc.ctype)
            ]
        return f"{column} = {p}", [bind(slc.value, slc.ctype)]

    def _create_table(self, tx: Any, schema: Schema) -> None:
        q = self.dialect.quote
        columns = [f"{q(name)} {self.dialect.ddl_type(ctype)}" for name, ctype in schema.items()]
        if self.key_columns and self.dialect.key_constraint:
            columns.append("PRIMARY KEY (" + ", ".join(q(k) for k in self.row_key) + ")")
        self._execute(tx, f"CREATE TABLE IF NOT EXISTS {self.qualified} ({', '.join(columns)})")
        if self.partition_column and self.dialect.index_partition_column:
            digest = hashlib.sha256(f"{self.qualified}.{self.partition_column}".encode())
            index = q(f"twice_ix_{digest.hexdigest()[:16]}")
            self._execute(
                tx,
                f"CREATE INDEX IF NOT EXISTS {index} ON {self.qualified} "
                f"({q(self.partition_column)})",
            )


#: ``LIKE`` and ``NOT LIKE`` patterns of a commit record's ``extra`` JSON text that names a
#: ledger, as ``CommitRecord.to_row`` writes it: ``LEDGER_KEY`` with a non-empty string (the
#: first pattern alone also matches ``""``, its ``_`` taking the closing quote).
NAMES_A_LEDGER = (f'%"{LEDGER_KEY}": "_%', f'%"{LEDGER_KEY}": ""%')


@functools.lru_cache(maxsize=1024)
def _commits_ddl(dialect: SqlDialect, qualified: str) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the commit records at ``qualified`` (built once: every
    stamped write runs it)."""
    q = dialect.quote
    columns = ", ".join(
        f"{q(name)} {dialect.ddl_type(ColumnType(kind))}"
        + (" NOT NULL" if name in ("table_name", "fence_key", "token") else "")
        for name, kind in COMMIT_COLUMNS
    )
    return f"CREATE TABLE IF NOT EXISTS {qualified} ({columns})"


@functools.lru_cache(maxsize=1024)
def _commit_index_ddl(dialect: SqlDialect, qualified: str, name: str) -> str:
    """``CREATE INDEX IF NOT EXISTS`` of ``COMMIT_INDEXES[name]`` on ``qualified``."""
    q = dialect.quote
    return (f"CREATE INDEX IF NOT EXISTS {q(name)} ON {qualified} "
            f"({', '.join(q(column) for column in COMMIT_INDEXES[name])})")
