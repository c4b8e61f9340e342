"""Ledger statements built once, executed with their values as parameters.

SQLAlchemy compiles a statement once per shape (its cache key), but building the statement
object and computing that key again costs about 40 µs on every execution: more than SQLite
takes to run it, and most of what a unit of work's bookkeeping cost in Python. The statements
a unit's claim and finish run are therefore built here once per table and shape, with a bound
parameter per compared column (named after the column), and executed with a parameter dict.

Even a cached statement costs SQLAlchemy's execution context (about 25-50 µs: cache key,
parameter processing, result metadata), several times the driver's own work, and a unit runs
about 26 of them. :func:`run` executes a statement built here as the SQL string it compiled to
once per dialect, through ``Connection.exec_driver_sql`` (so the transaction, the engine's
events and the wrapping of driver errors are SQLAlchemy's as before), converting parameters
and result values with the column types' own processors (``UTCDateTime`` among them). A
statement not built here runs through ``Connection.execute`` and reads the same.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Insert, Select, Table, Update, bindparam, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, CursorResult, Dialect
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.schema import ScalarElementColumnDefault

#: Statements built once here (by the cached constructors below), which :func:`run` compiles to
#: a string once per dialect; a statement built per call would grow any cache of its own.
_BUILT: weakref.WeakSet[Executable] = weakref.WeakSet()


def _built(statement: Any) -> Any:
    _BUILT.add(statement)
    return statement


@cache
def rows_where(
    table: Table, *columns: str, order: tuple[str, ...] = (), limit: int | None = None,
    lock: bool = False,
) -> Select[Any]:
    """``SELECT * FROM table WHERE column = :column AND ...`` ordered by ``order`` (a name
    starting with ``-`` sorts descending); ``lock`` adds ``FOR KEY SHARE`` (PostgreSQL; SQLite
    writers are serialised by their transaction and ignore it)."""
    query = select(table).where(*(table.c[name] == bindparam(name) for name in columns))
    query = query.order_by(*(
        table.c[name[1:]].desc() if name.startswith("-") else table.c[name] for name in order
    ))
    if limit is not None:
        query = query.limit(limit)
    return _built(query.with_for_update(key_share=True) if lock else query)


def locked(query: Select[Any]) -> Select[Any]:
    """``query`` with ``FOR KEY SHARE`` (PostgreSQL; see :func:`rows_where`), built once when
    ``query`` was."""
    return _locked(query) if query in _BUILT else query.with_for_update(key_share=True)


@cache
def _locked(query: Select[Any]) -> Select[Any]:
    return _built(query.with_for_update(key_share=True))


@cache
def inserting(table: Table) -> Insert:
    """``INSERT INTO table``; the columns are those of the parameter dict."""
    return _built(insert(table))


@cache
def inserting_new(dialect: str, table: Table) -> Insert:
    """``INSERT ... ON CONFLICT DO NOTHING RETURNING key`` for ``dialect``: a row comes back
    only when this statement inserted it (SQLAlchemy reports no rowcount for INSERT)."""
    statement = pg_insert(table) if dialect == "postgresql" else sqlite_insert(table)
    key = next(iter(table.primary_key.columns))
    return _built(statement.on_conflict_do_nothing().returning(key))


@cache
def inserting_returning(table: Table) -> Insert:
    """``INSERT INTO table ... RETURNING key``: the generated key of the row (PostgreSQL; SQLite
    reads the driver's ``lastrowid``)."""
    return _built(insert(table).returning(next(iter(table.primary_key.columns))))


#: Prefix of the bound parameters an UPDATE compares with: a parameter named after a column
#: would set that column (the SET clause is made of the parameters that name columns).
_WHERE = "where_"


@cache
def updating(table: Table, *columns: str, null: tuple[str, ...] = ()) -> Update:
    """``UPDATE table SET ... WHERE column = :where_column AND ... AND n IS NULL``."""
    return _built(update(table).where(
        *(table.c[name] == bindparam(_WHERE + name) for name in columns),
        *(table.c[name].is_(None) for name in null),
    ))


def update_where(
    conn: Connection, table: Table, where: Mapping[str, Any], values: Mapping[str, Any], *,
    null: tuple[str, ...] = (),
) -> Ran:
    """Set ``values`` in the rows of ``table`` whose columns equal ``where`` (and whose
    ``null`` columns are NULL)."""
    params = {**values, **{_WHERE + name: value for name, value in where.items()}}
    return run(conn, updating(table, *where, null=null), params)


def prepare(statement: Executable) -> Any:
    """Mark a statement built once (a module constant) for :func:`run`'s compiled path."""
    return _built(statement)


# -- running ------------------------------------------------------------------------------------

Convert = Callable[[Any], Any]


class Ran:
    """What a statement run by :func:`run` gave: its rows as dicts of column name to value
    (converted as ``Connection.execute`` would), its row count, the key it inserted."""

    __slots__ = ("_key", "_rows", "rowcount")

    def __init__(self, rows: list[dict[str, Any]], rowcount: int, key: Any = None) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self._key = key

    def all(self) -> list[dict[str, Any]]:
        return self._rows

    def first(self) -> dict[str, Any] | None:
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        """The first column of the first row (None without a row)."""
        return next(iter(self._rows[0].values())) if self._rows else None

    @property
    def inserted_key(self) -> int:
        """The integer key of the row an INSERT wrote."""
        key = self._key if self._key is not None else self.scalar()
        if key is None:
            raise AssertionError("the INSERT returned no key")
        return int(key)


class _Unsupported(Exception):
    """The statement is rendered per execution: it runs through ``Connection.execute``."""


class _Compiled:
    """One statement as its dialect's SQL string, with the processors of its parameters and
    of its result columns."""

    __slots__ = ("binds", "fixed", "positional", "results", "sql")

    def __init__(self, statement: Any, dialect: Dialect, keys: Sequence[str]) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        if compiled.post_compile_params or compiled.literal_execute_params:
            raise _Unsupported  # expanding IN, literal execution
        self.sql = compiled.string
        self.positional: tuple[str, ...] | None = (
            tuple(compiled.positiontup) if compiled.positional else None
        )
        self.binds: dict[str, Convert | None] = {}
        self.fixed: dict[str, Any] = {}  # values the statement was built with (``x + 1``)
        for bind, name in compiled.bind_names.items():
            self.binds[name] = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if not bind.required:
                self.fixed[name] = bind.effective_value
        if isinstance(statement, Insert):  # the columns left out get their scalar defaults
            for column in statement.table.columns:  # type: ignore[attr-defined]
                default = column.default
                if column.key in keys or default is None:
                    continue
                if not isinstance(default, ScalarElementColumnDefault):
                    raise _Unsupported  # computed per row by SQLAlchemy
                self.fixed[column.key] = default.arg
        columns = getattr(statement, "selected_columns", None)
        if columns is None and isinstance(statement, (Insert, Update)):
            columns = [found["expr"] for found in statement.returning_column_descriptions]
        self.results: dict[str, Convert | None] = {
            column.name: column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in (columns or ())
        }


_COMPILED: dict[tuple[int, str, tuple[str, ...]], tuple[Any, _Compiled | None]] = {}


def _compiled(statement: Any, dialect: Dialect, keys: tuple[str, ...]) -> _Compiled | None:
    """``statement`` compiled for ``dialect`` with parameters ``keys`` (None: it cannot be)."""
    key = (id(statement), dialect.name, keys)
    found = _COMPILED.get(key)
    if found is None or found[0] is not statement:
        try:
            found = (statement, _Compiled(statement, dialect, keys))
        except _Unsupported:
            found = (statement, None)
        _COMPILED[key] = found
    return found[1]


def run(conn: Connection, statement: Any, params: Mapping[str, Any] | None = None) -> Ran:
    """Execute ``statement`` with ``params`` in ``conn``'s transaction (see the module
    docstring for why it is not ``conn.execute``)."""
    values = {} if params is None else params
    compiled = None
    if statement in _BUILT:
        # an INSERT's columns and an UPDATE's SET clause are those of the parameters
        keys = tuple(values) if isinstance(statement, (Insert, Update)) else ()
        compiled = _compiled(statement, conn.dialect, keys)
    if compiled is None:
        return _through_sqlalchemy(conn, statement, params)
    fixed = compiled.fixed
    converted = {}
    for name, convert in compiled.binds.items():
        value = values[name] if name in values else fixed[name]
        converted[name] = value if convert is None else convert(value)
    arguments: Any = (
        converted if compiled.positional is None
        else tuple(converted[name] for name in compiled.positional)
    )
    if conn._has_events or conn.engine._has_events or conn._echo or not conn.in_transaction():
        # listeners and echo see every statement; outside a transaction, SQLAlchemy begins one
        return _through_driver_sql(conn, compiled, statement, arguments)
    return _on_cursor(conn, compiled, statement, arguments)


def _on_cursor(conn: Connection, compiled: _Compiled, statement: Any, arguments: Any) -> Ran:
    """Run on a cursor of the transaction's own driver connection. A driver error is handed to
    the connection, which wraps it as ``Connection.execute`` would (``sqlalchemy.exc``
    classes, a lost connection invalidated)."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(compiled.sql, arguments)
        description = cursor.description
        raw = cursor.fetchall() if description is not None else []
        names = [column[0] for column in description] if description is not None else []
        key = cursor.lastrowid if not raw and _rowid_insert(conn, statement) else None
        return Ran(_converted(compiled, names, raw), cursor.rowcount, key)
    except BaseException as exc:
        conn._handle_dbapi_exception(exc, compiled.sql, arguments, cursor, None)
    finally:
        cursor.close()


def _through_driver_sql(conn: Connection, compiled: _Compiled, statement: Any,
                        arguments: Any) -> Ran:
    result = conn.exec_driver_sql(compiled.sql, arguments)
    raw = result.fetchall() if result.returns_rows else []
    names = list(result.keys()) if result.returns_rows else []
    key = result.lastrowid if not raw and _rowid_insert(conn, statement) else None
    return Ran(_converted(compiled, names, raw), result.rowcount, key)


def _rowid_insert(conn: Connection, statement: Any) -> bool:
    """Whether the driver's ``lastrowid`` is the key an INSERT wrote (SQLite; PostgreSQL
    inserts say ``RETURNING``: see ``inserting_returning``)."""
    return conn.dialect.name == "sqlite" and isinstance(statement, Insert)


def _converted(compiled: _Compiled, names: list[str], raw: Sequence[Any]) -> list[dict[str, Any]]:
    """Rows as dicts, each value converted by its column type's result processor."""
    if not raw:
        return []
    processors = [compiled.results.get(name) for name in names]
    return [
        {name: value if convert is None or value is None else convert(value)
         for name, convert, value in zip(names, processors, row, strict=True)}
        for row in raw
    ]


def _through_sqlalchemy(conn: Connection, statement: Any, params: Mapping[str, Any] | None
                        ) -> Ran:
    result: CursorResult[Any] = conn.execute(statement, params)
    rows = [dict(row) for row in result.mappings()] if result.returns_rows else []
    key = None
    if isinstance(statement, Insert) and not rows and result.inserted_primary_key is not None:
        key = result.inserted_primary_key[0]
    return Ran(rows, result.rowcount, key)
