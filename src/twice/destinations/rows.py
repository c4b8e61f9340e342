"""Turn whatever a pipeline produced into one normalised ``pyarrow.Table``.

Writers accept Arrow tables and record batches, pandas DataFrames, polars DataFrames (anything
with ``.to_arrow()``, so polars is never imported), objects speaking the Arrow C stream
protocol, and iterables of dicts. Everything is converted once, at the boundary, into the
normalised types of :mod:`twice.destinations.columns`, and checked against the target table's
schema *before* any write starts, so a bad batch never costs a deleted slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from twice.core.identifiers import validate_identifier
from twice.destinations.columns import (
    MAX_DECIMAL_PRECISION,
    ColumnType,
    Schema,
    SchemaError,
    schema_of,
)
from twice.destinations.errors import DestinationError

RowsLike = Any  # pa.Table | pa.RecordBatch | pandas/polars DataFrame | Iterable[Mapping]


class DuplicateKeyError(DestinationError):
    """A batch holds the same key twice (or a null key): writing it would be ambiguous."""


class SchemaMismatchError(SchemaError):
    """Rows whose columns differ from the existing table's. What differs is in attributes,
    so a caller (a destination naming its table and the statement to run) phrases its refusal
    from them, never from the message:

    - ``added``: the rows' columns the table lacks -> their type (None: only nulls, so the
      type is unknown);
    - ``not_null``: those of them declared non-nullable (an Arrow field with
      ``nullable=False``);
    - ``missing``: the table's columns the rows lack;
    - ``retyped``: column -> (its type in the rows, its type in the table), not compatible.
    """

    def __init__(self, message: str, *, added: Mapping[str, ColumnType | None] | None = None,
                 not_null: Sequence[str] = (), missing: Sequence[str] = (),
                 retyped: Mapping[str, tuple[ColumnType, ColumnType]] | None = None) -> None:
        super().__init__(message)
        self.added = dict(added or {})
        self.not_null = tuple(not_null)
        self.missing = tuple(missing)
        self.retyped = dict(retyped or {})


class SchemaChangeRefusedError(SchemaMismatchError):
    """A destination refused a change of its table's schema: its one-line message is complete
    (it names the table, the columns and what to do), so callers show it as it is."""


def to_arrow(rows: RowsLike, *, target: Schema | None = None,
             new_columns: bool = False) -> pa.Table:
    """Convert ``rows`` to a normalised table; with ``target``, match it column for column.

    ``target`` is the existing table's schema: the batch must have exactly its columns (any
    order) with compatible kinds; columns of only nulls take the target type. Without a target
    (the table does not exist yet) every column must have an inferable, supported type.
    ``new_columns``: the batch may also have columns the target lacks, each nullable and of a
    known type (an additive schema change); they follow the target's columns, in the batch's
    order. Any other difference raises :class:`SchemaMismatchError`.
    """
    if target is not None:
        _refuse_unsupported(target)
    table = _as_table(rows, target)
    not_null = tuple(f.name for f in table.schema if not f.nullable)
    for name in table.column_names:
        validate_identifier(name, "column name")
    lowered = [name.lower() for name in table.column_names]
    if len(set(lowered)) != len(lowered):
        raise SchemaError(f"rows have duplicate column names: {table.column_names}")
    table = _normalise(table)
    if target is None:
        for name, ctype in schema_of(table).items():
            if ctype.kind == "null":
                raise SchemaError(
                    f"column {name!r} holds only nulls, so its type is unknown and the table "
                    "does not exist yet: pass a typed Arrow table or create the table first"
                )
        return table
    return _conform(table, target, new_columns=new_columns, not_null=not_null)


def _refuse_unsupported(target: Schema) -> None:
    """Refuse, up front and naming them, columns of a type twice does not know: they can be
    neither converted nor fingerprinted (no canonical text), so twice never writes such a
    table (before any write starts) rather than leave the column out of its evidence."""
    bad = [f"{name!r} ({ctype.engine_type})" for name, ctype in target.items()
           if ctype.kind == "unsupported"]
    if bad:
        raise SchemaError(
            f"the table has column {', '.join(bad)} of a type twice cannot read, write or "
            "fingerprint (no canonical text equal on every engine)"
        )


def _as_table(rows: RowsLike, target: Schema | None) -> pa.Table:
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pa.RecordBatch):
        return pa.Table.from_batches([rows])
    module = type(rows).__module__.split(".")[0]
    if module == "pandas" and hasattr(rows, "columns"):
        return pa.Table.from_pandas(rows, preserve_index=False)
    if hasattr(rows, "to_arrow") and callable(rows.to_arrow):  # polars and friends
        result = rows.to_arrow()
        return result if isinstance(result, pa.Table) else pa.table(result)
    if hasattr(rows, "__arrow_c_stream__"):
        return pa.table(rows)
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise SchemaError(
            f"cannot use a {type(rows).__name__} as rows: pass a pyarrow Table, a pandas or "
            "polars DataFrame, or an iterable of dicts"
        )
    records = list(rows)
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise SchemaError(f"row {index} is a {type(record).__name__}, expected a dict")
    if target is not None:
        names = list(target)
        seen = {key for record in records for key in record}
        missing = [name for name in names if name not in seen]
        extra = sorted(seen - set(names))
        if records and (missing or extra):  # a key absent from some rows only means null
            try:  # the table's types where it has the column, the batch's own for the rest:
                # _conform then says what differs, column by column
                known = pa.schema([(name, target[name].arrow()) for name in names
                                   if name in seen])
                table = pa.Table.from_pylist(records, schema=known)
                if extra:
                    rest = pa.Table.from_pylist([{k: r.get(k) for k in extra} for r in records])
                    rest = _wide_decimals(rest, set(extra))
                    for name in extra:
                        table = table.append_column(rest.schema.field(name), rest.column(name))
                return table
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
                pass
            try:  # a value does not fit the table's type: the batch's own types say which
                return _wide_decimals(pa.Table.from_pylist(records), set(extra))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
                pass
            problems = [f"missing columns {missing}"] if missing else []
            problems += [f"unknown columns {extra}"] if extra else []
            raise SchemaMismatchError(
                "schema mismatch with the existing table: " + "; ".join(problems),
                added=dict.fromkeys(extra), missing=missing)
        schema = pa.schema([(name, target[name].arrow()) for name in names])
        try:
            return pa.Table.from_pylist(records, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            detail = str(exc)
        try:  # name the column: infer the batch's own types and compare kind by kind
            _conform(_normalise(pa.Table.from_pylist(records)), target)
        except SchemaError:
            raise
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            pass
        raise SchemaError(f"rows do not fit the table's schema: {detail}")
    if not records:
        raise SchemaError(
            "no rows and no table yet: cannot infer a schema from an empty iterable; pass an "
            "empty pyarrow Table with a schema or create the table first"
        )
    try:
        table = pa.Table.from_pylist(records)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaError(f"rows have inconsistent value types: {exc}") from None
    return _wide_decimals(table, set(table.column_names))


def _wide_decimals(table: pa.Table, names: set[str]) -> pa.Table:
    """The decimal columns among ``names`` inferred from values, at the widest precision: a
    precision inferred from the first batch's digits would refuse tomorrow's larger values."""
    for index, column_field in enumerate(table.schema):
        if column_field.name in names and pa.types.is_decimal(column_field.type):
            wide = pa.decimal128(MAX_DECIMAL_PRECISION, column_field.type.scale)
            table = table.set_column(index, column_field.name, table.column(index).cast(wide))
    return table


def _normalise(table: pa.Table) -> pa.Table:
    """Cast every column to the one Arrow type twice uses for its kind (never losing data)."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        ctype = ColumnType.from_arrow(field.type, field.name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        columns.append(_cast(column, ctype.arrow(), field.name))
    return pa.table(columns, names=table.column_names)


def _cast(column: pa.ChunkedArray, arrow_type: pa.DataType, name: str) -> pa.ChunkedArray:
    if column.type == arrow_type:
        return column
    try:
        return column.cast(arrow_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"column {name!r}: cannot store {column.type} as {arrow_type}: "
                          f"{exc}") from None


def _conform(table: pa.Table, target: Schema, *, new_columns: bool = False,
             not_null: Sequence[str] = ()) -> pa.Table:
    """Match the target's columns exactly (names are case-sensitive) and cast to its types;
    ``new_columns``: columns the target lacks are kept after its own (see :func:`to_arrow`)."""
    incoming = schema_of(table)
    missing = [name for name in target if name not in incoming]
    extra = [name for name in incoming if name not in target]
    added = {name: None if incoming[name].kind == "null" else incoming[name] for name in extra}
    strict = [name for name in extra if name in not_null]
    retyped = {name: (ctype, target[name]) for name, ctype in incoming.items()
               if name in target and ctype.kind != "null" and not ctype.compatible(target[name])}
    problems = []
    if missing:
        problems.append(f"missing columns {missing}")
    if extra and not new_columns:
        problems.append(f"unknown columns {extra}")
    elif extra:
        problems += [f"new column {name!r} holds only nulls, so its type is unknown"
                     for name, ctype in added.items() if ctype is None]
        problems += [f"new column {name!r} is not nullable" for name in strict]
    for name, (ctype, want) in retyped.items():
        problems.append(f"column {name!r} is {ctype} but the table has {want}")
    if problems:
        raise SchemaMismatchError(
            "schema mismatch with the existing table: " + "; ".join(problems),
            added=added, not_null=strict, missing=missing, retyped=retyped)
    columns = [_cast(table.column(name), ctype.arrow(), name) for name, ctype in target.items()]
    columns += [table.column(name) for name in extra]
    return pa.table(columns, names=[*target, *extra])


def check_keys(table: pa.Table, keys: Sequence[str]) -> None:
    """Refuse null keys and keys repeated within the batch, naming one offending key.

    dbt's delete+insert inserts both copies of a duplicated key; a null key never conflicts,
    so an upsert would append it again on every rerun. Both are refused before any write.
    """
    if not keys or table.num_rows == 0:
        return
    for key in keys:
        nulls = table.column(key).null_count
        if nulls:
            raise DuplicateKeyError(f"{nulls} row(s) have a null key column {key!r}")
    if _strictly_ascending(table, keys):  # the common case (keys written in order): no hash
        return
    counts = table.group_by(list(keys)).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts.column("count_all"), 1))
    if repeated.num_rows:
        example = {key: repeated.column(key)[0].as_py() for key in keys}
        raise DuplicateKeyError(
            f"{repeated.num_rows} key(s) appear more than once in the batch on {list(keys)}, "
            f"e.g. {example} x{repeated.column('count_all')[0].as_py()}; deduplicate upstream"
        )


def _strictly_ascending(table: pa.Table, keys: Sequence[str]) -> bool:
    """Whether every row's key is greater than the previous row's (compared column by column,
    the first key column first): then no key repeats. A few vectorised comparisons of
    adjacent rows; False (not proven unique, so the caller counts keys) otherwise."""
    count = table.num_rows
    if count < 2:
        return True
    less: Any = None
    equal: Any = None
    for key in keys:
        column = table.column(key)
        before, after = column.slice(0, count - 1), column.slice(1)
        step_less, step_equal = pc.less(before, after), pc.equal(before, after)
        if less is None:
            less, equal = step_less, step_equal
        else:
            less = pc.or_(less, pc.and_(equal, step_less))
            equal = pc.and_(equal, step_equal)
        if pc.all(less).as_py() is True:
            return True
    return False
