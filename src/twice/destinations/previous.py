"""``keep_previous=DAYS``: SQL destinations keep each replaced slice, so ``twice diff`` can read it.

Delta and Iceberg tables keep earlier versions themselves (time travel). A SQL table keeps
only its current rows, so a destination opened with ``?keep_previous=DAYS`` (SQLite, DuckDB,
PostgreSQL) copies the slice a write is about to change into a side table, **inside the
write's own transaction** (before replace's delete, upsert's merge or append's insert): the
copy commits with the write, or neither does; a fenced or failed write leaves no copy.

This lives in its own module, not in ``base.py``, because it is an opt-in layer over the
shared write path with its own tables and its own reads: ``base.py`` calls :func:`retain` at
one point of each write and forwards ``versions`` / ``read_partition_at`` here, and nothing
else of the write path changes.

Two side tables, in the destination table's schema, created by the first write that keeps:

* ``<table>__twice_previous``: the replaced rows (the table's columns, same types, no key)
  plus ``twice_version`` (the slice version those rows were), ``twice_slice`` (the slice
  label, e.g. ``day=2026-11-25``; ``all rows`` for a write without a partition) and
  ``twice_replaced_at`` (UTC, when a write replaced them).
* ``<table>__twice_versions``: one row per version of each slice (``twice_slice``,
  ``twice_version``, ``twice_replaced_at``; NULL for the current version). It numbers the
  versions even when a version held no rows, and after its rows are purged.

Versions are per slice: 1 is the first content written (or, the first time a destination
keeps, the content the slice already had), and every write to the slice adds one (a replace
always; an upsert or append that carries rows). ``versions(partition)`` lists the versions of
that slice still held: the current one (read from the table itself) and the replaced ones
not yet purged. Each keeping write deletes side rows replaced more than DAYS days ago (by
:func:`now`, the clock seam), in all slices of the table. Slices are matched by label
(:func:`slice_label`): one whole day of a date column is the same slice whether it was
written as the interval a daily run writes (``day in [a, a+1)``) or as the value ``day=a``; a
longer interval is a slice of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from twice.core.identifiers import validate_identifier
from twice.destinations.columns import ColumnType, Schema
from twice.destinations.errors import DestinationError
from twice.destinations.slices import PartitionSpec, Slice

if TYPE_CHECKING:
    from twice.destinations.base import SqlDestination

ROWS_SUFFIX = "__twice_previous"
VERSIONS_SUFFIX = "__twice_versions"
_STAMP = ColumnType("timestamptz")


def now() -> datetime:
    """The clock of retention (``twice_replaced_at`` and the purge cutoff); tests replace it."""
    return datetime.now(UTC)


def side_tables(dest: SqlDestination[Any]) -> tuple[str, str]:
    """The (rows, versions) side table names of ``dest`` (unqualified)."""
    return (validate_identifier(dest.table + ROWS_SUFFIX, "keep_previous table name"),
            validate_identifier(dest.table + VERSIONS_SUFFIX, "keep_previous table name"))


def _qualified(dest: SqlDestination[Any], name: str) -> str:
    q = dest.dialect.quote
    return f"{q(dest.schema_name)}.{q(name)}" if dest.schema_name else q(name)


def not_kept(dest: Any) -> DestinationError:
    """The refusal of a SQL destination that keeps no earlier versions."""
    return DestinationError(
        f"{dest.spec}: this {dest.engine} destination keeps no earlier versions (delta and "
        "iceberg tables keep theirs); add keep_previous=DAYS to it (e.g. ?keep_previous=7) "
        "so each write keeps the slice it replaces for DAYS days, then twice diff can "
        "compare them"
    )


def retain(dest: SqlDestination[Any], tx: Any, schema: Schema, where: str,
           params: Sequence[Any], label: str) -> None:
    """Inside the write's transaction ``tx``, before it changes the slice ``where``: copy
    the slice's rows as its current version, open the next version, purge old side rows."""
    days = dest.keep_previous
    assert days is not None
    dialect, p = dest.dialect, dest.dialect.placeholder
    q = dialect.quote
    unsupported = [n for n, t in schema.items() if t.kind == "unsupported"]
    if unsupported:
        raise DestinationError(f"{dest.spec}: keep_previous cannot keep columns {unsupported} "
                               "(types twice does not map)")
    rows_name, versions_name = side_tables(dest)
    rows_t, versions_t = _qualified(dest, rows_name), _qualified(dest, versions_name)
    stamp_ddl = dialect.ddl_type(_STAMP)
    int_ddl, text_ddl = dialect.ddl_type(ColumnType("integer")), dialect.ddl_type(
        ColumnType("string"))
    dest._lock_previous(tx)
    columns = [f"{q(n)} {dialect.ddl_type(t)}" for n, t in schema.items()]
    bookkeeping = [f"{q('twice_version')} {int_ddl} NOT NULL",
                   f"{q('twice_slice')} {text_ddl} NOT NULL",
                   f"{q('twice_replaced_at')} {stamp_ddl}"]
    dest._execute(tx, f"CREATE TABLE IF NOT EXISTS {rows_t} ({', '.join(columns + bookkeeping)})")
    dest._execute(tx, f"CREATE TABLE IF NOT EXISTS {versions_t} ({', '.join(bookkeeping)})")
    ((current,),) = dest._query(
        f"SELECT max({q('twice_version')}) FROM {versions_t} WHERE {q('twice_slice')} = {p}",
        [label])
    stamp = now()
    at = dialect.bind(stamp, _STAMP)
    insert_version = (f"INSERT INTO {versions_t} ({q('twice_version')}, {q('twice_slice')}) "
                      f"VALUES ({p}, {p})")
    version = 0 if current is None else int(current)
    if current is None:  # first keeping write: content already there is version 1
        ((count,),) = dest._query(f"SELECT count(*) FROM {dest.qualified} WHERE {where}", params)
        if count:
            dest._execute(tx, insert_version, [1, label])
            version = 1
    if version:
        names = dest._column_list(list(schema))
        dest._execute(
            tx,
            f"INSERT INTO {rows_t} ({names}, {q('twice_version')}, {q('twice_slice')}, "
            f"{q('twice_replaced_at')}) SELECT {names}, CAST({p} AS {int_ddl}), "
            f"CAST({p} AS {text_ddl}), CAST({p} AS {stamp_ddl}) FROM {dest.qualified} "
            f"WHERE {where}",
            [version, label, at, *params],
        )
        dest._execute(
            tx,
            f"UPDATE {versions_t} SET {q('twice_replaced_at')} = CAST({p} AS {stamp_ddl}) "
            f"WHERE {q('twice_slice')} = {p} AND {q('twice_version')} = {p}",
            [at, label, version],
        )
    dest._execute(tx, insert_version, [version + 1, label])
    cutoff = dialect.bind(stamp - timedelta(days=days), _STAMP)
    for table in (rows_t, versions_t):  # the current version (NULL) is never purged
        dest._execute(tx, f"DELETE FROM {table} WHERE {q('twice_replaced_at')} < "
                      f"CAST({p} AS {stamp_ddl})", [cutoff])


def slice_label(dest: SqlDestination[Any], partition: PartitionSpec,
                schema: Schema | None = None) -> str:
    """The label the side tables give the slice ``partition`` (``all rows`` for None): the
    slice's own label, except that one whole day of a date column is the day's value however
    it was named (``day=2026-11-30`` for the interval ``[2026-11-30, 2026-12-01)`` a daily run
    writes, as for the value ``2026-11-30``: the same rows, so one history of versions)."""
    if partition is None:
        return "all rows"
    column = dest._require_partition_column()
    schema = dest._existing_schema() if schema is None else schema
    if column not in schema:
        raise DestinationError(f"{dest.spec}: no column {column!r} in {dest.qualified}")
    slc = Slice.of(column, schema[column], partition)
    if slc.is_range and slc.ctype.kind == "date" and slc.high - slc.low == timedelta(days=1):
        return Slice.of(column, slc.ctype, slc.low).label
    return slc.label


def versions(dest: SqlDestination[Any], partition: PartitionSpec) -> list[int]:
    """The versions of the slice ``partition`` still held, oldest first (the last is the
    table's current content)."""
    if dest.keep_previous is None:
        raise not_kept(dest)
    label = slice_label(dest, partition)
    _, versions_name = side_tables(dest)
    held: list[int] = []
    if dest._table_exists(versions_name):
        q, p = dest.dialect.quote, dest.dialect.placeholder
        held = [int(v) for (v,) in dest._query(
            f"SELECT {q('twice_version')} FROM {_qualified(dest, versions_name)} "
            f"WHERE {q('twice_slice')} = {p} ORDER BY {q('twice_version')}", [label])]
    if not held and dest.row_count(partition):
        held = [1]  # written before keep_previous: its content is version 1
    return held


def read_at(dest: SqlDestination[Any], partition: PartitionSpec, version: int) -> pa.Table:
    """The slice ``partition`` as it was at ``version`` (the table's columns, in order)."""
    held = versions(dest, partition)
    if version not in held:
        shown = ", ".join(map(str, held)) or "none"
        raise DestinationError(
            f"{dest.spec}: slice {slice_label(dest, partition)} has no version {version} "
            f"(versions held: {shown}; replaced versions are kept {dest.keep_previous} days)")
    if version == held[-1]:
        return dest.read_partition(partition)
    schema = dest._existing_schema()
    q, p = dest.dialect.quote, dest.dialect.placeholder
    rows_name, _ = side_tables(dest)
    return dest._fetch(
        f"SELECT {dest._column_list(list(schema))} FROM {_qualified(dest, rows_name)} "
        f"WHERE {q('twice_slice')} = {p} AND {q('twice_version')} = {p}",
        [slice_label(dest, partition), version], schema)


__all__ = ["now", "read_at", "retain", "side_tables", "slice_label", "versions"]
