"""What the Hive-layout destinations share: a table as ``column=value`` directories on disk.

Parquet datasets (:mod:`twice.destinations.parquet`) and Spark tables
(:mod:`twice.destinations.spark`) both keep one directory per value of the partition column,
``day=2026-11-30/``, and treat the directories on disk as the source of truth. They share:
which column kinds can name a directory and how a value becomes a directory name (and back),
the static / dynamic overwrite modes, the partition column a table records for itself, how
incoming rows are checked before anything is written, and durable writes of twice's small
metadata files. Upserts need row-level updates, which neither layout has.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote

import pyarrow as pa

from twice.core.identifiers import validate_path_value
from twice.destinations.base import BaseDestination, DestinationSpec, WriteResult
from twice.destinations.columns import ColumnType, Schema, SchemaError, schema_of
from twice.destinations.commits import ACTIVE, StampArg
from twice.destinations.errors import DestinationError
from twice.destinations.rows import RowsLike, check_keys, to_arrow
from twice.destinations.slices import PartitionError, PartitionSpec, Slice

MODES = ("static", "dynamic")
PARTITION_KINDS = ("date", "integer", "string")


def check_mode(mode: str) -> str:
    """An overwrite mode: ``static`` (the whole slice) or ``dynamic`` (partitions with rows)."""
    if mode not in MODES:
        raise DestinationError(f"overwrite must be 'static' or 'dynamic', got {mode!r}")
    return mode


def canonical_query(spec: DestinationSpec, overwrite: str) -> str:
    """The query part of a Hive destination's canonical spec: twice's options, plus the
    overwrite mode unless it is the default (``static``)."""
    query = spec.twice_query()
    if overwrite == "static":
        return query
    return f"{query}&overwrite={overwrite}" if query else f"?overwrite={overwrite}"


def dir_name(column: str, value: Any) -> str:
    """``column=value``, the directory of one partition (values that cannot be refused)."""
    text = value.isoformat() if isinstance(value, date) else str(value)
    return f"{column}={validate_path_value(text, f'partition value of {column!r}')}"


def parse_value(text: str, ctype: ColumnType) -> Any:
    """The typed partition value a directory name's ``value`` part holds."""
    if ctype.kind == "date":
        return date.fromisoformat(text)
    if ctype.kind == "integer":
        return int(text)
    return text


@dataclass(frozen=True)
class Incoming:
    """Rows checked against the table before a write (nothing is written yet)."""

    existing: Schema | None  # the table's schema, None when the table does not exist yet
    schema: Schema  # the table's schema, or the rows' for a new table
    table: pa.Table  # the rows, conformed to ``existing``
    column: str  # the partition column
    slice: Slice | None  # the slice written (None: any partition)

    @property
    def label(self) -> str:
        return "all rows" if self.slice is None else self.slice.label

    def unpacked(self) -> tuple[Schema | None, Schema, pa.Table, str, str]:
        """(existing, schema, table, column, label), for the writer's locals."""
        return self.existing, self.schema, self.table, self.column, self.label


class HiveDestination(BaseDestination, ABC):
    """A table kept as partition directories under ``partition_column``; see the module doc."""

    kind_name: ClassVar[str]  # "Parquet" / "Spark", in messages
    noun: ClassVar[str]  # "dataset" / "table", in messages
    no_upsert: ClassVar[str]  # why upsert is refused, and what to use instead
    # Whether directory names are %-escaped on disk (Spark escapes special characters).
    escaped_names: ClassVar[bool] = False

    def __init__(
        self,
        *,
        spec: str,
        partition_column: str | None = None,
        key_columns: Sequence[str] = (),
        overwrite: str = "static",
    ) -> None:
        super().__init__(spec=spec, partition_column=partition_column, key_columns=key_columns)
        self.overwrite = check_mode(overwrite)

    @abstractmethod
    def schema(self) -> Schema | None:
        """Column name -> type of the table, or None if there is none yet."""

    def _adopt_partition_column(self, stored: str | None) -> None:
        """Take the partition column the table records on disk, or refuse a different one."""
        if stored and self.partition_column is None:
            self.partition_column = stored
        elif stored and stored != self.partition_column:
            raise DestinationError(
                f"{self.spec}: {self.noun} is partitioned by {stored!r}, "
                f"not {self.partition_column!r}"
            )

    def _require_partition_column(self, schema: Schema) -> str:
        column = self.partition_column
        if column is None:
            raise DestinationError(
                f"{self.spec}: no partition_column configured (add ?partition_column=NAME, "
                "the Hive key)"
            )
        if column not in schema:
            raise SchemaError(f"partition column {column!r} is not in the rows ({list(schema)})")
        if schema[column].kind not in PARTITION_KINDS:
            raise SchemaError(
                f"{self.kind_name} partition column {column!r} is {schema[column]}; use a date, "
                "integer or string column (its value becomes a directory name)"
            )
        if len(schema) < 2:
            raise SchemaError(
                f"a {self.kind_name} {self.noun} needs a column besides the partition column"
            )
        return column

    def _incoming(
        self, rows: RowsLike, partition: PartitionSpec, *, whole_table: bool
    ) -> Incoming:
        """``rows`` conformed to the table and checked: inside the slice of ``partition``
        (when ``whole_table``, ``partition=None`` means any partition, but not a null one),
        key columns unique."""
        existing = self.schema()
        table = to_arrow(rows, target=existing)
        schema = existing or schema_of(table)
        column = self._require_partition_column(schema)
        slc = None
        if partition is not None or not whole_table:
            slc = Slice.of(column, schema[column], partition)
            slc.check_rows(table)
        elif table.column(column).null_count:
            raise PartitionError(
                f"{self.spec}: {table.column(column).null_count} row(s) have a null "
                f"partition column {column!r}; nothing was written"
            )
        check_keys(table, self.key_columns)
        return Incoming(existing, schema, table, column, slc)

    def _partitions_in(
        self, root: Path, slc: Slice | None, ctype: ColumnType
    ) -> dict[str, Any]:
        """Partition directories under ``root`` (name -> typed value) inside ``slc`` (all if
        None); ``{}`` when ``root`` does not exist."""
        found: dict[str, Any] = {}
        prefix = f"{self.partition_column}="
        if not root.is_dir():
            return found
        for entry in root.iterdir():
            if not entry.is_dir() or not entry.name.startswith(prefix):
                continue
            text = entry.name[len(prefix):]
            try:
                value = parse_value(unquote(text) if self.escaped_names else text, ctype)
            except ValueError:
                raise PartitionError(
                    f"{self.spec}: directory {entry.name!r} does not hold a {ctype} value"
                ) from None
            if slc is None or slc.contains(value):
                found[entry.name] = value
        return found

    def upsert(
        self, rows: RowsLike, *, partition: PartitionSpec = None, stamp: StampArg = ACTIVE
    ) -> WriteResult:
        raise DestinationError(f"{self.spec}: {self.no_upsert}")


# --------------------------------------------------------------------------- durable files


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (new, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: str | bytes) -> None:
    """Write ``path`` (text as UTF-8) and fsync it before returning."""
    with open(path, "wb") as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        handle.flush()
        os.fsync(handle.fileno())


def replace_durably(path: Path, data: str | bytes, temp: Path) -> None:
    """Replace ``path`` atomically with ``data`` (written to ``temp`` first), durably."""
    write_durable(temp, data)
    os.replace(temp, path)
    fsync_dir(path.parent)
