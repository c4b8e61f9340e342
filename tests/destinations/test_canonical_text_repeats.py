"""Canonical text of a column whose values repeat (a partition column within its slice,
codes, amounts that recur) is made once per distinct value and gathered: the text must be the
one each value gets on its own, for every text-stored kind, with NULLs among the repeats, and a
SQLite slice written that way must read back as written."""

from __future__ import annotations

import sqlite3
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twice.destinations import columns, open_destination
from twice.destinations.columns import DICTIONARY_MIN, canonical_text, schema_of

KINDS = {
    "date": (pa.date32(), st.dates(date(1, 1, 1), date(9999, 12, 31))),
    "timestamp": (pa.timestamp("us"), st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31))),
    "timestamptz": (pa.timestamp("us", tz="UTC"),
                    st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 30),
                                 timezones=st.just(UTC))),
    "decimal": (pa.decimal128(12, 2), st.decimals(-10**9, 10**9, places=2)),
    "decimal_fine": (pa.decimal128(20, 8), st.decimals(-10**9, 10**9, places=8)),
    "binary": (pa.binary(), st.binary(max_size=20)),
    "float": (pa.float64(), st.floats(allow_nan=False, width=64)),
    "integer": (pa.int64(), st.integers(-2**63, 2**63 - 1)),
    "boolean": (pa.bool_(), st.booleans()),
}


def one_by_one(array: pa.Array, kind_type: pa.DataType) -> list[str | None]:
    """Each value's text on its own (a slice too small for the dictionary path)."""
    ctype = schema_of(pa.table({"c": array}))["c"]
    texts: list[str | None] = []
    for value in array.to_pylist():
        single = pa.array([value], kind_type)
        texts.extend(canonical_text(single, ctype).to_pylist())
    return texts


def repeats(kind: str, data: st.DataObject, seed: int
            ) -> tuple[pa.DataType, list[Any], np.ndarray]:
    """A few distinct values of ``kind`` (NULL may be one) and, for each of a slice's rows
    (enough for the dictionary path), which of them it holds."""
    kind_type, strategy = KINDS[kind]
    distinct = data.draw(st.lists(st.one_of(st.none(), strategy), min_size=1, max_size=5))
    rows = data.draw(st.integers(DICTIONARY_MIN, 2 * DICTIONARY_MIN))
    return kind_type, distinct, np.random.default_rng(seed).integers(0, len(distinct), rows)


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_repeated_values_get_their_own_text(kind: str, data: st.DataObject, seed: int) -> None:
    kind_type, distinct, picks = repeats(kind, data, seed)
    array = pa.array([distinct[i] for i in picks], kind_type)
    assert columns.mostly_repeated(array)
    ctype = schema_of(pa.table({"c": array}))["c"]
    expected_of = dict(zip(map(repr, distinct), one_by_one(pa.array(distinct, kind_type),
                                                            kind_type), strict=True))
    expected = [expected_of[repr(distinct[i])] for i in picks]
    assert canonical_text(array, ctype).to_pylist() == expected


def test_the_path_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeats go through the dictionary, distinct values do not; a chunked column is judged
    chunk by chunk."""
    encoded: list[int] = []
    real = columns.pc.dictionary_encode
    monkeypatch.setattr(columns.pc, "dictionary_encode",
                        lambda array: encoded.append(len(array)) or real(array))
    day = pa.array([date(2026, 11, 30)] * 5000, pa.date32())
    spread = pa.array([date(2000, 1, 1) + timedelta(days=i) for i in range(5000)], pa.date32())
    ctype = schema_of(pa.table({"c": day}))["c"]
    canonical_text(pa.chunked_array([spread, day]), ctype)
    assert encoded == [5000]  # the repeated chunk only


def test_a_replaced_sqlite_slice_reads_back_as_written(tmp_path: Path) -> None:
    """The partition column is one value within its slice: the dictionary path writes it."""
    day = date(2026, 11, 30)
    rows = 3 * DICTIONARY_MIN
    start = datetime(2026, 11, 30, tzinfo=UTC)
    table = pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "day": pa.array([day] * rows, pa.date32()),
        "amount": pa.array([Decimal(i % 7) / 4 for i in range(rows)], pa.decimal128(12, 2)),
        "booked_at": pa.array([start + timedelta(seconds=i % 3) for i in range(rows)],
                              pa.timestamp("us", tz="UTC")),
    })
    path = tmp_path / "w.db"
    with open_destination(f"sqlite://{path}?partition_column=day#positions") as dest:
        dest.replace_partition(table, day)
    with sqlite3.connect(path) as conn:
        stored = conn.execute(
            "SELECT id, day, amount, booked_at FROM positions ORDER BY id").fetchall()
    assert len(stored) == rows
    assert {row[1] for row in stored} == {"2026-11-30"}
    assert [row[2] for row in stored[:8]] == ["0.00", "0.25", "0.50", "0.75", "1.00", "1.25",
                                             "1.50", "0.00"]
    assert [row[3] for row in stored[:4]] == [
        "2026-11-30 00:00:00.000000Z", "2026-11-30 00:00:01.000000Z",
        "2026-11-30 00:00:02.000000Z", "2026-11-30 00:00:00.000000Z"]


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=5, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_python_values_of_repeats_are_arrows(kind: str, data: st.DataObject, seed: int) -> None:
    """What SQLite binds: each distinct value made once and shared, equal to to_pylist()."""
    kind_type, distinct, picks = repeats(kind, data, seed)
    array = pa.chunked_array([pa.array([distinct[i] for i in picks], kind_type),
                              pa.array(distinct, kind_type)])  # a short chunk: the plain path
    assert columns.python_values(array) == array.to_pylist()
