"""Idempotent writers ("destinations"), addressed by one string.

``open_destination("sqlite:///data/out.db?partition_column=day#positions")`` returns an object
with ``replace_partition`` (replace one interval's slice atomically), ``upsert`` (insert or
update by a deterministic key), ``append`` (exactly once per unit of work when stamped),
``read_partition``, ``commit_records`` and the in-database fingerprint primitives. Writes made
under an attempt's stamp commit a commit record with their rows and are fenced: see
:mod:`twice.destinations.commits`.

Spec strings, one engine module each (``twice.destinations.<scheme>``):

* ``sqlite:///abs/path.db#table`` (``sqlite:rel/path.db#table`` for a relative path)
* ``duckdb:///abs/path.duckdb#table`` or ``#schema.table``
* ``postgresql://user@host:5432/db#schema.table`` (password from PGPASSWORD / .pgpass; a
  password in the string, ``user:password@`` or ``?password=``, is used to connect but never
  echoed back in ``spec``: see :mod:`twice.core.secrets`)
* ``parquet:///abs/dir`` (Hive layout ``key=value/``; ``?overwrite=static|dynamic``)
* ``spark:///abs/warehouse#table`` (or ``?table=``; ``?overwrite=static|dynamic``,
  ``?master=local[2]``; needs ``twice[spark]`` and Java 17)
* ``iceberg:///abs/warehouse#namespace.table`` (pyiceberg, embedded SQLite catalog; or a shared
  one with ``?catalog_uri=postgresql://...``; needs ``twice[iceberg]``)
* ``delta:///abs/table`` (Delta Lake through delta-rs: one Delta commit per write, the
  commit record in the commit itself; needs ``twice[delta]``)

The query options ``partition_column=NAME`` and ``key_columns=a,b`` are understood by every
engine, so one string names a destination completely for the ledger and the CLI.
``keep_previous=DAYS`` (SQL engines only) keeps each replaced slice for ``twice diff``
(:mod:`twice.destinations.previous`); it is not part of the canonical ``spec``. A new engine
is one new module exposing ``open_destination(spec: DestinationSpec) -> Destination``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from twice.core.schemes import ENGINE_MODULES
from twice.destinations.errors import (
    DestinationError,
    DestinationSpecError,
    DestinationUnavailableError,
)

if TYPE_CHECKING:
    from twice.core.identifiers import IdentifierError
    from twice.destinations.base import Destination, DestinationSpec, WriteResult
    from twice.destinations.columns import ColumnType, SchemaError
    from twice.destinations.rows import DuplicateKeyError
    from twice.destinations.slices import PartitionError, RowsOutsidePartitionError

# Imported on first use: the engines and PyArrow load only when a destination is really used
# (``twice.destinations.commits``, which every attempt needs, stays light).
_LAZY = {
    "Destination": "destinations.base", "DestinationSpec": "destinations.base",
    "WriteResult": "destinations.base", "ColumnType": "destinations.columns",
    "SchemaError": "destinations.columns", "IdentifierError": "core.identifiers",
    "DuplicateKeyError": "destinations.rows", "PartitionError": "destinations.slices",
    "RowsOutsidePartitionError": "destinations.slices",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'twice.destinations' has no attribute {name!r}")
    return getattr(importlib.import_module(f"twice.{module}"), name)


def open_destination(
    spec: str,
    *,
    partition_column: str | None = None,
    key_columns: Sequence[str] | None = None,
) -> Destination:
    """Open the destination named by ``spec``; keyword arguments fill in or must agree with
    the ``partition_column`` / ``key_columns`` query options."""
    from twice.core.identifiers import validate_identifier, validate_identifiers
    from twice.core.secrets import with_credentials
    from twice.destinations.base import DestinationSpec

    # A task's destination is its public identity (no password): connect with the spec the
    # task declared (twice.core.secrets). The engine's ``spec`` attribute stays public.
    parsed = DestinationSpec.parse(with_credentials(spec))
    module_name = ENGINE_MODULES.get(parsed.scheme)
    if module_name is None:
        raise DestinationSpecError(
            f"unknown destination scheme {parsed.scheme!r}: use one of "
            + ", ".join(sorted(ENGINE_MODULES))
        )
    if partition_column is not None:
        validate_identifier(partition_column, "partition_column")
        if parsed.partition_column not in (None, partition_column):
            raise DestinationSpecError(
                f"partition_column {partition_column!r} contradicts the destination's "
                f"{parsed.partition_column!r}"
            )
        parsed = dataclasses.replace(parsed, partition_column=partition_column)
    if key_columns is not None:
        keys = validate_identifiers(key_columns, "key column")
        if parsed.key_columns and parsed.key_columns != keys:
            raise DestinationSpecError(
                f"key_columns {list(keys)} contradict the destination's {list(parsed.key_columns)}"
            )
        parsed = dataclasses.replace(parsed, key_columns=keys)
    module = importlib.import_module(f"twice.destinations.{module_name}")
    destination: Destination = module.open_destination(parsed)
    if parsed.keep_previous is not None and getattr(destination, "keep_previous", None) is None:
        destination.close()
        raise DestinationSpecError(
            f"{parsed.scheme} destinations take no keep_previous: it is for SQL destinations "
            "(sqlite, duckdb, postgresql); Delta and Iceberg tables keep versions themselves"
        )
    return destination


def check_spec(spec: str) -> None:
    """Raise ``DestinationSpecError`` if ``spec`` is malformed, before anything runs: every
    engine's ``open_destination`` only parses and names (it connects to nothing and creates
    nothing until the destination is used), so this opens and closes it. A destination that
    cannot be reached is not bad input and is left to the attempt, which retries it."""
    try:
        open_destination(spec).close()
    except DestinationSpecError:
        raise
    except DestinationError:
        pass


__all__ = [
    "ColumnType",
    "Destination",
    "DestinationError",
    "DestinationSpec",
    "DestinationSpecError",
    "DestinationUnavailableError",
    "DuplicateKeyError",
    "IdentifierError",
    "PartitionError",
    "RowsOutsidePartitionError",
    "SchemaError",
    "WriteResult",
    "check_spec",
    "open_destination",
]
