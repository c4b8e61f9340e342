"""Fingerprints: row count + order-independent checksum of one partition's columns (all of them).

A fingerprint is evidence that a partition holds what a run wrote: stored in the ledger after a
write (and in the write's commit record), recomputed by ``twice verify`` and compared version to
version during a backfill. It is the same for the same values on every engine. A fingerprint
that is stored always states its algorithm and its columns; ``twice verify`` recomputes it by
the algorithm it states, so fingerprints recorded by older definitions still verify.

Definition (algorithm ``twice-fp-v3``, the current one)
-------------------------------------------------------
Every engine reads the slice's columns as Arrow (DuckDB natively, PostgreSQL as ``COPY ... TO
STDOUT (FORMAT csv)`` parsed by Arrow, SQLite in cursor batches, Parquet, Spark in its Python
workers through ``mapInArrow``) and twice hashes them vectorised with numpy
(:func:`batches_sums`), never with one Python call per value. All arithmetic is mod 2**64;
``fmix`` is MurmurHash3's 64-bit finaliser (``x ^= x >> 33; x *= 0xff51afd7ed558ccd;
x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53; x ^= x >> 33``).

1. Columns: as v2 (every column by default, or those asked for, sorted by name; a column of
   a type without a canonical form is refused, never left out).
2. Per value, its canonical VALUE (one-to-one with the canonical text of v2, so exactly the
   same values are equal): integer: the int64; boolean: 1 or 0; date: days since 1970-01-01;
   timestamp: microseconds since 1970-01-01 00:00; timestamptz: microseconds since the epoch
   in UTC; float: the IEEE-754 bits of the float64 (float32 widened exactly) with every NaN
   written ``0x7ff8000000000000`` and ``-0.0`` as ``0.0`` (the float is covered exactly as its
   canonical text :func:`float_text` distinguishes it); decimal(p,s): the unscaled 128-bit
   two's complement integer (low word ``lo``, high word ``hi``); string: its UTF-8 bytes;
   binary: its bytes. Each kind has a seed ``seed = fmix((K << 8) + scale)`` with K =
   integer 1, boolean 2, string 3, binary 4, date 5, timestamp 6, timestamptz 7, decimal 8,
   float 9 (scale 0 but for decimals), so equal bits of different kinds hash apart.
3. Value hash ``u``: NULL: ``fmix(0x6e756c6c)``. A 64-bit value ``w``: ``fmix(w ^ seed)``.
   Decimal: ``fmix(fmix(lo ^ seed) ^ hi)``. Bytes of length L: with ``w_k`` the k-th 8-byte
   little-endian word (the last zero-padded), ``s = sum over k of fmix(w_k + (k + 1) *
   0x9e3779b97f4a7c15)``, ``u = fmix(fmix(s ^ fmix(L)) ^ seed)``.
4. Row hash: ``acc = 0``; for each column in order ``acc = (acc ^ u) * 0x100000001b3``;
   row hash ``fmix(acc)``.
5. ``row_count`` = number of rows; ``checksum`` = (sum of the row hashes) mod 2**64, written
   as 16 lowercase hex digits.

Why: hashing text with md5 inside the engines cost 9-40x reading the same columns (issue 23);
Arrow batches hashed with numpy cost about as much as reading them. A SUM (not XOR) keeps a
duplicated row visible. Like v2 this detects changes, it is not a cryptographic commitment.

Older definition (algorithm ``twice-fp-v2``), still computed to verify v2 records
--------------------------------------------------------------------------------
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from twice.core.identifiers import validate_identifiers
from twice.destinations.columns import (
    FINGERPRINT_KINDS,
    ColumnType,
    Schema,
    canonical_text,
    float_text,
    mostly_repeated,
)
from twice.destinations.commits import NO_FINGERPRINT
from twice.destinations.errors import DestinationError
from twice.destinations.slices import Slice

if TYPE_CHECKING:
    from twice.destinations.base import Destination, SqlDialect
    from twice.destinations.slices import PartitionSpec

ALGORITHM = "twice-fp-v3"
ALGORITHM_V2 = "twice-fp-v2"
ALGORITHM_V1 = "twice-fp-v1"
ALGORITHMS = (ALGORITHM_V1, ALGORITHM_V2, ALGORITHM)
# Checksums of these algorithms agree on every column both can hold (v1 is v2 without floats).
_ROW_TEXT_FAMILY = frozenset({ALGORITHM_V1, ALGORITHM_V2})
UNIT_SEPARATOR = "\x1f"
LOW_BITS = 30
LOW_MASK = (1 << LOW_BITS) - 1
MODULUS = 1 << 64

__all__ = [
    "ALGORITHM", "ALGORITHMS", "ALGORITHM_V1", "ALGORITHM_V2", "Fingerprint", "VerifyResult",
    "arrow_sums", "arrow_sums_v2", "batches_sums", "checksum_from_sums", "comparable_algorithms",
    "fingerprint", "float_text", "hash60", "recompute", "resolve_columns", "verify",
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


def comparable_algorithms(a: str, b: str) -> bool:
    """Whether checksums of algorithms ``a`` and ``b`` can be compared (over the same columns):
    the same algorithm, or both of the row-text family (``twice-fp-v1`` and ``-v2`` agree on
    every column v1 could hold). A ``twice-fp-v3`` checksum never equals a v2 one."""
    if a not in ALGORITHMS or b not in ALGORITHMS:
        return False
    return a == b or (a in _ROW_TEXT_FAMILY and b in _ROW_TEXT_FAMILY)


def partition_sums(destination: Destination, partition: PartitionSpec, columns: Sequence[str],
                   algorithm: str = ALGORITHM) -> tuple[int, int, int]:
    """(row count, high sum, low sum) of ``algorithm`` over ``columns`` (already resolved).

    ``twice-fp-v3``: the destination's ``fingerprint_sums`` (every engine computes the current
    algorithm there). ``twice-fp-v2`` (and v1, the same row text): the destination's
    ``fingerprint_sums_v2`` when it has one (the SQL engines and Spark hash in the engine),
    else its rows read as Arrow and hashed here (:func:`arrow_sums_v2`).
    """
    if algorithm == ALGORITHM:
        return destination.fingerprint_sums(partition, columns)
    if algorithm not in _ROW_TEXT_FAMILY:
        raise DestinationError(f"unknown fingerprint algorithm {algorithm!r}")
    legacy = getattr(destination, "fingerprint_sums_v2", None)
    if legacy is not None:
        count, high, low = legacy(partition, columns)
        return int(count), int(high), int(low)
    table = destination.read_partition(partition, list(columns))
    schema = destination.schema() or {}
    return arrow_sums_v2(table, [(c, schema[c]) for c in columns])


def record_fingerprint(
    destination: Destination, schema: Schema, partition: PartitionSpec
) -> tuple[int, str, str, tuple[str, ...]]:
    """(row count, checksum, algorithm, columns) of a slice for its commit record, as
    :func:`fingerprint` computes it by default (``twice-fp-v3`` over every column of
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
    algorithm: str = ALGORITHM,
) -> Fingerprint:
    """The fingerprint of one slice of ``destination``: every column, unless ``columns``;
    ``twice-fp-v3`` unless ``algorithm`` names an older definition (``twice-fp-v2``)."""
    if algorithm not in (ALGORITHM, ALGORITHM_V2):
        raise DestinationError(
            f"fingerprint algorithm {algorithm!r}: choose {ALGORITHM} or {ALGORITHM_V2}"
        )
    schema = destination.schema()
    if schema is None:
        raise DestinationError(f"{destination.spec}: nothing to fingerprint, no table/dataset")
    names = resolve_columns(schema, columns)
    count, high, low = partition_sums(destination, partition, names, algorithm)
    return Fingerprint(
        row_count=count, checksum=checksum_from_sums(high, low), columns=names,
        algorithm=algorithm, engine=destination.engine,
        partition=_label(destination, schema, partition),
    )


def recompute(destination: Destination, partition: PartitionSpec, recorded: Fingerprint
              ) -> Fingerprint:
    """The slice's fingerprint now, by the definition and over the columns of ``recorded``.

    ``twice-fp-v3`` and ``twice-fp-v2``: over the recorded columns, by that definition.
    ``twice-fp-v1``: the v2 row text over its recorded columns (v1 never held a float; one
    that does is refused). Any other algorithm, or a record without its columns, cannot be
    recomputed (:class:`DestinationError`).
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
    by = ALGORITHM if recorded.algorithm == ALGORITHM else ALGORITHM_V2
    current = fingerprint(destination, partition, recorded.columns, by)
    if recorded.algorithm == by:
        return current
    return Fingerprint(current.row_count, current.checksum, current.columns, recorded.algorithm,
                       current.engine, current.partition)


def verify(destination: Destination, partition: PartitionSpec, recorded: Fingerprint, *,
           every_column: bool = False) -> VerifyResult:
    """Recompute the fingerprint as it was recorded and say whether it still matches.

    ``every_column``: ``recorded`` was taken over every column the table had then (the
    ledger's fingerprints are). A column added since (an additive schema change) is then not
    covered by it, and must hold NULL in every row of the slice, as the change left it: the
    note says so, and a non-null value there (written behind twice's back) is a mismatch.
    """
    current = recompute(destination, partition, recorded)
    reasons = []
    if current.row_count != recorded.row_count:
        reasons.append(f"row count {recorded.row_count} -> {current.row_count}")
    if current.checksum != recorded.checksum:
        reasons.append(f"checksum {recorded.checksum} -> {current.checksum}")
    note = ""
    if recorded.algorithm == ALGORITHM_V1:
        note = (f"recorded with the older algorithm {recorded.algorithm}: covers only "
                f"{', '.join(recorded.columns)}; a rerun records {ALGORITHM} over every column")
    elif recorded.older:
        note = (f"recorded with the older algorithm {recorded.algorithm} (recomputed by it); "
                f"a rerun records {ALGORITHM}")
    if every_column and recorded.algorithm != ALGORITHM_V1:  # v1 never covered floats
        added, nonnull = _added_since(destination, partition, recorded)
        if nonnull:
            reasons += [f"column {name}, added after this version was recorded, holds {count} "
                        "non-null value(s) (the change left it NULL in this slice)"
                        for name, count in nonnull.items()]
        elif added:
            many = len(added) > 1
            note = "; ".join(filter(None, [note, (
                f"column{'s' if many else ''} {', '.join(added)} {'were' if many else 'was'} "
                f"added after this version was recorded and {'hold' if many else 'holds'} NULL "
                "in every row of the slice, as the change left "
                f"{'them' if many else 'it'}; the fingerprint covers the recorded columns")]))
    return VerifyResult(not reasons, recorded, current, tuple(reasons), note)


def _added_since(destination: Destination, partition: PartitionSpec, recorded: Fingerprint
                 ) -> tuple[list[str], dict[str, int]]:
    """The table's columns that a fingerprint over every column did not cover (added since:
    an additive schema change), and those of them holding non-null values in the slice
    (count by column), which only a write behind twice's back can have put there."""
    schema = destination.schema()
    if schema is None:
        return [], {}
    added = [name for name in schema if name not in recorded.columns]
    if not added:
        return [], {}
    rows = destination.row_count(partition)
    nulls = destination.null_counts(partition, added)
    return added, {name: rows - nulls[name] for name in added if rows - nulls[name]}


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


def arrow_sums_v2(table: pa.Table, columns: Sequence[tuple[str, ColumnType]]
                  ) -> tuple[int, int, int]:
    """``twice-fp-v2`` (count, high sum, low sum) over an Arrow table, hashing with hashlib row
    by row."""
    total = 0
    for chunk in row_texts(table, columns).chunks:
        for text in chunk.to_pylist():
            total += hash60(text)
    return table.num_rows, total >> LOW_BITS, total & LOW_MASK


# --------------------------------------------------------------------------- twice-fp-v3
#
# Every engine hands the columns over as Arrow (DuckDB natively, PostgreSQL as COPY CSV parsed
# by Arrow, SQLite in cursor batches, Parquet/Spark/others as they read) and this code hashes
# them with numpy, a column at a time, never a Python call per value. See the module docstring
# for the definition; the constants below are part of it.
#
# Speed: each numpy pass over a batch costs about the same whatever it does, so the code counts
# passes, and it writes them into work arrays kept from batch to batch (``_Scratch``): a fresh
# ~1 MB temporary per operation cost more in page faults than its arithmetic (glibc gives the
# freed top of its heap back to the system, and the next batch faults it in again).

_U64 = np.uint64
_FMIX_1 = _U64(0xFF51AFD7ED558CCD)
_FMIX_2 = _U64(0xC4CEB9FE1A85EC53)
_SHIFT_33 = _U64(33)
_ROW_PRIME = _U64(0x100000001B3)
_WORD_KEY = 0x9E3779B97F4A7C15
_NULL_WORD = 0x6E756C6C  # "null"
_CANONICAL_NAN = 0x7FF8000000000000
# One seed per kind, so the same bits of two kinds (5 and 1970-01-06) hash apart, as their
# canonical texts differ; decimals add their scale (1.50 at scale 2 is not 1.500 at scale 3).
_KIND_SEEDS = {
    "integer": 1, "boolean": 2, "string": 3, "binary": 4, "date": 5, "timestamp": 6,
    "timestamptz": 7, "decimal": 8, "float": 9,
}
_BATCH_ROWS = 1 << 17
_SHORT_WORDS = 4  # values of up to 32 bytes (or of similar lengths): the per-word-number loop
# by the number of a word's bytes that belong to its value (0..8): the mask keeping them, and
# whether the word exists at all (a value of 3 words has no 4th)
_BYTE_MASKS = np.array([(1 << (8 * used)) - 1 for used in range(9)], _U64)
_WORD_EXISTS = np.array([0] + [(1 << 64) - 1] * 8, _U64)


class _Scratch:
    """Work arrays by name, reused by every batch and column of one :func:`batches_sums` call
    (see "Speed" above). A name is one array of one dtype: two live results never share one.

    ``known``: by column number, the distinct values of its last dictionary-encoded batch and
    their value hashes (see :func:`_text_hashes`), or None once a batch held a value outside."""

    __slots__ = ("_arrays", "known")

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self.known: dict[int, tuple[pa.Array, np.ndarray] | None] = {}

    def get(self, name: str, n: int, dtype: type[np.generic] = np.uint64) -> np.ndarray:
        array = self._arrays.get(name)
        if array is None or len(array) < n:  # grown by half again: sizes vary by batch
            array = self._arrays[name] = np.empty(n + n // 2, dtype)
        return array[:n]


def _fmix(x: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place, mod 2**64; ``tmp``: a work array as long."""
    tmp = np.empty_like(x) if tmp is None else tmp
    np.right_shift(x, _SHIFT_33, out=tmp)
    x ^= tmp
    x *= _FMIX_1
    np.right_shift(x, _SHIFT_33, out=tmp)
    x ^= tmp
    x *= _FMIX_2
    np.right_shift(x, _SHIFT_33, out=tmp)
    x ^= tmp
    return x


def _fmix_int(x: int) -> int:
    """:func:`_fmix` of one Python integer (seeds, and a column of one repeated value)."""
    mask = (1 << 64) - 1
    x &= mask
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & mask
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & mask
    return x ^ (x >> 33)


def _seed(ctype: ColumnType) -> int:
    return _fmix_int((_KIND_SEEDS[ctype.kind] << 8) + (ctype.scale or 0))


_NULL_HASH = _U64(_fmix_int(_NULL_WORD))


def _int_words(array: pa.Array, dtype: Any, per_value: int = 1) -> np.ndarray:
    """The values of a fixed-width array as ``per_value`` numpy ``dtype`` words each, read in
    place (no copy); what lies under a NULL is arbitrary: the caller overwrites those rows."""
    size = per_value * np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype, per_value * len(array), array.offset * size)


def _repeated(*words: np.ndarray) -> bool:
    """Whether each of ``words`` holds one value in every row: then one hash serves all rows
    (a partition column is constant in its slice). The ends first: cheap when it is not."""
    return all(w[0] == w[-1] for w in words) and all(w.min() == w.max() for w in words)


def _byte_hashes(array: pa.Array, scratch: _Scratch | None = None) -> np.ndarray:
    """Per value: (sum over its 8-byte little-endian words w_k, zero-padded, of
    fmix(w_k + (k+1) * 0x9E3779B97F4A7C15)) mod 2**64, then fmix(that XOR fmix(byte length)).
    Vectorised over all words of all values; the result is ``scratch``'s ``"u"`` array."""
    if pa.types.is_string_view(array.type) or pa.types.is_binary_view(array.type):
        array = array.cast(pa.large_binary())
    if pa.types.is_fixed_size_binary(array.type):
        array = array.cast(pa.binary())
    scratch = _Scratch() if scratch is None else scratch
    large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    offset_type = np.int64 if large else np.int32
    n = len(array)
    buffers = array.buffers()
    # numpy's offset is in bytes; a sliced array (every batch after the first one
    # batches_sums cuts) starts ``array.offset`` elements into its offsets buffer
    offsets = np.frombuffer(buffers[1], offset_type, n + 1,
                            array.offset * np.dtype(offset_type).itemsize)
    base = int(offsets[0])
    size = int(offsets[-1]) - base
    starts = np.subtract(offsets[:-1], base, out=scratch.get("starts", n, np.int64))
    lengths = np.subtract(offsets[1:], offsets[:-1], out=scratch.get("lengths", n, np.int64))
    longest = int(lengths.max()) if n else 0
    most = (longest + 7) >> 3  # words of the longest value
    fewest = (int(lengths.min()) + 7) >> 3 if n else 0  # ... and of the shortest
    # the bytes as little-endian 64-bit words (a copy: aligned, and readable past the end); a
    # word at any byte offset is two aligned words shifted together, masked to its value
    aligned = scratch.get("data", (size + 7) // 8 + most + 2)
    raw = aligned.view(np.uint8)
    if size:
        raw[:size] = np.frombuffer(buffers[2], np.uint8, size, base)
    raw[size:] = 0
    sums = scratch.get("u", n)
    # short values, or none much longer than the mean: one pass per word number over every
    # value, no index arrays (2-4x faster than indexing each word when few passes are wasted)
    if most <= _SHORT_WORDS or longest * n <= 4 * size:
        index = np.right_shift(starts, 3, out=scratch.get("index", n, np.int64))
        low = np.bitwise_and(starts, 7, out=scratch.get("low", n, np.int64))
        low <<= 3  # bits to drop from the first aligned word
        high = np.subtract(64, low, out=scratch.get("high", n, np.int64))  # 64: all of them
        used = scratch.get("used", n, np.int64)
        tmp = scratch.get("tmp", n)
        if not most:
            sums[:] = 0
        for j in range(most):
            np.subtract(lengths, 8 * j, out=used)
            np.clip(used, 0, 8, out=used)
            word = sums if j == 0 else scratch.get("word", n)
            _words_at(aligned[j:], index, low, high, used, j, word, tmp)
            if j >= fewest:  # values shorter than j + 1 words have no word j
                np.take(_WORD_EXISTS, used, out=tmp, mode="clip")
                word &= tmp
            if j:
                sums += word
    else:
        sums[:] = 0
        words_per_value = (lengths + 7) >> 3
        total_words = int(words_per_value.sum())
        has = words_per_value > 0
        first = np.cumsum(words_per_value) - words_per_value  # index of each value's 1st word
        owner = np.repeat(np.arange(n), words_per_value)
        k = np.arange(total_words) - first[owner]  # word number inside its value
        at = starts[owner] + 8 * k
        used = np.clip(lengths[owner] - 8 * k, 0, 8)
        low = (at & 7) << 3
        words = np.empty(total_words, _U64)
        _words_at(aligned, at >> 3, low, 64 - low, used, k, words, np.empty_like(words))
        sums[has] = np.add.reduceat(words, first[has])
    tmp = scratch.get("tmp", n)
    if longest <= 4 * n:  # fmix of each length from a table of them: 1 pass instead of 9
        table = _fmix(np.arange(longest + 1, dtype=_U64))
        np.take(table, lengths, out=tmp, mode="clip")
    else:
        tmp[:] = lengths
        _fmix(tmp, scratch.get("word", n))
    sums ^= tmp
    return _fmix(sums, tmp)


def _words_at(aligned: np.ndarray, index: np.ndarray, low: np.ndarray, high: np.ndarray,
              used: np.ndarray, k: np.ndarray | int, out: np.ndarray, tmp: np.ndarray
              ) -> np.ndarray:
    """fmix(w + (k+1) * KEY), into ``out``, of the 8-byte little-endian words that start
    ``low`` bits into aligned word ``index`` (``high`` = 64 - low) and of which ``used`` bytes
    (0..8) belong to the value; the rest are zeroed. numpy shifts by 64 give 0 (``high`` when
    ``low`` is 0)."""
    np.take(aligned, index, out=out, mode="clip")
    out >>= low.view(_U64)
    np.take(aligned[1:], index, out=tmp, mode="clip")
    tmp <<= high.view(_U64)
    out |= tmp
    np.take(_BYTE_MASKS, used, out=tmp, mode="clip")
    out &= tmp
    if isinstance(k, int):
        out += _U64(((k + 1) * _WORD_KEY) & (MODULUS - 1))
    else:
        out += (k.astype(_U64) + _U64(1)) * _U64(_WORD_KEY)
    return _fmix(out, tmp)


def _text_hashes(array: pa.Array, scratch: _Scratch | None = None, seed: int | None = None,
                 column: int | None = None) -> np.ndarray:
    """:func:`_byte_hashes` of every value, each distinct value hashed once when values
    repeat (codes, names, statuses: most text columns): Arrow's dictionary encoding, then a
    gather, costs as much as hashing values of up to 8 bytes, and less for longer ones. The
    hashes are the same either way (a value's hash depends on its bytes alone); a column of
    mostly distinct values, where encoding would cost more than it saves, is hashed
    directly. With ``seed``, the value hashes ``fmix(h ^ seed)`` (through the dictionary:
    once per distinct value).

    With ``column`` (its number in the batches), the distinct values are kept in ``scratch``
    for the column's next batch: when they hold all of its values, looking them up
    (``pc.index_in``) costs 2/3 of encoding the batch again."""
    scratch = _Scratch() if scratch is None else scratch
    n = len(array)
    if column is not None and (known := scratch.known.get(column)) is not None:
        found = pc.index_in(array, value_set=known[0]) if known[0].type == array.type else None
        if found is not None and found.null_count == array.null_count:  # all known
            return np.take(known[1], _int_words(found, np.int32), out=scratch.get("u", n),
                           mode="clip")
        scratch.known[column] = None  # new values: they drift, stop looking them up
    if not mostly_repeated(array):
        return _seeded(_byte_hashes(array, scratch), seed, scratch.get("tmp", n))
    encoded = pc.dictionary_encode(array)
    if len(encoded.dictionary) == 0:  # all null: masked by the caller
        return np.zeros(n, _U64)
    hashes = _seeded(_byte_hashes(encoded.dictionary), seed)
    if column is not None and column not in scratch.known:
        scratch.known[column] = (encoded.dictionary, hashes)
    indices = _int_words(encoded.indices, np.int32)  # any index under a NULL: masked
    return np.take(hashes, indices, out=scratch.get("u", n), mode="clip")


def _seeded(hashes: np.ndarray, seed: int | None, tmp: np.ndarray | None = None) -> np.ndarray:
    """``fmix(h ^ seed)`` of each hash, in place (none without a seed); ``tmp``: see _fmix."""
    if seed is None:
        return hashes
    return _fmix(np.bitwise_xor(hashes, _U64(seed), out=hashes), tmp)


def _value_hashes(array: pa.Array | pa.ChunkedArray, ctype: ColumnType,
                  scratch: _Scratch | None = None) -> np.ndarray:
    """``u`` of every value of one column: fmix of its canonical value's words XOR the kind's
    seed; nulls get the null constant (in a ``scratch`` array, or a new one without)."""
    u = _column_hashes(array, ctype, _Scratch() if scratch is None else scratch)
    return u if isinstance(u, np.ndarray) else np.full(len(array), u, _U64)


def _column_hashes(array: pa.Array | pa.ChunkedArray, ctype: ColumnType, scratch: _Scratch,
                   column: int | None = None) -> np.ndarray | np.uint64:
    """:func:`_value_hashes`, or the one hash of every row when it is the same for all (every
    row NULL, or one value in every row: no per-row work)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        return _dictionary_hashes(array, ctype, scratch)
    kind = ctype.kind
    if kind not in _KIND_SEEDS:
        raise DestinationError(f"{ctype} values have no {ALGORITHM} encoding")
    seed = _seed(ctype)
    n = len(array)
    if kind in ("string", "binary"):
        if pa.types.is_null(array.type):
            array = array.cast(pa.string())
        if array.null_count == n:
            return _NULL_HASH
        u = _text_hashes(array, scratch, seed, column)
    else:
        array = _fixed_width(array, ctype)
        if array.null_count == n:
            return _NULL_HASH
        hashes = _fixed_hashes(array, kind, seed, scratch)
        if not isinstance(hashes, np.ndarray):
            return hashes
        u = hashes
    if array.null_count:
        u[np.asarray(array.is_null().to_numpy(zero_copy_only=False), bool)] = _NULL_HASH
    return u


def _fixed_width(array: pa.Array, ctype: ColumnType) -> pa.Array:
    """``array`` cast to the Arrow type whose values are the canonical values' words."""
    kind, given = ctype.kind, array.type
    if kind == "decimal":
        return array.cast(pa.decimal128(ctype.precision or 38, ctype.scale or 0))
    if kind == "float":
        return array if given == pa.float64() else array.cast(pa.float64())
    if kind == "integer":
        return array if given == pa.int64() else array.cast(pa.int64())
    if kind == "boolean":
        return array.cast(pa.bool_()).cast(pa.int8())
    # dates and timestamps are their integers: a view of the same buffers where the type is
    # the one wanted already (no kernel run: a small slice's hash is mostly such calls)
    if kind == "date":
        days = array if given == pa.date32() else array.cast(pa.date32())
        return days.view(pa.int32())
    tz = given.tz if pa.types.is_timestamp(given) else None
    wanted = pa.timestamp("us", tz=tz)  # microseconds since the epoch, UTC
    return (array if given == wanted else array.cast(wanted)).view(pa.int64())


def _fixed_hashes(array: pa.Array, kind: str, seed: int, scratch: _Scratch
                  ) -> np.ndarray | np.uint64:
    """The value hashes of a :func:`_fixed_width` array (NULL rows: not yet the constant), or
    the one hash of a column without NULLs holding one value in every row."""
    n = len(array)
    u, tmp = scratch.get("u", n), scratch.get("tmp", n)
    whole = not array.null_count
    if kind == "decimal":  # fmix(fmix(lo ^ seed) ^ hi)
        words = _int_words(array, np.uint64, 2)
        lo, hi = words[0::2], words[1::2]
        if whole and _repeated(lo, hi):
            return _U64(_fmix_int(_fmix_int(int(lo[0]) ^ seed) ^ int(hi[0])))
        _fmix(np.bitwise_xor(lo, _U64(seed), out=u), tmp)
        u ^= hi
    elif kind == "float":  # the bits, one NaN, no -0.0
        floats = _int_words(array, np.float64)
        with np.errstate(invalid="ignore"):  # a signalling NaN: replaced just below
            np.add(floats, 0.0, out=u.view(np.float64))  # + 0.0 turns -0.0 into 0.0
        np.putmask(u, np.isnan(floats, out=scratch.get("nan", n, np.bool_)),
                   _U64(_CANONICAL_NAN))
        u ^= _U64(seed)
    else:  # an integer: widened to 64 bits (sign-extended) and XORed with the seed in one pass
        values = _int_words(array, array.type.to_pandas_dtype())
        if whole and _repeated(values):
            return _U64(_fmix_int(int(values[0]) ^ seed))
        np.bitwise_xor(values, np.int64(seed - MODULUS if seed >> 63 else seed),
                       out=u.view(np.int64))
    return _fmix(u, tmp)


def _dictionary_hashes(array: pa.DictionaryArray, ctype: ColumnType, scratch: _Scratch
                       ) -> np.ndarray | np.uint64:
    """:func:`_column_hashes` of a dictionary array: the dictionary's values hashed once (a
    NULL among them gets the null constant), then gathered by index."""
    try:
        hashes = _value_hashes(array.dictionary, ctype)
    except pa.ArrowInvalid:  # a value no row refers to may fail its cast: the rows' values
        return _column_hashes(array.dictionary_decode(), ctype, scratch)
    n = len(array)
    if array.null_count == n:
        return _NULL_HASH
    indices = _int_words(array.indices.cast(pa.int64()), np.int64)  # under a NULL: masked
    u = np.take(hashes, indices, out=scratch.get("u", n), mode="clip")
    if array.null_count:
        u[np.asarray(array.is_null().to_numpy(zero_copy_only=False), bool)] = _NULL_HASH
    return u


def hash_arrays(arrays: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[ColumnType],
                scratch: _Scratch | None = None) -> tuple[int, int]:
    """(rows, sum of row hashes mod 2**64) of equally long arrays, one per fingerprint column
    in sorted-name order (``twice-fp-v3``); ``scratch``: work arrays kept between calls."""
    if not arrays:
        return 0, 0
    n = len(arrays[0])
    if n == 0:
        return 0, 0
    scratch = _Scratch() if scratch is None else scratch
    acc = scratch.get("acc", n)
    for i, (array, ctype) in enumerate(zip(arrays, types, strict=True)):
        u = _column_hashes(array, ctype, scratch, i)
        if i:
            acc ^= u
            acc *= _ROW_PRIME
        else:  # acc starts at 0: (0 ^ u) * prime
            np.multiply(u, _ROW_PRIME, out=acc)
    _fmix(acc, scratch.get("tmp", n))
    return n, int(np.add.reduce(acc, dtype=_U64))


def batches_sums(batches: Iterable[pa.RecordBatch | pa.Table],
                 columns: Sequence[tuple[str, ColumnType]]) -> tuple[int, int, int]:
    """``twice-fp-v3`` (count, high sum, low sum) over record batches (or tables) holding
    ``columns`` (sorted by name) in that order.

    Slices of at most ``_BATCH_ROWS`` rows are hashed one after another, in the same work
    arrays, so memory stays bounded whatever the partition's size. (Hashing slices, or only the
    text columns, on a second thread was measured: no gain on the 2-CPU machine the engines
    share, the engine's own threads already use it.)"""
    types = [t for _, t in columns]
    count = total = 0
    scratch = _Scratch()

    def slices() -> Iterator[list[Any]]:
        for batch in batches:
            for start in range(0, batch.num_rows, _BATCH_ROWS):
                part = batch.slice(start, _BATCH_ROWS)
                yield [part.column(i) for i in range(len(types))]

    for arrays in slices():
        n, s = hash_arrays(arrays, types, scratch)
        count, total = count + n, (total + s) % MODULUS
    return count, total >> LOW_BITS, total & LOW_MASK


def arrow_sums(table: pa.Table, columns: Sequence[tuple[str, ColumnType]]) -> tuple[int, int, int]:
    """(count, high sum, low sum) of the current algorithm (``twice-fp-v3``) over an Arrow
    table, vectorised; ``columns`` are (name, type) pairs of the table."""
    names = [name for name, _ in sorted(columns)]
    typed = sorted(columns)
    return batches_sums([table.select(names)], typed)


@dataclass(frozen=True)
class SliceFingerprint:
    """The fingerprint fields of a commit record (``CommitRecord.create``'s ``row_count``,
    ``checksum``, ``algorithm``, ``columns``): no checksum, algorithm ``none``, when a column
    type has no canonical value."""

    row_count: int
    checksum: str
    algorithm: str
    columns: tuple[str, ...]


def slice_fingerprint(
    parts: Iterable[pa.Table], schema: Schema,
    prepare: Callable[[pa.Table, tuple[str, ...]], pa.Table] | None = None,
) -> SliceFingerprint:
    """The fingerprint a slice will have once it holds the rows of ``parts`` (sums add up,
    so the rows kept and the rows written are summed apart): what the engines whose commit
    record is written before the rows are readable (Parquet, Delta, Iceberg) record.
    ``prepare(part, columns)`` readies a part for hashing (e.g. normalised types)."""
    try:
        columns: tuple[str, ...] | None = resolve_columns(schema)
    except DestinationError:
        columns = None
    count = high = low = 0
    for part in parts:
        if columns is None:
            count += part.num_rows
            continue
        table = part if prepare is None else prepare(part, columns)
        n, h, lo = arrow_sums(table, [(c, schema[c]) for c in columns])
        count, high, low = count + n, high + h, low + lo
    if columns is None:
        return SliceFingerprint(count, "", NO_FINGERPRINT, ())
    return SliceFingerprint(count, checksum_from_sums(high, low), ALGORITHM, columns)


def v3_batch_sums(types: Sequence[ColumnType], batches: Iterable[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """Spark ``mapInArrow`` body: one (n, high, low) row per batch of the fingerprint columns
    (sorted by name), ``twice-fp-v3``."""
    schema = pa.schema([("n", pa.int64()), ("high", pa.int64()), ("low", pa.int64())])
    scratch = _Scratch()
    for batch in batches:
        n, total = hash_arrays([batch.column(i) for i in range(batch.num_columns)], types,
                               scratch)
        yield pa.RecordBatch.from_pydict(
            {"n": [n], "high": [total >> LOW_BITS], "low": [total & LOW_MASK]}, schema=schema)
