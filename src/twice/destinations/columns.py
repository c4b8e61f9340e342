"""Logical column types shared by every engine, and the canonical text of a value.

Each engine stores a column in its own way (SQLite has no DATE, Parquet keeps the partition
column in directory names), but twice reasons about one small set of *kinds*. Two things hang
off them: schema checks (an incoming batch must match the table kind for kind) and the
canonical text that fingerprints hash, so that equal values give equal fingerprints whatever
engine holds them.

Canonical text per kind (the fingerprint definition in :mod:`twice.destinations.fingerprint` relies
on it):

=============  =============================================  ============================
kind           Arrow types accepted                           canonical text
=============  =============================================  ============================
integer        int8..int64, uint8..uint64 (fits in int64)     ``-123`` (decimal digits)
boolean        bool                                           ``true`` / ``false``
string         string, large_string, string_view, dictionary  the value itself (UTF-8)
binary         binary, large_binary, fixed_size_binary        lowercase hex, ``01ab``
date           date32, date64                                 ``YYYY-MM-DD``
timestamp      timestamp without time zone (stored as us)     ``YYYY-MM-DD HH:MM:SS.ffffff``
timestamptz    timestamp with a time zone (stored as UTC us)  ``YYYY-MM-DD HH:MM:SS.ffffffZ``
decimal(p,s)   decimal128/256 with p <= 38                    fixed point, exactly s digits
float          float16/32/64 (stored as float64)              :func:`float_text`
=============  =============================================  ============================

Floats (``twice-fp-v2``; ``twice-fp-v1`` could not fingerprint them): the value as a float64
(a float32 column is widened exactly first), written as Python's ``repr`` writes it, i.e. the
*shortest* string of decimal digits that reads back to the very same float64 (David Gay's
algorithm; among equally short strings the one nearest the exact value; a string exactly halfway
between two floats counts when round-half-even reading gives this float, e.g. ``2e+23``), laid out
as follows. With ``d1 d2 .. dn`` those digits and ``E`` the decimal exponent of ``d1``
(value = d1.d2..dn x 10**E):

* ``-4 <= E < 16``: positional notation with at least one digit after the point:
  ``3.0``, ``0.1``, ``-2.5``, ``0.0001``, ``123456789012345.0``, ``1234567890123456.0``;
* otherwise: ``d1`` then ``.d2..dn`` if n > 1, then ``e``, the exponent's sign and at least two
  exponent digits: ``1e+16``, ``1e-05``, ``-1.5e+300``, ``5e-324``,
  ``2.2250738585072014e-308``;
* special values are normalised: every NaN (any sign or payload) is ``NaN``, the infinities are
  ``Infinity`` and ``-Infinity``, and ``-0.0`` is ``0.0`` (it compares equal to ``0.0`` in every
  engine, and SQLite cannot keep the sign).

No engine's own float-to-text conversion gives this on every value (for ``2e+23`` PostgreSQL
prints ``1.9999999999999998e+23`` and Spark ``1.9999999999999998E23``; Spark prints ``5e-324`` as
``4.9E-324``; SQLite keeps 15 digits; DuckDB agrees today but it is not a contract), so every
engine computes the float part with this module's Python function: SQLite and
DuckDB call it as a registered function inside the query, PostgreSQL streams the float values
(binary, exact) next to the SQL-computed text of the other columns, Spark runs it in its Python
workers (``mapInArrow``), Parquet in the Arrow path. SQLite cannot store NaN (it becomes NULL), so
a NaN bound for SQLite is refused at write time.

``unsupported`` (an engine type twice does not know, e.g. PostgreSQL ``jsonb``) has no canonical
text: such a table is not written by twice, and fingerprinting it is refused, naming the column,
never done by silently leaving the column out. Years outside 1000-9999 are not supported.
SQLite stores date, timestamp, timestamptz and decimal values *as* their canonical text (with
declared types of TEXT affinity), which keeps them exact, sortable and directly hashable.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from twice.core.identifiers import validate_identifier
from twice.destinations.errors import DestinationError

KINDS = (
    "integer", "boolean", "string", "binary", "date", "timestamp", "timestamptz", "decimal",
    "float", "unsupported",
)
FINGERPRINT_KINDS = frozenset(KINDS) - {"unsupported"}
MAX_DECIMAL_PRECISION = 38

if sys.float_repr_style != "short":  # pragma: no cover - every supported CPython is "short"
    raise ImportError("twice needs a Python whose repr(float) is the shortest round-trip text")


class SchemaError(DestinationError):
    """Incoming rows and a table disagree on columns or types, or a type is unsupported."""


@dataclass(frozen=True)
class ColumnType:
    """One logical column type; ``precision``/``scale`` only for decimals.

    ``unsupported`` stands for an engine type twice cannot write or hash (e.g. ``jsonb``);
    ``engine_type`` names it so errors can say which, and other columns stay usable.
    """

    kind: str
    precision: int | None = None
    scale: int | None = None
    engine_type: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS and self.kind != "null":
            raise SchemaError(f"unknown column kind {self.kind!r}")
        if self.kind == "decimal":
            if self.precision is None or self.scale is None:
                raise SchemaError("a decimal column needs a precision and a scale")
            if not 0 < self.precision <= MAX_DECIMAL_PRECISION or not 0 <= self.scale <= (
                self.precision
            ):
                raise SchemaError(
                    f"decimal({self.precision},{self.scale}) is outside the supported range "
                    f"(precision 1..{MAX_DECIMAL_PRECISION}, 0 <= scale <= precision)"
                )

    def __str__(self) -> str:
        if self.kind == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.kind == "unsupported":
            return f"unsupported type {self.engine_type}"
        return self.kind

    def compatible(self, other: ColumnType) -> bool:
        """Same kind (and same scale for decimals): the only safe implicit conversions."""
        if self.kind != other.kind:
            return False
        return self.kind != "decimal" or self.scale == other.scale

    def arrow(self) -> pa.DataType:
        """The normalised Arrow type twice uses for this kind."""
        if self.kind == "unsupported":
            raise SchemaError(f"twice cannot read or write columns of {self.engine_type}")
        return _ARROW_TYPES[self.kind] if self.kind != "decimal" else pa.decimal128(
            self.precision, self.scale
        )

    @classmethod
    def from_arrow(cls, arrow_type: pa.DataType, column: str = "?") -> ColumnType:
        t = arrow_type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if pa.types.is_integer(t):
            return cls("integer")
        if pa.types.is_floating(t):
            return cls("float")
        if pa.types.is_boolean(t):
            return cls("boolean")
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return cls("string")
        if (
            pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t)
        ):
            return cls("binary")
        if pa.types.is_date(t):
            return cls("date")
        if pa.types.is_timestamp(t):
            return cls("timestamptz" if t.tz else "timestamp")
        if pa.types.is_decimal(t):
            if t.precision > MAX_DECIMAL_PRECISION:
                raise SchemaError(
                    f"column {column!r}: {t} exceeds precision {MAX_DECIMAL_PRECISION}"
                )
            return cls("decimal", t.precision, t.scale)
        if pa.types.is_null(t):
            return cls("null")
        raise SchemaError(
            f"column {column!r} has unsupported type {arrow_type}; supported kinds: "
            + ", ".join(KINDS)
        )


_ARROW_TYPES: dict[str, pa.DataType] = {
    "integer": pa.int64(),
    "float": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "null": pa.null(),
}

Schema = dict[str, ColumnType]


def schema_of(table: pa.Table) -> Schema:
    return {f.name: ColumnType.from_arrow(f.type, f.name) for f in table.schema}


def stored_schema(schema: pa.Schema) -> Schema:
    """A stored table's columns as twice's kinds; a type twice has no kind for (an Iceberg
    ``time`` or ``uuid``, say) is ``unsupported``: never written, never left out of a
    fingerprint. (Incoming rows go through :func:`schema_of`, which refuses such types.)"""
    out: Schema = {}
    for f in schema:
        try:
            out[f.name] = ColumnType.from_arrow(f.type, f.name)
        except SchemaError:
            out[f.name] = ColumnType("unsupported", engine_type=str(f.type))
    return out


def require_columns(schema: Schema, columns: Sequence[str]) -> None:
    """Refuse column names that are not safe identifiers, then any not in ``schema``."""
    for name in columns:
        validate_identifier(name, "column name")
    missing = [c for c in columns if c not in schema]
    if missing:
        raise SchemaError(f"columns {missing} are not in the table (has {list(schema)})")


#: A slice of at least this many values whose first ``DICTIONARY_SAMPLE`` values hold at most
#: a quarter distinct ones is converted (or hashed) once per distinct value, through Arrow's
#: dictionary encoding (see ``mostly_repeated``).
DICTIONARY_MIN = 1024
DICTIONARY_SAMPLE = 4096


def mostly_repeated(array: pa.Array) -> bool:
    """Whether ``array``'s values repeat enough that working on each distinct value once and
    gathering (``pc.dictionary_encode``, then ``take``) is cheaper than working on every value:
    a partition column within its slice, codes, names, statuses. A column of mostly distinct
    values, where the encoding would cost more than it saves, is not."""
    if len(array) < DICTIONARY_MIN:
        return False
    sample = array.slice(0, DICTIONARY_SAMPLE)
    return bool(pc.count_distinct(sample, mode="all").as_py() <= len(sample) // 4)


def python_values(array: pa.ChunkedArray) -> list[object]:
    """``array.to_pylist()``; a chunk whose values repeat (``mostly_repeated``) makes one
    Python object per distinct value, shared by its repeats (the values are immutable)."""
    values: list[object] = []
    for chunk in array.chunks:
        if not mostly_repeated(chunk):
            values.extend(chunk.to_pylist())
            continue
        encoded = pc.dictionary_encode(chunk)
        distinct = encoded.dictionary.to_pylist()
        objects = np.empty(len(distinct) + 1, dtype=object)  # the last one stands for null
        for index, value in enumerate(distinct):
            objects[index] = value
        indices = pc.fill_null(encoded.indices, len(distinct))
        values.extend(objects[indices.to_numpy(zero_copy_only=False)].tolist())
    return values


def canonical_text(array: pa.Array | pa.ChunkedArray, ctype: ColumnType) -> pa.ChunkedArray:
    """Canonical text of every value (nulls stay null); ``array`` is already normalised.

    Vectorised with Arrow compute except decimals with scale > 6 (Arrow would print
    ``1E-7``) and binary (no hex kernel), which go through Python. A chunk whose values
    repeat is converted once per distinct value (``mostly_repeated``): the same text.
    """
    arr = array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])
    if ctype.kind == "string":
        return _canonical_texts(arr, ctype)
    chunks = []
    for chunk in arr.chunks:
        if not mostly_repeated(chunk):
            chunks.extend(_canonical_texts(pa.chunked_array([chunk]), ctype).chunks)
            continue
        encoded = pc.dictionary_encode(chunk)
        texts = _canonical_texts(pa.chunked_array([encoded.dictionary]), ctype)
        chunks.append(pc.take(texts.combine_chunks(), encoded.indices))
    return pa.chunked_array(chunks, pa.string())


def _canonical_texts(arr: pa.ChunkedArray, ctype: ColumnType) -> pa.ChunkedArray:
    """``canonical_text`` of every value, one by one."""
    kind = ctype.kind
    if kind in ("integer", "boolean", "date", "string"):
        return pc.cast(arr, pa.string())
    if kind == "timestamp":
        return _timestamp_text(pc.cast(arr, pa.timestamp("us")))
    if kind == "timestamptz":
        text = _timestamp_text(pc.cast(arr, pa.timestamp("us", tz="UTC")))
        return pc.binary_join_element_wise(text, pa.scalar("Z"), "")
    if kind == "decimal":
        if (ctype.scale or 0) <= 6:
            return pc.cast(arr, pa.string())
        return pa.chunked_array(
            [pa.array([None if v is None else format(v, "f") for v in arr.to_pylist()],
                      pa.string())]
        )
    if kind == "binary":
        return pa.chunked_array(
            [pa.array([None if v is None else v.hex() for v in arr.to_pylist()], pa.string())]
        )
    if kind == "float":
        return pa.chunked_array([float_texts(chunk) for chunk in arr.chunks], pa.string())
    raise SchemaError(f"{ctype} values have no canonical text and cannot be fingerprinted")


# Years 1-9999 in microseconds since the epoch: Arrow's cast to string prints them exactly as
# strftime("%Y-%m-%d %H:%M:%S") does (checked value by value); outside it they may differ.
_CAST_TEXT_RANGE = (-62135596800_000000, 253402300799_999999)


def _timestamp_text(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    """``YYYY-MM-DD HH:MM:SS.ffffff`` of microsecond timestamps (UTC wall clock if zoned).

    Arrow's cast of a naive timestamp to string is ~30x faster than ``strftime`` (which
    resolves the zone value by value); it is used when every value lies in years 1-9999.
    """
    naive = pc.cast(arr, pa.timestamp("us")) if arr.type.tz is not None else arr
    bounds = pc.min_max(pc.cast(naive, pa.int64())).as_py()
    low, high = _CAST_TEXT_RANGE
    if bounds["min"] is None or (low <= bounds["min"] and bounds["max"] <= high):
        return pc.cast(naive, pa.string())
    return pc.strftime(arr, format="%Y-%m-%d %H:%M:%S")


def float_text(value: float) -> str:
    """The canonical text of one float (see the module docstring): ``repr`` of the float64,
    with NaN, the infinities and -0.0 normalised."""
    value = float(value)  # SQLite hands over integer-valued REALs as they were stored
    if value != value:
        return "NaN"
    if value == 0.0:
        return "0.0"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def float_texts(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """:func:`float_text` of every value of a float array (nulls stay null)."""
    values = array.cast(pa.float64()) if array.type != pa.float64() else array
    return pa.array(
        [None if v is None else float_text(v) for v in values.to_pylist()], pa.string()
    )


#: The Python types SQLite may give back for a value of each kind that twice wrote (a float
#: column may hold an integral value as an integer); anything else was written by hand.
_STORED_AS: dict[str, frozenset[type]] = {
    "integer": frozenset({int}), "boolean": frozenset({int}), "float": frozenset({float, int}),
    "string": frozenset({str}), "binary": frozenset({bytes}),
    "date": frozenset({str}), "timestamp": frozenset({str}), "timestamptz": frozenset({str}),
    "decimal": frozenset({str}),
}


def from_canonical_text(values: list[object], ctype: ColumnType) -> pa.Array:
    """Inverse of :func:`canonical_text` for values read back from text storage (SQLite).

    SQLite keeps any value in any column: one of another storage class (``0.9`` in an
    integer column, the text ``'false'`` or ``2`` in a boolean one, a blob in a text column)
    is refused with ``TypeError``, never converted into a value it is not (``0``, ``True``),
    which would hide the change from a fingerprint."""
    kind = ctype.kind
    allowed = _STORED_AS.get(kind)
    if allowed is not None:
        found = set(map(type, values)) - {type(None)}
        if not found <= allowed:
            odd = next(v for v in values if v is not None and type(v) not in allowed)
            raise TypeError(f"{odd!r} ({type(odd).__name__}) is not a stored {kind} value")
    if kind in ("date", "timestamp", "timestamptz", "decimal"):
        return pc.cast(pa.array(values, pa.string()), ctype.arrow())
    if kind == "boolean":
        if not set(values) <= {None, 0, 1}:
            odd = next(v for v in values if v not in (None, 0, 1))
            raise TypeError(f"{odd!r} is not a stored boolean (0 or 1)")
        return pa.array([None if v is None else bool(v) for v in values], pa.bool_())
    return pa.array(values, ctype.arrow())
