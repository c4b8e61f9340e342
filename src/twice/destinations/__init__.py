"""Idempotent writers ("destinations"), addressed by one string.

``open_destination("sqlite:///data/out.db?partition_column=day#positions")`` returns an object
with ``replace_partition`` (replace one interval's slice atomically), ``upsert`` (insert or
update by a deterministic key), ``read_partition`` and the in-database fingerprint primitives.

Spec strings, one engine module each (``twice.destinations.<scheme>``):

* ``sqlite:///abs/path.db#table`` (``sqlite:rel/path.db#table`` for a relative path)
* ``duckdb:///abs/path.duckdb#table`` or ``#schema.table``
* ``postgresql://user@host:5432/db#schema.table`` (password from PGPASSWORD / .pgpass; a
  password in the string is used but never echoed back in ``spec``)
* ``parquet:///abs/dir`` (Hive layout ``key=value/``; ``?overwrite=static|dynamic``)
* ``spark:///abs/warehouse#table`` (or ``?table=``; ``?overwrite=static|dynamic``,
  ``?master=local[2]``; needs ``twice[spark]`` and Java 17)

The query options ``partition_column=NAME`` and ``key_columns=a,b`` are understood by every
engine, so one string names a destination completely for the ledger and the CLI. A new engine
is one new module exposing ``open_destination(spec: DestinationSpec) -> Destination``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence

from twice.destinations.base import Destination, DestinationSpec, WriteResult
from twice.destinations.columns import ColumnType, SchemaError
from twice.destinations.errors import DestinationError, DestinationUnavailableError
from twice.destinations.identifiers import (
    IdentifierError,
    validate_identifier,
    validate_identifiers,
)
from twice.destinations.rows import DuplicateKeyError
from twice.destinations.slices import PartitionError, RowsOutsidePartitionError

# scheme -> module name under twice.destinations, where they differ
_ALIASES = {"postgresql": "postgres", "postgres": "postgres"}
_ENGINES = ("sqlite", "duckdb", "postgres", "parquet", "spark")


def open_destination(
    spec: str,
    *,
    partition_column: str | None = None,
    key_columns: Sequence[str] | None = None,
) -> Destination:
    """Open the destination named by ``spec``; keyword arguments fill in or must agree with
    the ``partition_column`` / ``key_columns`` query options."""
    parsed = DestinationSpec.parse(spec)
    module_name = _ALIASES.get(parsed.scheme, parsed.scheme)
    if module_name not in _ENGINES:
        raise DestinationError(
            f"unknown destination scheme {parsed.scheme!r}: use sqlite, duckdb, postgresql, "
            "parquet or spark"
        )
    if partition_column is not None:
        validate_identifier(partition_column, "partition_column")
        if parsed.partition_column not in (None, partition_column):
            raise DestinationError(
                f"partition_column {partition_column!r} contradicts the destination's "
                f"{parsed.partition_column!r}"
            )
        parsed = dataclasses.replace(parsed, partition_column=partition_column)
    if key_columns is not None:
        keys = validate_identifiers(key_columns, "key column")
        if parsed.key_columns and parsed.key_columns != keys:
            raise DestinationError(
                f"key_columns {list(keys)} contradict the destination's {list(parsed.key_columns)}"
            )
        parsed = dataclasses.replace(parsed, key_columns=keys)
    module = importlib.import_module(f"twice.destinations.{module_name}")
    destination: Destination = module.open_destination(parsed)
    return destination


__all__ = [
    "ColumnType",
    "Destination",
    "DestinationError",
    "DestinationSpec",
    "DestinationUnavailableError",
    "DuplicateKeyError",
    "IdentifierError",
    "PartitionError",
    "RowsOutsidePartitionError",
    "SchemaError",
    "WriteResult",
    "open_destination",
]
