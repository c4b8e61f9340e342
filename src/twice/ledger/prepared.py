"""Ledger statements built once, executed with their values as parameters.

SQLAlchemy compiles a statement once per shape (its cache key), but building the statement
object and computing that key again costs about 40 µs on every execution: more than SQLite
takes to run it, and most of what a unit of work's bookkeeping cost in Python. The statements
a unit's claim and finish run are therefore built here once per table and shape, with a bound
parameter per compared column (named after the column), and executed with a parameter dict.

Even a cached statement costs SQLAlchemy's execution context (about 25-50 µs: cache key,
parameter processing, result metadata), several times the driver's own work, and a unit runs
about 26 of them. :func:`run` executes a statement built here as the SQL string it compiled to
once per dialect, on the transaction's own driver cursor (a driver error is wrapped by the
connection as ``Connection.execute`` wraps it), converting parameters and result values with
the column types' own processors (``UTCDateTime`` among them). With statement listeners or
echo on the engine, or outside a transaction, it goes through ``Connection.exec_driver_sql``
instead, so they see every statement; a statement not built here runs through
``Connection.execute``. All read the same.
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
WHERE_PREFIX = "where_"


@cache
def updating(table: Table, *columns: str, null: tuple[str, ...] = ()) -> Update:
    """``UPDATE table SET ... WHERE column = :where_column AND ... AND n IS NULL``."""
    return _built(update(table).where(
        *(table.c[name] == bindparam(WHERE_PREFIX + name) for name in columns),
        *(table.c[name].is_(None) for name in null),
    ))


def update_where(
    conn: Connection, table: Table, where: Mapping[str, Any], values: Mapping[str, Any], *,
    null: tuple[str, ...] = (),
) -> Ran:
    """Set ``values`` in the rows of ``table`` whose columns equal ``where`` (and whose
    ``null`` columns are NULL)."""
    return run(conn, *updated_where(table, where, values, null=null))


def updated_where(table: Table, where: Mapping[str, Any], values: Mapping[str, Any], *,
                  null: tuple[str, ...] = ()) -> tuple[Update, dict[str, Any]]:
    """:func:`update_where`'s statement and parameters, to run with others
    (:func:`run_together`)."""
    params = {**values, **{WHERE_PREFIX + name: value for name, value in where.items()}}
    return updating(table, *where, null=null), params


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


_MISSING = object()


class _Compiled:
    """One statement as its dialect's SQL string, with what to do per parameter (in the
    driver's order: its name, its type's processor, the value the statement was built with)
    and the processors of its result columns."""

    __slots__ = ("names", "params", "positional", "results", "returns", "row_converters", "sql")

    def __init__(self, statement: Any, dialect: Dialect, keys: Sequence[str]) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        if compiled.post_compile_params or compiled.literal_execute_params:
            raise _Unsupported  # expanding IN, literal execution
        self.sql: str = compiled.string
        self.positional = bool(compiled.positional)
        fixed: dict[str, Any] = {}  # values the statement was built with (``x + 1``)
        binds: dict[str, Convert | None] = {}
        for bind, name in compiled.bind_names.items():
            binds[name] = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if not bind.required:
                fixed[name] = bind.effective_value
        if isinstance(statement, Insert):  # the columns left out get their scalar defaults
            for column in statement.table.columns:  # type: ignore[attr-defined]
                default = column.default
                if column.key in keys or default is None:
                    continue
                if not isinstance(default, ScalarElementColumnDefault):
                    raise _Unsupported  # computed per row by SQLAlchemy
                fixed[column.key] = default.arg
        order = compiled.positiontup if self.positional else list(binds)
        self.params: tuple[tuple[str, Convert | None, Any], ...] = tuple(
            (name, binds[name], fixed.get(name, _MISSING)) for name in order
        )
        columns = getattr(statement, "selected_columns", None)
        if columns is None and isinstance(statement, (Insert, Update)):
            columns = [found["expr"] for found in statement.returning_column_descriptions]
        self.results: dict[str, Convert | None] = {
            column.name: column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in (columns or ())
        }
        # the result's column names and their processors, from the first result's description
        self.names: list[str] | None = None
        self.row_converters: list[Convert | None] = []
        # whether it returns rows, once seen (None: not run yet); the SQL names its columns, so
        # the shape is fixed and the driver's description (a list of objects built on each
        # read by psycopg) is read once
        self.returns: bool | None = None

    def arguments(self, values: Mapping[str, Any]) -> Any:
        """The driver's parameters: a tuple in order (SQLite's ``?``) or a dict (psycopg's
        ``%(name)s``)."""
        converted = []
        for name, convert, fixed in self.params:
            value = values[name] if name in values or fixed is _MISSING else fixed
            converted.append(value if convert is None else convert(value))
        if self.positional:
            return tuple(converted)
        return dict(zip((name for name, _, _ in self.params), converted, strict=True))

    def rows(self, description: Sequence[Any] | None, raw: Sequence[Any]) -> list[dict[str, Any]]:
        """Rows as dicts, each value converted by its column type's result processor."""
        if not raw or description is None:
            return []
        if self.names is None or len(self.names) != len(description):
            self.names = [column[0] for column in description]
            self.row_converters = [self.results.get(name) for name in self.names]
        names = self.names
        if not any(self.row_converters):
            return [dict(zip(names, row, strict=True)) for row in raw]
        converters = self.row_converters
        return [
            {name: value if convert is None or value is None else convert(value)
             for name, convert, value in zip(names, converters, row, strict=True)}
            for row in raw
        ]


#: Per statement built once (keyed by identity, the statement kept to check it): whether
#: its parameters name columns (INSERT, UPDATE), whether it is an INSERT, and its compiled
#: forms per (dialect, parameter names).
_STATEMENTS: dict[int, tuple[Any, bool, bool, dict[tuple[str, tuple[str, ...]],
                                                    _Compiled | None]]] = {}


def _compiled(statement: Any, dialect: Dialect, keys: tuple[str, ...],
              forms: dict[tuple[str, tuple[str, ...]], _Compiled | None]) -> _Compiled | None:
    """``statement`` compiled for ``dialect`` with parameters ``keys`` (None: it cannot be)."""
    key = (dialect.name, keys)
    if key not in forms:
        try:
            forms[key] = _Compiled(statement, dialect, keys)
        except _Unsupported:
            forms[key] = None
    return forms[key]


def _compiled_for(conn: Connection, statement: Any, values: Mapping[str, Any]
                  ) -> tuple[_Compiled, bool] | None:
    """``statement`` compiled for ``conn`` with ``values``' names, and whether it is an
    INSERT; None when it runs through ``Connection.execute`` (not built here, or rendered per
    execution)."""
    known = _STATEMENTS.get(id(statement))
    if known is None or known[0] is not statement:
        if statement not in _BUILT:
            return None
        known = (statement, isinstance(statement, (Insert, Update)),
                 isinstance(statement, Insert), {})
        _STATEMENTS[id(statement)] = known
    _, keyed, inserts, forms = known
    # an INSERT's columns and an UPDATE's SET clause are those of the parameters
    compiled = _compiled(statement, conn.dialect, tuple(values) if keyed else (), forms)
    return None if compiled is None else (compiled, inserts)


def _on_driver(conn: Connection) -> bool:
    """Whether statements may go to the driver's cursor directly (``_on_cursor``): inside a
    transaction, with no listener or echo on the engine to see them."""
    return not (conn._has_events or conn.engine._has_events or conn._echo
                or not conn.in_transaction())


def run(conn: Connection, statement: Any, params: Mapping[str, Any] | None = None) -> Ran:
    """Execute ``statement`` with ``params`` in ``conn``'s transaction (see the module
    docstring for why it is not ``conn.execute``)."""
    values = {} if params is None else params
    found = _compiled_for(conn, statement, values)
    if found is None:
        return _through_sqlalchemy(conn, statement, params)
    compiled, inserts = found
    arguments = compiled.arguments(values)
    rowid = inserts and conn.dialect.name == "sqlite"
    if not _on_driver(conn):
        # listeners and echo see every statement; outside a transaction, SQLAlchemy begins one
        result = conn.exec_driver_sql(compiled.sql, arguments)
        description = [(name,) for name in result.keys()] if result.returns_rows else None
        raw = result.fetchall() if result.returns_rows else []
        key = result.lastrowid if rowid and not raw else None
        return Ran(compiled.rows(description, raw), result.rowcount, key)
    return _on_cursor(conn, compiled, arguments, rowid)


_CURSOR = "twice_cursor"


def _cursor(conn: Connection) -> Any:
    """The driver connection's cursor for :func:`run`, made once and kept in the pool
    record's ``info`` (which lives exactly as long as that driver connection): a new cursor
    per statement cost psycopg about a third of its own time per statement."""
    fairy = conn.connection
    dbapi = fairy.dbapi_connection
    kept = fairy.info.get(_CURSOR)
    if kept is not None and kept[0] is dbapi:
        return kept[1]
    cursor = dbapi.cursor()  # type: ignore[union-attr]
    fairy.info[_CURSOR] = (dbapi, cursor)
    return cursor


def _on_cursor(conn: Connection, compiled: _Compiled, arguments: Any, rowid: bool) -> Ran:
    """Run on the cursor of the transaction's own driver connection (``_cursor``). A driver
    error is handed to the connection, which wraps it as ``Connection.execute`` would
    (``sqlalchemy.exc`` classes, a lost connection invalidated); the cursor is then dropped."""
    cursor = _cursor(conn)
    try:
        cursor.execute(compiled.sql, arguments)
        description: Sequence[Any] | None
        if compiled.returns is False:
            description = None
        elif compiled.returns and compiled.names is not None:
            description = compiled.names  # the same SQL, the same columns (``returns``)
        else:
            description = cursor.description
            compiled.returns = description is not None
        raw = cursor.fetchall() if description is not None else []
        # SQLite: the key an INSERT wrote (PostgreSQL inserts say RETURNING: inserting_returning)
        key = cursor.lastrowid if rowid and not raw else None
        return Ran(compiled.rows(description, raw), cursor.rowcount, key)
    except BaseException as exc:
        conn.connection.info.pop(_CURSOR, None)
        conn._handle_dbapi_exception(exc, compiled.sql, arguments, cursor, None)


def run_together(conn: Connection, statements: Sequence[tuple[Any, Mapping[str, Any]]]
                 ) -> list[Ran]:
    """Run several statements built here in ``conn``'s transaction, in order, each as
    :func:`run` would. None's parameters may depend on another's result; the server still runs
    each after the one before has finished (its locks taken; under READ COMMITTED its snapshot
    taken after that), so they behave as one by one. On PostgreSQL they are sent together and
    answered in one round trip (psycopg's pipeline mode: one Sync ends them). Elsewhere, or
    where :func:`run` would not use the driver's cursor, they run one by one."""
    compiled: list[tuple[_Compiled, Any]] = []
    if len(statements) > 1 and conn.dialect.name == "postgresql" and _on_driver(conn):
        for statement, values in statements:
            found = _compiled_for(conn, statement, values)
            if found is None:
                break
            compiled.append((found[0], found[0].arguments(values)))
    if len(compiled) != len(statements) or len(statements) < 2:
        return [run(conn, statement, values) for statement, values in statements]
    driver = conn.connection.dbapi_connection
    cursors: list[Any] = []
    sql, arguments = compiled[0][0].sql, compiled[0][1]
    try:
        with driver.pipeline():  # type: ignore[union-attr]
            for one, arguments in compiled:
                sql = one.sql
                cursors.append(driver.cursor())  # type: ignore[union-attr]
                cursors[-1].execute(one.sql, arguments)
        ran = []
        for cursor, (one, _) in zip(cursors, compiled, strict=True):
            description = cursor.description
            raw = cursor.fetchall() if description is not None else []
            ran.append(Ran(one.rows(description, raw), cursor.rowcount))
        return ran
    except BaseException as exc:
        conn.connection.info.pop(_CURSOR, None)
        conn._handle_dbapi_exception(exc, sql, arguments, cursors[-1] if cursors else None,
                                     None)
        raise  # not reached: the connection raises the wrapped error
    finally:
        for cursor in cursors:
            cursor.close()


#: A read that can run with others (:func:`run_ahead`) or alone (:func:`run_one`): the
#: statement, its parameters, and what to make of its result (the callback keeps it where the
#: code that needs it next finds it, and returns it; None: nothing to make of it).
Ahead = tuple[Any, Mapping[str, Any], Callable[[Ran], Any] | None]


def run_ahead(conn: Connection, ahead: Sequence[Ahead | None]) -> list[Any]:
    """Run the statements of ``ahead`` (None: nothing to run for that one) together
    (:func:`run_together`), each result handed to its callback, in order; what the callbacks
    returned, in ``ahead``'s places (None for those not run; the result itself for one
    without a callback)."""
    present = [one for one in ahead if one is not None]
    ran = iter(run_together(conn, [(statement, values) for statement, values, _ in present]))
    found: list[Any] = []
    for one in ahead:
        if one is None:
            found.append(None)
            continue
        result = next(ran)
        found.append(result if one[2] is None else one[2](result))
    return found


def run_one(conn: Connection, ahead: Ahead) -> Any:
    """The read ``ahead`` run alone (:func:`run`), its result handed to its callback."""
    statement, values, then = ahead
    ran = run(conn, statement, values)
    return ran if then is None else then(ran)


def _through_sqlalchemy(conn: Connection, statement: Any, params: Mapping[str, Any] | None
                        ) -> Ran:
    result: CursorResult[Any] = conn.execute(statement, params)
    rows = [dict(row) for row in result.mappings()] if result.returns_rows else []
    key = None
    if isinstance(statement, Insert) and not rows and result.inserted_primary_key is not None:
        key = result.inserted_primary_key[0]
    return Ran(rows, result.rowcount, key)
