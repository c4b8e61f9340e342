"""Logical column types shared by every engine, and the canonical text of a value.

Each engine stores a column in its own way (SQLite has no DATE, Parquet keeps the partition
column in directory names), but twice reasons about one small set of *kinds*. Two things hang
off them: schema checks (an incoming batch must match the table kind for kind) and the
canonical text that fingerprints hash, so that equal values give equal fingerprints whatever
engine holds them.

Canonical text per kind (the fingerprint definition in :mod:`twice.fingerprint` relies on it):

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
float          float16/32/64                                  none: not fingerprintable
=============  =============================================  ============================

Floats have no canonical text that all engines render alike (shortest round-trip printing
differs in exponent thresholds and special values), so they can be stored but not used as
fingerprint columns; cast them to a decimal. Years outside 1000-9999 are not supported.
SQLite stores date, timestamp, timestamptz and decimal values *as* their canonical text (with
declared types of TEXT affinity), which keeps them exact, sortable and directly hashable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from twice.destinations.errors import DestinationError

KINDS = (
    "integer", "boolean", "string", "binary", "date", "timestamp", "timestamptz", "decimal",
    "float", "unsupported",
)
FINGERPRINT_KINDS = frozenset(KINDS) - {"float", "unsupported"}
MAX_DECIMAL_PRECISION = 38


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


def canonical_text(array: pa.Array | pa.ChunkedArray, ctype: ColumnType) -> pa.ChunkedArray:
    """Canonical text of every value (nulls stay null); ``array`` is already normalised.

    Vectorised with Arrow compute except decimals with scale > 6 (Arrow would print
    ``1E-7``) and binary (no hex kernel), which go through Python.
    """
    arr = array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])
    kind = ctype.kind
    if kind in ("integer", "boolean", "date", "string"):
        return pc.cast(arr, pa.string())
    if kind == "timestamp":
        return pc.strftime(pc.cast(arr, pa.timestamp("us")), format="%Y-%m-%d %H:%M:%S")
    if kind == "timestamptz":
        text = pc.strftime(pc.cast(arr, pa.timestamp("us", tz="UTC")), format="%Y-%m-%d %H:%M:%S")
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
    raise SchemaError(f"{ctype} values have no canonical text (floats cannot be fingerprinted)")


def from_canonical_text(values: list[object], ctype: ColumnType) -> pa.Array:
    """Inverse of :func:`canonical_text` for values read back from text storage (SQLite)."""
    kind = ctype.kind
    if kind in ("date", "timestamp", "timestamptz", "decimal"):
        return pc.cast(pa.array(values, pa.string()), ctype.arrow())
    if kind == "boolean":
        return pa.array([None if v is None else bool(v) for v in values], pa.bool_())
    return pa.array(values, ctype.arrow())
