"""Fingerprints: row count + order-independent checksum of one partition's columns (all of them).

A fingerprint is evidence that a partition holds what a run wrote: stored in the ledger after a
write (and in the write's commit record), recomputed by ``twice verify`` and compared version to
version during a backfill. It is computed where the data is (an SQL aggregate; Arrow + hashlib
for Parquet) and it is the same for the same values on every engine. A fingerprint that is
stored always states its algorithm and its columns.

Definition (algorithm ``twice-fp-v2``)
--------------------------------------
1. Columns: EVERY column of the table by default (key or not, floats included), or the columns
   asked for, sorted by name (so the caller's order and the table's column order do not
   matter). A column of a type without a canonical text (``unsupported``, e.g. PostgreSQL
   ``jsonb``) is refused with its name and type, never silently left out.
2. Per column, per row: ``N`` if the value is NULL, else ``V`` followed by the value's canonical
   text (table in :mod:`twice.destinations.columns`: integers in decimal, ``true``/``false``,
   dates ``YYYY-MM-DD``, timestamps ``YYYY-MM-DD HH:MM:SS.ffffff`` with ``Z`` appended for
   timestamptz in UTC, decimals fixed-point with the column's scale, binary lowercase hex,
   strings as themselves, floats as below). The prefix keeps NULL, ``''`` and ``'N'`` apart.
3. Row text: the column encodings joined by U+001F (unit separator).
4. Row hash: md5 of the row text's UTF-8 bytes; its first 15 hex digits (60 bits) read as an
   unsigned integer ``h``.
5. ``row_count`` = number of rows; ``checksum`` = (sum of ``h`` over all rows) mod 2**64,
   written as 16 lowercase hex digits. Engines sum ``h >> 30`` and ``h & (2**30 - 1)``
   separately, each fitting a signed 64-bit integer for up to 2**33 rows, and Python combines
   them exactly, so no engine ever overflows (SQLite's SUM raises on int64 overflow).

Floats: the float64 value (float32 widened exactly) as Python's ``repr`` writes it, which is the
SHORTEST decimal text that reads back to exactly the same float64 (``0.1``, ``3.0``, ``1e+16``,
``1e-05``, ``1234567890123456.0``, ``2e+23``, ``5e-324``: positional for decimal exponents
-4..15, else ``d.ddde+XX``), with every NaN written ``NaN``, the infinities ``Infinity`` and
``-Infinity``, and ``-0.0`` written ``0.0`` (:func:`twice.destinations.columns.float_text`,
which documents the layout exactly). No engine's own float-to-text conversion gives this for
every value, so each computes the float part with that one Python function: SQLite and DuckDB
through a function registered on twice's connection (inside the query), PostgreSQL by
streaming the float values in binary (exact) beside the SQL-computed text of the other columns,
Spark in its Python workers (``mapInArrow``; twice must be importable there), Parquet in Arrow.

Older fingerprints: ``twice-fp-v1`` is the same definition restricted to what it allowed: floats
were refused and by default it covered the destination's ``key_columns`` only (else every column
of a fingerprintable type). For the same non-float columns, v1 and v2 give the same checksum, so
a v1 record is still verified by recomputing over ITS recorded columns (:func:`recompute`,
:func:`verify`); the result says it is an older algorithm and which columns it covers.

Why these choices: a SUM (not XOR) of hashes makes a duplicated row change the checksum instead
of cancelling; md5 is available in DuckDB and PostgreSQL and stable across versions, unlike
DuckDB ``hash()`` or PostgreSQL ``hashtext()``; SQLite has no md5, so twice registers a
deterministic Python function ``twice_md5_60(text)`` on its own connections. Values whose text
contains U+001F could in theory collide with a different split of columns; that is accepted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from twice.core.identifiers import validate_identifiers
from twice.destinations.columns import (
    FINGERPRINT_KINDS,
    ColumnType,
    Schema,
    canonical_text,
    float_text,
)
from twice.destinations.commits import NO_FINGERPRINT
from twice.destinations.errors import DestinationError
from twice.destinations.slices import Slice

if TYPE_CHECKING:
    from twice.destinations.base import Destination, SqlDialect
    from twice.destinations.slices import PartitionSpec

ALGORITHM = "twice-fp-v2"
ALGORITHM_V1 = "twice-fp-v1"
ALGORITHMS = (ALGORITHM_V1, ALGORITHM)
UNIT_SEPARATOR = "\x1f"
LOW_BITS = 30
LOW_MASK = (1 << LOW_BITS) - 1
MODULUS = 1 << 64

__all__ = [
    "ALGORITHM", "ALGORITHMS", "ALGORITHM_V1", "Fingerprint", "VerifyResult", "arrow_sums",
    "checksum_from_sums", "fingerprint", "float_text", "hash60", "recompute", "resolve_columns",
    "verify",
]


@dataclass(frozen=True)
class Fingerprint:
    """Row count + checksum of one partition over ``columns``; equal fingerprints mean equal
    data in those columns.

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
        """Inverse of :meth:`to_dict`; a dict without an algorithm predates v2 (so it is v1)."""
        return cls(
            row_count=int(data["row_count"]), checksum=str(data["checksum"]),
            columns=tuple(data["columns"]), algorithm=str(data.get("algorithm", ALGORITHM_V1)),
            engine=str(data.get("engine", "")), partition=str(data.get("partition", "")),
        )

    @property
    def older(self) -> bool:
        """Computed by an earlier definition than the one twice records now."""
        return self.algorithm != ALGORITHM

    def __str__(self) -> str:
        return (f"{self.row_count} rows, checksum {self.checksum} "
                f"({self.algorithm} over {', '.join(self.columns)})")


@dataclass(frozen=True)
class VerifyResult:
    """A recomputed fingerprint against a recorded one, with the reason if they differ.

    ``note`` says what the verification covers when that is less than the current definition
    (a ``twice-fp-v1`` record covers only its recorded columns, never floats).
    """

    matches: bool
    recorded: Fingerprint
    current: Fingerprint
    reasons: tuple[str, ...] = ()
    note: str = ""

    @property
    def row_count_delta(self) -> int:
        return self.current.row_count - self.recorded.row_count


def checksum_from_sums(high: int, low: int) -> str:
    """Combine the per-engine partial sums into the 16-hex-digit checksum."""
    return format(((high << LOW_BITS) + low) % MODULUS, "016x")


def hash60(text: str) -> int:
    """Row hash: first 15 hex digits of md5(UTF-8 of ``text``) (the SQLite UDF and Parquet)."""
    return int(hashlib.md5(text.encode("utf-8")).hexdigest()[:15], 16)


def resolve_columns(schema: Schema, columns: Sequence[str] | None = None) -> tuple[str, ...]:
    """The sorted fingerprint columns: ``columns`` if given, else EVERY column of the table.

    A column without a canonical text (an ``unsupported`` engine type) is refused, naming the
    column and its type: a fingerprint never leaves a column out silently.
    """
    if columns:
        names = validate_identifiers(columns, "column")
        missing = [n for n in names if n not in schema]
        if missing:
            raise DestinationError(f"columns {missing} are not in the table ({list(schema)})")
    else:
        names = tuple(schema)
        if not names:
            raise DestinationError("the table has no column to fingerprint")
    bad = [f"{n!r} ({schema[n]})" for n in names if schema[n].kind not in FINGERPRINT_KINDS]
    if bad:
        raise DestinationError(
            f"cannot fingerprint column {', '.join(bad)}: the type has no canonical text "
            "that is equal on every engine, and twice does not leave columns out of a "
            "fingerprint; cast it to a supported type (text, integer, decimal, float...) or "
            "fingerprint named columns"
        )
    return tuple(sorted(names))


def record_fingerprint(
    destination: Destination, schema: Schema, partition: PartitionSpec
) -> tuple[int, str, str, tuple[str, ...]]:
    """(row count, checksum, algorithm, columns) of a slice for its commit record, as
    :func:`fingerprint` computes it by default (``twice-fp-v2`` over every column of
    ``schema``, key or not). When the slice cannot be fingerprinted (a column without canonical
    text, a PostgreSQL database that is not UTF8) the algorithm is ``"none"`` with the row
    count only and an empty checksum: the write still commits."""
    try:
        columns = resolve_columns(schema)
        count, high, low = destination.fingerprint_sums(partition, columns)
    except DestinationError:
        return destination.row_count(partition), "", NO_FINGERPRINT, ()
    return count, checksum_from_sums(high, low), ALGORITHM, columns


def fingerprint(
    destination: Destination,
    partition: PartitionSpec,
    columns: Sequence[str] | None = None,
) -> Fingerprint:
    """``twice-fp-v2`` of one slice of ``destination``: every column, unless ``columns``."""
    schema = destination.schema()
    if schema is None:
        raise DestinationError(f"{destination.spec}: nothing to fingerprint, no table/dataset")
    names = resolve_columns(schema, columns)
    count, high, low = destination.fingerprint_sums(partition, names)
    return Fingerprint(
        row_count=count, checksum=checksum_from_sums(high, low), columns=names,
        engine=destination.engine, partition=_label(destination, schema, partition),
    )


def recompute(destination: Destination, partition: PartitionSpec, recorded: Fingerprint
              ) -> Fingerprint:
    """The slice's fingerprint now, by the definition and over the columns of ``recorded``.

    ``twice-fp-v2``: over the recorded columns. ``twice-fp-v1``: the same row text over its
    recorded columns (v1 never held a float; one that does is refused). Any other algorithm,
    or a record without its columns, cannot be recomputed (:class:`DestinationError`).
    """
    if recorded.algorithm not in ALGORITHMS:
        raise DestinationError(
            f"recorded fingerprint uses {recorded.algorithm!r}, which this twice cannot "
            f"recompute (it knows {', '.join(ALGORITHMS)})"
        )
    if not recorded.columns:
        raise DestinationError(
            f"recorded {recorded.algorithm} fingerprint does not list its columns, so it cannot "
            "be recomputed; rerun the unit (or backfill --force) to record one that does"
        )
    if recorded.algorithm == ALGORITHM_V1:
        schema = destination.schema()
        if schema is None:
            raise DestinationError(f"{destination.spec}: nothing to fingerprint, no table")
        floats = [c for c in recorded.columns if c in schema and schema[c].kind == "float"]
        if floats:
            raise DestinationError(
                f"recorded {ALGORITHM_V1} fingerprint names float columns {floats}, which that "
                "algorithm never covered; it cannot be recomputed"
            )
    current = fingerprint(destination, partition, recorded.columns)
    if recorded.algorithm == ALGORITHM:
        return current
    return Fingerprint(current.row_count, current.checksum, current.columns, recorded.algorithm,
                       current.engine, current.partition)


def verify(destination: Destination, partition: PartitionSpec, recorded: Fingerprint
           ) -> VerifyResult:
    """Recompute the fingerprint as it was recorded and say whether it still matches."""
    current = recompute(destination, partition, recorded)
    reasons = []
    if current.row_count != recorded.row_count:
        reasons.append(f"row count {recorded.row_count} -> {current.row_count}")
    if current.checksum != recorded.checksum:
        reasons.append(f"checksum {recorded.checksum} -> {current.checksum}")
    note = ""
    if recorded.older:
        note = (f"recorded with the older algorithm {recorded.algorithm}: covers only "
                f"{', '.join(recorded.columns)}; a rerun records {ALGORITHM} over every column")
    return VerifyResult(not reasons, recorded, current, tuple(reasons), note)


def _label(destination: Destination, schema: Schema, partition: PartitionSpec) -> str:
    column = destination.partition_column
    if partition is None or column is None or column not in schema:
        return "all rows" if partition is None else str(partition)
    return Slice.of(column, schema[column], partition).label


# --------------------------------------------------------------------------- SQL engines


def _encoded_sql(dialect: SqlDialect, name: str, ctype: ColumnType) -> str:
    quoted = dialect.quote(name)
    canon = dialect.canonical_text_sql(quoted, ctype)
    return f"(CASE WHEN {quoted} IS NULL THEN 'N' ELSE 'V' || {canon} END)"


def row_text_sql(dialect: SqlDialect, columns: Sequence[tuple[str, ColumnType]]) -> str:
    """SQL for step 3 of the definition: the row text of ``columns`` (already sorted).

    Float columns need the dialect's registered float function (``float_text_in_sql``)."""
    parts = [_encoded_sql(dialect, name, ctype) for name, ctype in columns]
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


def float_segments(columns: Sequence[tuple[str, ColumnType]]
                   ) -> list[tuple[bool, list[tuple[str, ColumnType]]]]:
    """``columns`` cut into runs: (is a float column, the run's columns). Consecutive non-float
    columns form one run (one text value), every float column a run of its own."""
    runs: list[tuple[bool, list[tuple[str, ColumnType]]]] = []
    for name, ctype in columns:
        is_float = ctype.kind == "float"
        if runs and not is_float and not runs[-1][0]:
            runs[-1][1].append((name, ctype))
        else:
            runs.append((is_float, [(name, ctype)]))
    return runs


def streamed_sql(dialect: SqlDialect, table_sql: str, where_sql: str,
                 columns: Sequence[tuple[str, ColumnType]]) -> tuple[str, tuple[bool, ...]]:
    """A query for engines that cannot run :func:`float_text` in SQL (PostgreSQL): one value
    per run of :func:`float_segments`, the joined encodings of non-float columns as text and
    each float column as a double; with which values are floats. :func:`streamed_sums`
    finishes the row text and the hash in Python."""
    exprs, floats = [], []
    for is_float, run in float_segments(columns):
        if is_float:
            exprs.append(dialect.float_sql(dialect.quote(run[0][0])))
        else:
            exprs.append(row_text_sql(dialect, run))
        floats.append(is_float)
    return f"SELECT {', '.join(exprs)} FROM {table_sql} WHERE {where_sql}", tuple(floats)


def _float_part(value: float | None) -> str:
    return "N" if value is None else "V" + float_text(value)


def streamed_sums(rows: Iterable[Sequence[Any]], floats: Sequence[bool]
                  ) -> tuple[int, int, int]:
    """(count, high sum, low sum) of rows from :func:`streamed_sql` (or the Spark workers)."""
    count = total = 0
    for row in rows:
        parts = [_float_part(v) if is_float else v
                 for v, is_float in zip(row, floats, strict=True)]
        total += hash60(UNIT_SEPARATOR.join(parts))
        count += 1
    return count, total >> LOW_BITS, total & LOW_MASK


def batch_sums(batches: Iterable[pa.RecordBatch], floats: Sequence[bool]
               ) -> Iterator[pa.RecordBatch]:
    """Spark ``mapInArrow`` body: one (n, high, low) row per batch of :func:`streamed_sql`-like
    columns (runs of encoded text, and raw doubles)."""
    for batch in batches:
        columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
        n, high, low = streamed_sums(zip(*columns, strict=True), floats)
        yield pa.RecordBatch.from_pydict(
            {"n": [n], "high": [high], "low": [low]},
            schema=pa.schema([("n", pa.int64()), ("high", pa.int64()), ("low", pa.int64())]),
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
