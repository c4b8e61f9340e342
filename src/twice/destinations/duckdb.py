"""DuckDB destinations: ``duckdb:///path/to/file.duckdb#table`` (or ``#schema.table``).

Rows are inserted by registering the Arrow table and running ``INSERT ... SELECT`` over it, a
columnar scan with no per-row Python. DuckDB writes its WAL only at commit, so a process killed
between the delete and the insert leaves nothing of the transaction behind.

Commit records of stamped writes (see :mod:`twice.destinations.commits`) go to
``twice_commits`` in the destination table's schema (``main``, or ``s`` for ``#s.t``), in the
write's transaction. DuckDB lets one process open a file for writing; inside that process,
stamped writes to one file are serialised by a per-file lock, because DuckDB's optimistic
concurrency control would not stop two transactions that both read "no newer token" and then
only insert.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import duckdb
import pyarrow as pa

from twice.destinations.base import DestinationSpec, SqlDestination, SqlDialect, split_table_name
from twice.destinations.columns import ColumnType, Schema, SchemaError, float_texts
from twice.destinations.commits import COMMITS_TABLE
from twice.destinations.errors import DestinationError, DestinationUnavailableError
from twice.destinations.rows import to_arrow

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

    _DDL: ClassVar[dict[str, str]] = {
        "integer": "BIGINT", "float": "DOUBLE", "boolean": "BOOLEAN", "string": "VARCHAR",
        "binary": "BLOB", "date": "DATE", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ",
    }

    def ddl_type(self, ctype: ColumnType) -> str:
        if ctype.kind == "decimal":
            return f"DECIMAL({ctype.precision},{ctype.scale})"
        return self._DDL[ctype.kind]

    float_text_in_sql = True  # twice_float_text, registered on twice's connections

    def canonical_text_sql(self, column_sql: str, ctype: ColumnType) -> str:
        kind = ctype.kind
        if kind == "date":
            return f"strftime({column_sql}, '%Y-%m-%d')"
        if kind == "timestamp":
            return f"strftime({column_sql}, '%Y-%m-%d %H:%M:%S.%f')"
        if kind == "timestamptz":  # timezone() needs ICU, bundled with the Python package
            return f"(strftime(timezone('UTC', {column_sql}), '%Y-%m-%d %H:%M:%S.%f') || 'Z')"
        if kind == "binary":
            return f"lower(hex({column_sql}))"
        if kind == "float":  # twice's own function: CAST(double AS VARCHAR) is DuckDB's choice
            return f"twice_float_text(CAST({column_sql} AS DOUBLE))"
        return f"CAST({column_sql} AS VARCHAR)"

    def hash60_sql(self, text_sql: str) -> str:
        # md5() is a stable function; hash() and md5_number() are not (see DESIGN.md).
        return f"CAST('0x' || substr(md5({text_sql}), 1, 15) AS BIGINT)"


class DuckDBDestination(SqlDestination):
    engine = "duckdb"
    dialect = DuckDBDialect()

    def __init__(self, path: str, *, spec: str, table: str, **kwargs: Any) -> None:
        super().__init__(spec=spec, table=table, **kwargs)
        self.path = path
        self._conn: duckdb.DuckDBPyConnection | None = None

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        if self._conn is None:
            try:
                conn = duckdb.connect(self.path)
            except duckdb.Error as exc:
                raise DestinationUnavailableError(f"{self.spec}: cannot open {self.path}: {exc}"
                                                  ) from None
            _register_functions(conn)
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def schema(self) -> Schema | None:
        if self._conn is None and not os.path.exists(self.path):
            return None  # do not create an empty database file just by looking
        found = self.connection.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema = ? AND table_name = ?",
            [self.schema_name or "main", self.table],
        ).fetchall()
        if not found[0][0]:
            return None
        relation = self.connection.sql(f"SELECT * FROM {self.qualified} LIMIT 0")
        schema: Schema = {}
        for column in relation.to_arrow_table().schema:
            try:
                schema[column.name] = ColumnType.from_arrow(column.type, column.name)
            except SchemaError:
                schema[column.name] = ColumnType("unsupported", engine_type=str(column.type))
        return schema

    def _commits_table_exists(self) -> bool:
        if self._conn is None and not os.path.exists(self.path):
            return False  # do not create an empty database file just by looking
        found = self.connection.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema = ? AND table_name = ?",
            [self.schema_name or "main", COMMITS_TABLE],
        ).fetchall()
        return bool(found[0][0])

    def _owned_write_lock(self) -> threading.Lock:
        return _file_lock(self.path)

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        conn = self.connection
        conn.execute("BEGIN TRANSACTION")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

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
        q = self.dialect.quote
        names = ", ".join(q(n) for n in table.column_names)
        return f"INSERT INTO {self.qualified} ({names}) SELECT {names} FROM {source}"

    def _insert_arrow(self, tx: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
        with self._registered(tx, table) as source:
            tx.execute(self._select_from(source, table))

    def _upsert_arrow(self, tx: duckdb.DuckDBPyConnection, table: pa.Table, conflict_sql: str
                      ) -> None:
        with self._registered(tx, table) as source:
            try:
                tx.execute(f"{self._select_from(source, table)} {conflict_sql}")
            except duckdb.BinderException as exc:
                raise DestinationError(
                    f"{self.spec}: upsert needs a PRIMARY KEY or UNIQUE constraint on exactly "
                    f"{list(self.key_columns)}: {exc}"
                ) from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql, list(params)).fetchall()

    def _fetch(self, sql: str, params: Sequence[Any], columns: Schema) -> pa.Table:
        result = self.connection.sql(sql, params=list(params)).to_arrow_table()
        return to_arrow(result, target=columns)


def _register_functions(conn: duckdb.DuckDBPyConnection) -> None:
    """``twice_float_text(DOUBLE) -> VARCHAR``: the canonical float text of
    :func:`twice.destinations.columns.float_text`, vectorised over Arrow arrays. DuckDB's own
    ``CAST(double AS VARCHAR)`` happens to agree today, but it is DuckDB's to change; a
    stored fingerprint must not depend on it. Registered once per database instance."""
    try:
        from duckdb import sqltypes
    except ImportError:  # DuckDB < 1.4
        from duckdb import typing as sqltypes  # type: ignore[no-redef]

    try:
        conn.create_function(
            "twice_float_text", float_texts, [sqltypes.DOUBLE], sqltypes.VARCHAR, type="arrow",
            side_effects=False,
        )
    except duckdb.CatalogException:
        # Connections to one file in one process share DuckDB's database instance, and its
        # catalog already holds the function (registered by an earlier twice connection).
        pass


def open_destination(spec: DestinationSpec) -> DuckDBDestination:
    """Open ``duckdb:///abs/path.duckdb#[schema.]table``."""
    if spec.options:
        raise DestinationError(f"duckdb destination: unknown options {sorted(spec.options)}")
    path = Path(spec.file_path()).expanduser().absolute()
    if not path.parent.is_dir():
        raise DestinationUnavailableError(f"duckdb destination: directory {path.parent} missing")
    schema_name, table = split_table_name(spec.fragment, default_schema="main")
    shown = table if schema_name == "main" else f"{schema_name}.{table}"
    canonical = f"duckdb://{path}{spec.twice_query()}#{shown}"
    return DuckDBDestination(
        str(path), spec=canonical, table=table,
        schema_name=None if schema_name == "main" else schema_name,
        partition_column=spec.partition_column, key_columns=spec.key_columns,
    )
