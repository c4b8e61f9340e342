"""twice-fp-v2 written from its documentation, without twice's code (the oracle of these tests).

The float text is derived from first principles: the exact binary value (``Decimal(x)``), the
shortest number of significant digits whose correctly rounded neighbours read back to ``x``
(nearest first), laid out as ``twice.destinations.columns`` documents. It does not call
``repr``, so it also checks that the documented definition is what twice computes.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Any

import pyarrow as pa


def shortest_digits(x: float) -> tuple[str, int]:
    """(digits without trailing zeros, decimal exponent of the first digit) of |x| > 0: the
    fewest significant digits that read back to ``x``; nearest to the exact value first,
    an even last digit on a tie."""
    exact = abs(Decimal(x))
    for precision in range(1, 18):
        with localcontext() as ctx:
            ctx.prec = precision
            ctx.rounding = ROUND_FLOOR
            low = +exact
            ctx.rounding = ROUND_CEILING
            high = +exact
        candidates = [c for c in {low, high} if float(c) == abs(x)]
        if candidates:
            with localcontext() as ctx:
                ctx.prec = 1000
                best = min(candidates,
                           key=lambda c: (abs(c - exact), c.as_tuple().digits[-1] % 2))
            _, digits, exponent = best.normalize().as_tuple()
            text = "".join(map(str, digits))
            return text, exponent + len(text) - 1
    raise AssertionError(f"no round-trip text for {x!r}")


def float_text(x: float) -> str:
    """The documented canonical text of a float64."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0.0"
    digits, exponent = shortest_digits(x)
    sign = "-" if x < 0 else ""
    if -4 <= exponent < 16:
        if exponent >= 0:
            whole = digits[: exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1:] or "0"
        else:
            whole, fraction = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{fraction}"
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def as_float32(x: float) -> float:
    """The float64 value of ``x`` stored as a float32 (what a float32 column holds)."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def value_text(value: Any, arrow_type: pa.DataType) -> str:
    if value is None:
        return "N"
    if pa.types.is_floating(arrow_type):
        return "V" + float_text(float(value))
    if isinstance(value, bool):
        return "V" + ("true" if value else "false")
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return "V" + value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") + "Z"
        return "V" + value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return "V" + value.isoformat()
    if isinstance(value, Decimal):
        return "V" + format(value, "f")
    if isinstance(value, bytes):
        return "V" + value.hex()
    return "V" + str(value)


def reference(rows: Sequence[Mapping[str, Any]], schema: pa.Schema,
              columns: Sequence[str] | None = None) -> tuple[int, str]:
    """(row count, checksum) of ``rows`` over ``columns`` (default: every column)."""
    names = sorted(columns or schema.names)
    total = 0
    for row in rows:
        line = "\x1f".join(value_text(row[c], schema.field(c).type) for c in names)
        total += int(hashlib.md5(line.encode("utf-8")).hexdigest()[:15], 16)
    return len(rows), format(total % 2**64, "016x")


# --------------------------------------------------------------------------- twice-fp-v3

_M64 = (1 << 64) - 1
_V3_SEEDS = {"integer": 1, "boolean": 2, "string": 3, "binary": 4, "date": 5, "timestamp": 6,
             "timestamptz": 7, "decimal": 8, "float": 9}


def fmix64(x: int) -> int:
    """MurmurHash3's 64-bit finaliser."""
    x &= _M64
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _M64
    return x ^ (x >> 33)


def _kind(arrow_type: pa.DataType) -> tuple[str, int]:
    if pa.types.is_floating(arrow_type):
        return "float", 0
    if pa.types.is_boolean(arrow_type):
        return "boolean", 0
    if pa.types.is_integer(arrow_type):
        return "integer", 0
    if pa.types.is_timestamp(arrow_type):
        return ("timestamptz" if arrow_type.tz else "timestamp"), 0
    if pa.types.is_date(arrow_type):
        return "date", 0
    if pa.types.is_decimal(arrow_type):
        return "decimal", arrow_type.scale
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return "binary", 0
    return "string", 0


def value_hash_v3(value: Any, arrow_type: pa.DataType) -> int:
    """``u`` of one value, as the module docstring of twice.destinations.fingerprint defines."""
    kind, scale = _kind(arrow_type)
    seed = fmix64((_V3_SEEDS[kind] << 8) + scale)
    if value is None:
        return fmix64(0x6E756C6C)
    if kind in ("string", "binary"):
        data = value.encode("utf-8") if kind == "string" else bytes(value)
        total = 0
        for k in range(0, len(data), 8):
            word = int.from_bytes(data[k:k + 8].ljust(8, b"\0"), "little")
            total = (total + fmix64(word + (k // 8 + 1) * 0x9E3779B97F4A7C15)) & _M64
        return fmix64(fmix64(total ^ fmix64(len(data))) ^ seed)
    if kind == "decimal":
        with localcontext() as ctx:
            ctx.prec = 80  # 38 digits exactly, not the default 28
            unscaled = int(value.scaleb(scale)) & ((1 << 128) - 1)
        return fmix64(fmix64((unscaled & _M64) ^ seed) ^ (unscaled >> 64))
    if kind == "float":
        x = float(value)
        bits = 0x7FF8000000000000 if math.isnan(x) else struct.unpack("<Q", struct.pack(
            "<d", 0.0 if x == 0 else x))[0]
        return fmix64(bits ^ seed)
    if kind == "boolean":
        word = int(bool(value))
    elif kind == "integer":
        word = int(value)
    elif kind == "date":
        word = (value - date(1970, 1, 1)).days
    else:
        epoch = datetime(1970, 1, 1, tzinfo=UTC if kind == "timestamptz" else None)
        delta = (value.astimezone(UTC) if kind == "timestamptz" else value) - epoch
        word = (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds
    return fmix64((word & _M64) ^ seed)


def reference_v3(rows: Sequence[Mapping[str, Any]], schema: pa.Schema,
                 columns: Sequence[str] | None = None) -> tuple[int, str]:
    """(row count, checksum) of ``twice-fp-v3`` over ``columns`` (default: every column)."""
    names = sorted(columns or schema.names)
    total = 0
    for row in rows:
        acc = 0
        for name in names:
            acc = ((acc ^ value_hash_v3(row[name], schema.field(name).type))
                   * 0x100000001B3) & _M64
        total = (total + fmix64(acc)) & _M64
    return len(rows), format(total, "016x")
