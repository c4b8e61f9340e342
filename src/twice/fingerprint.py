"""Fingerprints: row count + order-independent checksum of one partition's key columns.

A fingerprint is evidence that a partition holds what a run wrote: stored in the ledger after a
write, recomputed by ``twice verify`` and compared version to version during a backfill. It is
computed *inside* the engine (SQL aggregate; Arrow + hashlib for Parquet), never by pulling rows
into Python, and it is the same for the same values on every engine.

Definition (algorithm ``twice-fp-v1``)
--------------------------------------
1. Columns: the requested key columns, sorted by name (so the caller's order and the table's
   column order do not matter). Floats and unsupported types are refused.
2. Per column, per row: ``N`` if the value is NULL, else ``V`` followed by the value's canonical
   text (table in :mod:`twice.destinations.columns`: integers in decimal, ``true``/``false``,
   dates ``YYYY-MM-DD``, timestamps ``YYYY-MM-DD HH:MM:SS.ffffff`` with ``Z`` appended for
   timestamptz in UTC, decimals fixed-point with the column's scale, binary lowercase hex,
   strings as themselves). The prefix keeps NULL, ``''`` and ``'N'`` apart.
3. Row text: the column encodings joined by U+001F (unit separator).
4. Row hash: md5 of the row text's UTF-8 bytes; its first 15 hex digits (60 bits) read as an
   unsigned integer ``h``.
5. ``row_count`` = number of rows; ``checksum`` = (sum of ``h`` over all rows) mod 2**64,
   written as 16 lowercase hex digits. Engines sum ``h >> 30`` and ``h & (2**30 - 1)``
   separately, each fitting a signed 64-bit integer for up to 2**33 rows, and Python combines
   them exactly, so no engine ever overflows (SQLite's SUM raises on int64 overflow).

Why these choices: a SUM (not XOR) of hashes makes a duplicated row change the checksum instead
of cancelling; md5 is available in DuckDB and PostgreSQL and stable across versions, unlike
DuckDB ``hash()`` or PostgreSQL ``hashtext()``; SQLite has no md5, so twice registers a
deterministic Python function ``twice_md5_60(text)`` on its own connections. Values whose text
contains U+001F could in theory collide with a different split of columns; that is accepted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from twice.destinations.columns import FINGERPRINT_KINDS, ColumnType, Schema, canonical_text
from twice.destinations.errors import DestinationError
from twice.destinations.identifiers import validate_identifiers
from twice.destinations.slices import Slice

if TYPE_CHECKING:
    from twice.destinations.base import Destination, SqlDialect
    from twice.destinations.slices import PartitionSpec

ALGORITHM = "twice-fp-v1"
UNIT_SEPARATOR = "\x1f"
LOW_BITS = 30
LOW_MASK = (1 << LOW_BITS) - 1
MODULUS = 1 << 64


@dataclass(frozen=True)
class Fingerprint:
    """Row count + checksum of one partition; equal fingerprints mean equal key data.

    Equality compares algorithm, columns, count and checksum; ``engine`` and ``partition`` are
    descriptive only, so the same data fingerprinted in DuckDB and in Parquet compares equal.
    """

    row_count: int
    checksum: str
    columns: tuple[str, ...]
    algorithm: str = ALGORITHM
    engine: str = field(default="", compare=False)
    partition: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "row_count": self.row_count, "checksum": self.checksum,
            "columns": list(self.columns), "algorithm": self.algorithm,
            "engine": self.engine, "partition": self.partition,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        return cls(
            row_count=int(data["row_count"]), checksum=str(data["checksum"]),
            columns=tuple(data["columns"]), algorithm=str(data.get("algorithm", ALGORITHM)),
            engine=str(data.get("engine", "")), partition=str(data.get("partition", "")),
        )

    def __str__(self) -> str:
        return f"{self.row_count} rows, checksum {self.checksum} ({', '.join(self.columns)})"


@dataclass(frozen=True)
class VerifyResult:
    """A recomputed fingerprint against a recorded one, with the reason if they differ."""

    matches: bool
    recorded: Fingerprint
    current: Fingerprint
    reasons: tuple[str, ...] = ()

    @property
    def row_count_delta(self) -> int:
        return self.current.row_count - self.recorded.row_count


def checksum_from_sums(high: int, low: int) -> str:
    """Combine the per-engine partial sums into the 16-hex-digit checksum."""
    return format(((high << LOW_BITS) + low) % MODULUS, "016x")


def hash60(text: str) -> int:
    """Row hash: first 15 hex digits of md5(UTF-8 of ``text``) (the SQLite UDF and Parquet)."""
    return int(hashlib.md5(text.encode("utf-8")).hexdigest()[:15], 16)


def resolve_columns(schema: Schema, key_columns: Sequence[str] | None) -> tuple[str, ...]:
    """Sorted fingerprint columns; by default every column of a fingerprintable type.

    Explicit columns of a float or unsupported type are refused (they have no canonical text);
    the default silently leaves them out, and the Fingerprint records what was used.
    """
    if key_columns:
        names = validate_identifiers(key_columns, "key column")
        missing = [n for n in names if n not in schema]
        if missing:
            raise DestinationError(f"key columns {missing} are not in the table ({list(schema)})")
        bad = [f"{n} ({schema[n]})" for n in names if schema[n].kind not in FINGERPRINT_KINDS]
        if bad:
            raise DestinationError(
                f"cannot fingerprint {', '.join(bad)}: floats and unsupported types have no "
                "canonical text across engines; cast to a decimal or choose other columns"
            )
    else:
        names = tuple(n for n, t in schema.items() if t.kind in FINGERPRINT_KINDS)
        if not names:
            raise DestinationError("no column of a fingerprintable type in the table")
    return tuple(sorted(names))


def fingerprint(
    destination: Destination,
    partition: PartitionSpec,
    key_columns: Sequence[str] | None = None,
) -> Fingerprint:
    """Fingerprint one slice of ``destination`` (its ``key_columns`` unless given)."""
    schema = destination.schema()
    if schema is None:
        raise DestinationError(f"{destination.spec}: nothing to fingerprint, no table/dataset")
    columns = resolve_columns(schema, key_columns or destination.key_columns or None)
    count, high, low = destination.fingerprint_sums(partition, columns)
    return Fingerprint(
        row_count=count, checksum=checksum_from_sums(high, low), columns=columns,
        engine=destination.engine, partition=_label(destination, schema, partition),
    )


def verify(destination: Destination, partition: PartitionSpec, recorded: Fingerprint
           ) -> VerifyResult:
    """Recompute the fingerprint on the recorded columns and say whether it still matches."""
    if recorded.algorithm != ALGORITHM:
        raise DestinationError(
            f"recorded fingerprint uses {recorded.algorithm!r}; this twice computes {ALGORITHM}"
        )
    current = fingerprint(destination, partition, recorded.columns)
    reasons = []
    if current.row_count != recorded.row_count:
        reasons.append(f"row count {recorded.row_count} -> {current.row_count}")
    if current.checksum != recorded.checksum:
        reasons.append(f"checksum {recorded.checksum} -> {current.checksum}")
    return VerifyResult(not reasons, recorded, current, tuple(reasons))


def _label(destination: Destination, schema: Schema, partition: PartitionSpec) -> str:
    column = destination.partition_column
    if partition is None or column is None or column not in schema:
        return "all rows" if partition is None else str(partition)
    return Slice.of(column, schema[column], partition).label


# --------------------------------------------------------------------------- SQL engines


def row_text_sql(dialect: SqlDialect, columns: Sequence[tuple[str, ColumnType]]) -> str:
    """SQL for step 3 of the definition: the row text of ``columns`` (already sorted)."""
    parts = []
    for name, ctype in columns:
        quoted = dialect.quote(name)
        canon = dialect.canonical_text_sql(quoted, ctype)
        parts.append(f"(CASE WHEN {quoted} IS NULL THEN 'N' ELSE 'V' || {canon} END)")
    return f" || {dialect.unit_separator} || ".join(parts)


def fingerprint_sql(
    dialect: SqlDialect, table_sql: str, where_sql: str,
    columns: Sequence[tuple[str, ColumnType]],
) -> str:
    """One aggregate query returning (count, sum of high parts, sum of low parts)."""
    hashed = dialect.hash60_sql(row_text_sql(dialect, columns))
    return (
        f"SELECT count(*), sum(h >> {LOW_BITS}), sum(h & {LOW_MASK}) "
        f"FROM (SELECT {hashed} AS h FROM {table_sql} WHERE {where_sql}) AS twice_fp"
    )


# --------------------------------------------------------------------------- Arrow (Parquet)


def row_texts(table: pa.Table, columns: Sequence[tuple[str, ColumnType]]) -> pa.ChunkedArray:
    """Arrow compute version of :func:`row_text_sql` (the reference for the SQL engines)."""
    encoded = []
    for name, ctype in columns:
        text = canonical_text(table.column(name), ctype)
        prefixed = pc.binary_join_element_wise(pa.scalar("V"), text, "")
        encoded.append(pc.fill_null(prefixed, "N"))
    if len(encoded) == 1:
        return encoded[0]
    return pc.binary_join_element_wise(*encoded, UNIT_SEPARATOR)


def arrow_sums(table: pa.Table, columns: Sequence[tuple[str, ColumnType]]) -> tuple[int, int, int]:
    """(count, high sum, low sum) over an Arrow table, hashing with hashlib row by row."""
    total = 0
    for chunk in row_texts(table, columns).chunks:
        for text in chunk.to_pylist():
            total += hash60(text)
    return table.num_rows, total >> LOW_BITS, total & LOW_MASK
