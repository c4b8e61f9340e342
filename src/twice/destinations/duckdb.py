"""DuckDB destinations: ``duckdb:///path/to/file.duckdb#table`` (or ``#schema.table``).

Rows are inserted by registering the Arrow table and running ``INSERT ... SELECT`` over it, a
columnar scan with no per-row Python. DuckDB writes its WAL only at commit, so a process killed
between the delete and the insert leaves nothing of the transaction behind.

``upsert`` is one ``MERGE`` of the registered Arrow table on the key columns (DuckDB 1.4 and
later): matched rows are updated in place, the others inserted. It needs no constraint, so the
tables twice creates on DuckDB declare no PRIMARY KEY: DuckDB enforces one with an ART index
whose upkeep made an upsert of a million new keys ~6x a plain insert (and the index is of no
use for reads, which prune by zone maps). Keys stay unique because twice refuses a batch that
repeats a key, and every write to one file in this process (stamped or not) is serialised by
the per-file lock below. A table created with a PRIMARY KEY (by an older twice, or by hand)
keeps it and merges the same way. Before DuckDB 1.4 (no MERGE) tables keep the PRIMARY KEY and
the upsert is ``INSERT ... ON CONFLICT``.

Commit records of stamped writes (see :mod:`twice.destinations.commits`) go to
``twice_commits`` in the destination table's schema (``main``, or ``s`` for ``#s.t``), in the
write's transaction. DuckDB lets one process open a file for writing; inside that process,
stamped writes to one file are serialised by a per-file lock, because DuckDB's optimistic
concurrency control would not stop two transactions that both read "no newer token" and then
only insert.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import duckdb
import pyarrow as pa

from twice.core import processes
from twice.destinations.base import DestinationSpec, SqlDialect, split_table_name
from twice.destinations.columns import ColumnType, Schema, SchemaError, float_texts
from twice.destinations.commits import WriteStamp
from twice.destinations.embedded import EmbeddedSqlDestination, database_file
from twice.destinations.errors import DestinationUnavailableError
from twice.destinations.rows import to_arrow

if TYPE_CHECKING:
    from duckdb.func import PythonUDFType

_HAS_MERGE = tuple(int(part) for part in re.findall(r"\d+", duckdb.__version__)[:2]) >= (1, 4)
"""Whether this DuckDB has ``MERGE INTO`` (1.4 and later): the upsert path (module doc)."""

_FILE_LOCKS: dict[str, threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: str) -> threading.Lock:
    """One lock per database file in this process (stamped writes; see the module doc)."""
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(os.path.realpath(path), threading.Lock())


class DuckDBDialect(SqlDialect):
    name = "duckdb"
    placeholder = "?"
    unit_separator = "chr(31)"
    # DuckDB prunes by zone maps; an ART index would only slow bulk inserts down.
    index_partition_column = False
    index_commits = False
    key_constraint = not _HAS_MERGE  # MERGE needs no constraint (module doc)
    ddl_types: ClassVar[dict[str, str]] = {
        "integer": "BIGINT", "float": "DOUBLE", "boolean": "BOOLEAN", "string": "VARCHAR",
        "binary": "BLOB", "date": "DATE", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ",
    }

    float_text_in_sql = True  # twice_float_text, registered on twice's connections

    text_sql: ClassVar[dict[str, str]] = {
        "date": "strftime({value}, '%Y-%m-%d')",
        "timestamp": "strftime({value}, '%Y-%m-%d %H:%M:%S.%f')",
        # timezone() needs ICU, bundled with the Python package
        "timestamptz": "(strftime(timezone('UTC', {value}), '%Y-%m-%d %H:%M:%S.%f') || 'Z')",
        "binary": "lower(hex({value}))",
        # twice's own function: CAST(double AS VARCHAR) is DuckDB's choice
        "float": "twice_float_text(CAST({value} AS DOUBLE))",
    }

    def hash60_sql(self, text_sql: str) -> str:
        # md5() is a stable function; hash() and md5_number() are not (see DESIGN.md).
        return f"CAST('0x' || substr(md5({text_sql}), 1, 15) AS BIGINT)"


class DuckDBDestination(EmbeddedSqlDestination[duckdb.DuckDBPyConnection]):
    engine = "duckdb"
    dialect = DuckDBDialect()
    open_errors = (duckdb.Error,)
    machinery_errors = (duckdb.IOException,)  # a full disk, an I/O error

    def _open(self) -> duckdb.DuckDBPyConnection:
        conn = _connect_waiting(self.path)
        _register_functions(conn)
        return conn

    def _has_table(self, name: str) -> bool:
        """A table or (user) view ``name`` in the schema. From DuckDB's own catalog functions:
        the ``information_schema.tables`` view over them costs several times as much, and a
        write looks two or three times."""
        schema = self.schema_name or "main"
        found = self.connection.execute(
            "SELECT (SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND "
            "table_name = ?) + (SELECT count(*) FROM duckdb_views() WHERE NOT internal AND "
            "schema_name = ? AND view_name = ?)", [schema, name, schema, name],
        ).fetchall()
        return bool(found[0][0])

    def _is_view(self, name: str) -> bool:
        found = self.connection.execute(
            "SELECT count(*) FROM duckdb_views() WHERE NOT internal AND schema_name = ? AND "
            "view_name = ?", [self.schema_name or "main", name],
        ).fetchall()
        return bool(found[0][0])

    def _read_schema(self) -> Schema | None:
        if not self._has_table(self.table):
            return None
        try:
            relation = self.connection.sql(f"SELECT * FROM {self.qualified} LIMIT 0")
        except (duckdb.CatalogException, duckdb.BinderException):
            if self._is_view(self.table):
                return None  # a view over a table dropped since: it holds nothing now
            raise
        schema: Schema = {}
        for column in relation.to_arrow_table().schema:
            try:
                schema[column.name] = ColumnType.from_arrow(column.type, column.name)
            except SchemaError:
                schema[column.name] = ColumnType("unsupported", engine_type=str(column.type))
        return schema

    def _owned_write_lock(self) -> threading.Lock:
        return _file_lock(self.path)

    @contextmanager
    def _owned(self, owner: WriteStamp | None) -> Iterator[duckdb.DuckDBPyConnection]:
        """Unstamped writes take the per-file lock too: two concurrent upserts of one new key
        must not both insert it (the tables declare no key constraint; see the module doc)."""
        if owner is not None:
            with super()._owned(owner) as tx:
                yield tx
            return
        with _file_lock(self.path), self._transaction() as tx:
            yield tx

    def _execute(self, tx: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()
                 ) -> int:
        result = tx.execute(sql, list(params)).fetchall()
        # DML answers with one row holding the affected count; DDL answers with nothing.
        return int(result[0][0]) if result and result[0] and result[0][0] is not None else 0

    @contextmanager
    def _registered(self, tx: duckdb.DuckDBPyConnection, table: pa.Table) -> Iterator[str]:
        name = f"twice_incoming_{uuid.uuid4().hex[:12]}"
        tx.register(name, table)
        try:
            yield name
        finally:
            tx.unregister(name)

    def _select_from(self, source: str, table: pa.Table) -> str:
        names = self._column_list(table.column_names)
        return f"INSERT INTO {self.qualified} ({names}) SELECT {names} FROM {source}"

    def _insert_arrow(self, tx: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
        with self._registered(tx, table) as source:
            tx.execute(self._select_from(source, table))

    def _upsert_arrow(self, tx: duckdb.DuckDBPyConnection, table: pa.Table, conflict_sql: str
                      ) -> None:
        with self._registered(tx, table) as source:
            if _HAS_MERGE:
                tx.execute(self._merge_sql(source, table.column_names))
                return
            try:
                tx.execute(f"{self._select_from(source, table)} {conflict_sql}")
            except duckdb.BinderException as exc:
                raise self._upsert_key_error(exc) from None

    def _merge_sql(self, source: str, names: Sequence[str]) -> str:
        """One ``MERGE`` of ``source`` into the table on the key columns: the batch's keys are
        unique and not null (checked before the write), so each incoming row updates the
        rows holding its key, or is inserted."""
        q = self.dialect.quote
        target, incoming = q("twice_target"), q("twice_incoming")
        on = " AND ".join(f"{target}.{q(k)} = {incoming}.{q(k)}" for k in self.row_key)
        updates = [n for n in names if n not in self.row_key]
        matched = (
            "WHEN MATCHED THEN UPDATE SET "
            + ", ".join(f"{q(n)} = {incoming}.{q(n)}" for n in updates) + " "
        ) if updates else ""
        values = ", ".join(f"{incoming}.{q(n)}" for n in names)
        return (
            f"MERGE INTO {self.qualified} AS {target} USING {source} AS {incoming} ON {on} "
            f"{matched}WHEN NOT MATCHED THEN INSERT ({self._column_list(names)}) "
            f"VALUES ({values})"
        )

    def _fetch(self, sql: str, params: Sequence[Any], columns: Schema) -> pa.Table:
        result = self.connection.sql(sql, params=list(params)).to_arrow_table()
        return to_arrow(result, target=columns)

    def _fingerprint_batches(self, where: str, params: Sequence[Any],
                             typed: Sequence[tuple[str, ColumnType]]
                             ) -> Iterator[pa.RecordBatch]:
        """The columns as DuckDB's own Arrow stream (no text, no Python per value): the
        ``twice-fp-v3`` hash runs on these batches (see fingerprint_sums)."""
        select = ", ".join(self.dialect.quote(n) for n, _ in typed)
        relation = self.connection.sql(
            f"SELECT {select} FROM {self.qualified} WHERE {where}", params=list(params))
        yield from relation.to_arrow_reader(_FINGERPRINT_BATCH_ROWS)


_FINGERPRINT_BATCH_ROWS = 1 << 17
LOCK_WAIT_SECONDS = 60.0
"""How long opening a file waits while another process holds DuckDB's file lock."""


def _connect_waiting(path: str) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect(path)``, waiting while another process holds the file (DuckDB lets one
    process open a file for writing, and twice holds it only for one write or read): several
    workers or runs on one warehouse take turns, as SQLite's busy timeout makes them, instead
    of failing an attempt on a lock that is released a moment later. Past
    ``LOCK_WAIT_SECONDS`` the error is raised (the destination is unavailable). DuckDB has no
    error type of its own for a held lock: it is the IOException that says so."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    pause = 0.01
    while True:
        try:
            return duckdb.connect(path)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                raise
            _refuse_if_holder_stopped(path, exc)
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _refuse_if_holder_stopped(path: str, exc: duckdb.IOException) -> None:
    """DuckDB names the process holding the file's lock; when it is stopped (SIGSTOP, Ctrl-Z)
    it holds the lock until resumed or ended, so waiting is pointless: say so at once."""
    named = re.search(r"\(PID ([0-9]+)\)", str(exc))
    holder = None if named is None else processes.look(int(named.group(1)))
    if holder is None or not holder.stopped:
        return
    raise DestinationUnavailableError(
        f"duckdb://{path}: the file's lock is held by process {holder.describe()}, which "
        f"holds it until it is resumed (`kill -CONT {holder.pid}`) or ended; not waiting "
        f"for it ({str(exc).splitlines()[0]})"
    ) from None


def _register_functions(conn: duckdb.DuckDBPyConnection) -> None:
    """``twice_float_text(DOUBLE) -> VARCHAR``: the canonical float text of
    :func:`twice.destinations.columns.float_text`, vectorised over Arrow arrays. DuckDB's own
    ``CAST(double AS VARCHAR)`` happens to agree today, but it is DuckDB's to change; a
    stored fingerprint must not depend on it. Registered once per database instance."""
    try:
        conn.create_function(
            "twice_float_text", float_texts, ["DOUBLE"], "VARCHAR", type=_arrow_udf(),
            side_effects=False,
        )
    except duckdb.CatalogException:
        # Connections to one file in one process share DuckDB's database instance, and its
        # catalog already holds the function (registered by an earlier twice connection).
        pass


def _arrow_udf() -> PythonUDFType:
    """The ``type=`` of a vectorised (Arrow) Python function."""
    try:
        from duckdb.func import PythonUDFType
    except ImportError:  # DuckDB < 1.4 named the module duckdb.functional
        udf_type: PythonUDFType = importlib.import_module("duckdb.functional").PythonUDFType.ARROW
        return udf_type
    return PythonUDFType.ARROW


def open_destination(spec: DestinationSpec) -> DuckDBDestination:
    """Open ``duckdb:///abs/path.duckdb#[schema.]table``."""
    path = database_file(spec)
    schema_name, table = split_table_name(spec.fragment, default_schema="main")
    shown = table if schema_name == "main" else f"{schema_name}.{table}"
    canonical = f"duckdb://{path}{spec.twice_query()}#{shown}"
    return DuckDBDestination(
        str(path), spec=canonical, table=table,
        schema_name=None if schema_name == "main" else schema_name,
        partition_column=spec.partition_column, key_columns=spec.key_columns,
        keep_previous=spec.keep_previous,
    )
