"""Hypothesis strategies for float64 values, edge cases first."""

from __future__ import annotations

import math
import struct

from hypothesis import strategies as st

EDGES = [
    0.0, -0.0, 1.0, -1.0, 3.0, 0.1, 0.3, 1 / 3, 1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5,
    0.0001234, 123456789012345.0, 1234567890123456.0, 123456789012345680.0, 2e23, 1e23,
    9007199254740993.0, 2.0**63, 5e-324, -5e-324, 2.2250738585072014e-308,
    2.2250738585072009e-308, 1.7976931348623157e308, -1.7976931348623157e308, 1.5e300,
    12345678.9, 1e22, math.inf, -math.inf, math.nan,
]
NAN_PAYLOADS = [struct.unpack("<d", struct.pack("<Q", bits))[0]
                for bits in (0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001)]


def bits_to_float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


FLOATS = st.one_of(
    st.floats(width=64, allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.integers(-(2**63), 2**63).map(float),  # integers as floats
    st.floats(min_value=-2.3e-308, max_value=2.3e-308),  # subnormals and the smallest normals
    st.floats(min_value=1e250, allow_infinity=False),  # huge exponents
    st.floats(min_value=1e-7, max_value=1e-3),  # around the positional/exponent switch
    st.floats(min_value=1e14, max_value=1e17),
    st.integers(0, 2**64 - 1).map(bits_to_float),  # any bit pattern (NaN payloads too)
    st.sampled_from(EDGES + NAN_PAYLOADS),
)
