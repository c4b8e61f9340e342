"""The canonical float text: shortest round-trip, documented layout, specials normalised."""

from __future__ import annotations

import math

import pytest
from fp_reference import float_text
from fp_strategies import FLOATS, NAN_PAYLOADS
from hypothesis import given, settings

from twice.destinations.columns import float_text as twice_float_text


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0.0"), (-0.0, "0.0"), (3.0, "3.0"), (0.1, "0.1"), (-2.5, "-2.5"),
    (1e-4, "0.0001"), (1e-5, "1e-05"), (1e15, "1000000000000000.0"), (1e16, "1e+16"),
    (2e23, "2e+23"), (5e-324, "5e-324"), (1.5e300, "1.5e+300"),
    (2.2250738585072014e-308, "2.2250738585072014e-308"),
    (math.nan, "NaN"), (-math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"),
])
def test_documented_examples(value: float, text: str) -> None:
    assert twice_float_text(value) == float_text(value) == text
    for payload in NAN_PAYLOADS:
        assert twice_float_text(payload) == "NaN"


@settings(max_examples=2000, deadline=None)
@given(x=FLOATS)
def test_text_is_the_shortest_round_trip_and_matches_the_definition(x: float) -> None:
    text = twice_float_text(x)
    assert text == float_text(x)  # the independent oracle (no repr)
    if math.isfinite(x):
        assert float(text) == x  # round-trips exactly (-0.0 reads back as 0.0 == -0.0)
        digits = text.lstrip("-").split("e")[0].replace(".", "").strip("0")
        for shorter in range(1, len(digits)):  # no shorter text reads back to x
            assert float(f"{x:.{shorter - 1}e}") != x
