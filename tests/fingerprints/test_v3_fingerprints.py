"""``twice-fp-v3``, the current fingerprint: equal on SQLite, DuckDB, PostgreSQL and Parquet for
the same rows (floats, NULLs, unicode, decimals, dates, timestamps, binary) and equal to the
definition written independently (``fp_reference.reference_v3``); a ``twice-fp-v2`` fingerprint
recorded before still verifies, by v2. Spark: tests/on_spark."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from fp_reference import reference, reference_v3
from fp_strategies import EDGES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twice.destinations import open_destination
from twice.destinations.fingerprint import (
    ALGORITHM,
    ALGORITHM_V2,
    Fingerprint,
    comparable_algorithms,
    fingerprint,
    recompute,
    verify,
)

DAY = date(2026, 11, 30)
ENGINES = ("sqlite", "duckdb", "postgresql", "parquet")
SCHEMA = pa.schema([
    ("day", pa.date32()), ("id", pa.int64()), ("name", pa.string()), ("flag", pa.bool_()),
    ("amount", pa.decimal128(12, 2)), ("rate", pa.decimal128(38, 8)), ("x", pa.float64()),
    ("g", pa.float32()), ("at", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")),
    ("blob", pa.binary()), ("born", pa.date32()),
])
LONG = "long text, past four words: " + "ü✓😀" * 40
ROWS = [
    {"day": DAY, "id": 1, "name": "Ünïcødé ✓ 😀", "flag": True, "amount": Decimal("-0.05"),
     "rate": Decimal("123456789012345678901234567890.12345678"), "x": 0.1, "g": 1.5,
     "at": datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC),
     "local": datetime(2026, 11, 30, 0, 0), "blob": b"\x00\xab", "born": date(1000, 1, 1)},
    {"day": DAY, "id": -(2**63), "name": "", "flag": False, "amount": Decimal("1234567890.00"),
     "rate": Decimal("-99999999999.99999999"), "x": -0.0, "g": -2.0,
     "at": datetime(2026, 11, 30, 3, tzinfo=timezone(timedelta(hours=-3))),
     "local": datetime(1969, 12, 31, 23, 59, 59, 1), "blob": b"", "born": date(9999, 12, 31)},
    {"day": DAY, "id": 0, "name": None, "flag": None, "amount": None, "rate": None, "x": None,
     "g": None, "at": None, "local": None, "blob": None, "born": None},
    {"day": DAY, "id": 2**63 - 1, "name": "N", "flag": None, "amount": Decimal("0.00"),
     "rate": Decimal("0E-8"), "x": 2e23, "g": None, "at": None, "local": None,
     "blob": bytes(range(256)), "born": date(1969, 12, 31)},
    {"day": DAY, "id": 3, "name": LONG, "flag": True, "amount": Decimal("9999999999.99"),
     "rate": Decimal("1E-8"), "x": math.inf, "g": 5e-45, "at": None, "local": None,
     "blob": b"12345678", "born": None},
    {"day": DAY, "id": 4, "name": "line\nbreak, \"quoted\"", "flag": False,
     "amount": Decimal("-1.00"), "rate": None, "x": 5e-324, "g": None, "at": None,
     "local": datetime(2026, 1, 2, 3, 4, 5, 600000), "blob": None, "born": None},
]


def _as_stored(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """float32 values widened exactly, as every engine stores them."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return [dict(r, g=None if r["g"] is None else float(pa.scalar(r["g"], pa.float32()).as_py()))
            for r in table.to_pylist()]


def _write_everywhere(engines, rows: list[dict[str, object]]) -> dict[str, object]:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    written = {}
    for engine in ENGINES:
        dest = open_destination(engines.target(engine).spec)
        dest.replace_partition(table, DAY)
        written[engine] = dest
    return written


def test_v3_is_equal_on_every_engine_and_to_the_definition(engines) -> None:
    dests = _write_everywhere(engines, ROWS)
    expected = reference_v3(_as_stored(ROWS), SCHEMA)
    prints = {name: fingerprint(dest, DAY) for name, dest in dests.items()}
    for name, fp in prints.items():
        assert fp.algorithm == ALGORITHM == "twice-fp-v3", name
        assert fp.columns == tuple(sorted(SCHEMA.names)), name
        assert (fp.row_count, fp.checksum) == expected, name
    assert len(set(prints.values())) == 1
    for name, dest in dests.items():  # named columns, in any order
        some = fingerprint(dest, DAY, ["x", "name", "blob"])
        assert (some.row_count, some.checksum) == reference_v3(
            _as_stored(ROWS), SCHEMA, ["x", "name", "blob"]), name
        # the commit record of the write holds the same v3 fingerprint
        (record,) = [r for r in dest.commit_records()] or [None]
        if record is not None:
            assert (record.algorithm, record.checksum) == (ALGORITHM, prints[name].checksum)
        dest.close()


def test_v3_sees_what_v2_sees(engines) -> None:
    """A changed value, a NULL for an empty string, a duplicated row, a swapped pair of values
    across columns: each changes the v3 checksum."""
    base = reference_v3(_as_stored(ROWS), SCHEMA)[1]
    changed = [dict(r) for r in ROWS]
    changed[0]["x"] = math.nextafter(0.1, 1.0)
    empty_to_null = [dict(r) for r in ROWS]
    empty_to_null[1]["name"] = None
    swapped = [dict(r) for r in ROWS]
    swapped[0]["day"], swapped[0]["born"] = swapped[0]["born"], swapped[0]["day"]
    variants = [changed, empty_to_null, [*ROWS, ROWS[0]], swapped]
    assert len({base, *(reference_v3(_as_stored(v), SCHEMA)[1] for v in variants)}) == 5
    dest = open_destination(engines.target("duckdb").spec)
    dest.replace_partition(pa.Table.from_pylist(changed, schema=SCHEMA), DAY)
    assert fingerprint(dest, DAY).checksum == reference_v3(_as_stored(changed), SCHEMA)[1]
    dest.close()


FLOAT_OR_NONE = st.none() | st.sampled_from([v for v in EDGES if not math.isnan(v)]) | st.floats(
    allow_nan=False)
ROW = st.fixed_dictionaries({
    "name": st.none() | st.text(max_size=40), "x": FLOAT_OR_NONE,
    "amount": st.none() | st.decimals(min_value=-10**9, max_value=10**9, places=2,
                                      allow_nan=False, allow_infinity=False),
    "local": st.none() | st.datetimes(min_value=datetime(1000, 1, 1),
                                      max_value=datetime(9999, 12, 31)),
})


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=6))
def test_property_v3_equal_across_engines(engines, rows: list[dict[str, object]]) -> None:
    full = [{**{n: None for n in SCHEMA.names}, **r, "day": DAY, "id": i}
            for i, r in enumerate(rows)]
    full = [r for r in full if "\x00" not in (r["name"] or "")]  # PostgreSQL text has no NUL
    expected = reference_v3(_as_stored(full), SCHEMA)
    for name, dest in _write_everywhere(engines, full).items():
        fp = fingerprint(dest, DAY)
        assert (fp.row_count, fp.checksum) == expected, name
        dest.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_v2_fingerprint_recorded_earlier_still_verifies(engines, engine: str) -> None:
    rows = [r for r in ROWS if not (isinstance(r["x"], float) and math.isnan(r["x"]))]
    dest = open_destination(engines.target(engine).spec)
    dest.replace_partition(pa.Table.from_pylist(rows, schema=SCHEMA), DAY)
    columns = tuple(sorted(SCHEMA.names))
    recorded_v2 = Fingerprint(*reference(_as_stored(rows), SCHEMA), columns=columns,
                              algorithm=ALGORITHM_V2)  # as an earlier twice recorded it
    result = verify(dest, DAY, recorded_v2)
    assert result.matches, result.reasons
    assert result.current.algorithm == ALGORITHM_V2 and "twice-fp-v2" in result.note
    assert recompute(dest, DAY, recorded_v2) == recorded_v2
    # the same slice by v3 has another checksum: they are never compared with each other
    now = fingerprint(dest, DAY)
    assert now.checksum != recorded_v2.checksum
    assert not comparable_algorithms(ALGORITHM_V2, ALGORITHM)
    assert comparable_algorithms("twice-fp-v1", ALGORITHM_V2)
    changed = dict(rows[0], name="edited")
    dest.replace_partition(pa.Table.from_pylist([changed, *rows[1:]], schema=SCHEMA), DAY)
    assert not verify(dest, DAY, recorded_v2).matches
    dest.close()
