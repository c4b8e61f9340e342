"""Ledger statements built once, executed with their values as parameters.

SQLAlchemy compiles a statement once per shape (its cache key), but building the statement
object and computing that key again costs about 40 µs on every execution: more than SQLite
takes to run it, and most of what a unit of work's bookkeeping cost in Python. The statements
a unit's claim and finish run are therefore built here once per table and shape, with a bound
parameter per compared column (named after the column), and executed with a parameter dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from sqlalchemy import Insert, Select, Table, Update, bindparam, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, CursorResult


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
    return query.with_for_update(key_share=True) if lock else query


@cache
def inserting(table: Table) -> Insert:
    """``INSERT INTO table``; the columns are those of the parameter dict."""
    return insert(table)


@cache
def inserting_new(dialect: str, table: Table) -> Insert:
    """``INSERT ... ON CONFLICT DO NOTHING RETURNING key`` for ``dialect``: a row comes back
    only when this statement inserted it (SQLAlchemy reports no rowcount for INSERT)."""
    statement = pg_insert(table) if dialect == "postgresql" else sqlite_insert(table)
    key = next(iter(table.primary_key.columns))
    return statement.on_conflict_do_nothing().returning(key)


#: Prefix of the bound parameters an UPDATE compares with: a parameter named after a column
#: would set that column (the SET clause is made of the parameters that name columns).
_WHERE = "where_"


@cache
def updating(table: Table, *columns: str, null: tuple[str, ...] = ()) -> Update:
    """``UPDATE table SET ... WHERE column = :where_column AND ... AND n IS NULL``."""
    return update(table).where(
        *(table.c[name] == bindparam(_WHERE + name) for name in columns),
        *(table.c[name].is_(None) for name in null),
    )


def update_where(
    conn: Connection, table: Table, where: Mapping[str, Any], values: Mapping[str, Any], *,
    null: tuple[str, ...] = (),
) -> CursorResult[Any]:
    """Set ``values`` in the rows of ``table`` whose columns equal ``where`` (and whose
    ``null`` columns are NULL)."""
    params = {**values, **{_WHERE + name: value for name, value in where.items()}}
    return conn.execute(updating(table, *where, null=null), params)
