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
