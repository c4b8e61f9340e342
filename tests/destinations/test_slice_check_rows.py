"""``Slice.check_rows`` refuses a batch exactly when some row lies outside the slice: its quick
test on the column's least and greatest values (issue 38) agrees with the row-by-row mask,
whatever the column's type, its NULLs and its values around the bounds."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twice.core.interval import Interval
from twice.destinations.columns import ColumnType
from twice.destinations.slices import RowsOutsidePartitionError, Slice

START = datetime(2026, 3, 1, tzinfo=UTC)
INTERVAL = Interval(START, START + timedelta(days=1))

# (column type, slice column type, the value at an offset of n hours from the interval start)
KINDS: dict[str, tuple[pa.DataType, ColumnType, Any]] = {
    "date": (pa.date32(), ColumnType("date"), lambda n: (START + timedelta(days=n // 24)).date()),
    "timestamp us": (pa.timestamp("us"), ColumnType("timestamp"),
                     lambda n: (START + timedelta(hours=n)).replace(tzinfo=None)
                     - timedelta(microseconds=n % 2)),
    "timestamptz ms": (pa.timestamp("ms", tz="UTC"), ColumnType("timestamptz"),
                       lambda n: START + timedelta(hours=n) - timedelta(milliseconds=n % 2)),
    "timestamptz ns": (pa.timestamp("ns", tz="UTC"), ColumnType("timestamptz"),
                       lambda n: START + timedelta(hours=n)),
}


def _refused(slc: Slice, table: pa.Table) -> bool:
    try:
        slc.check_rows(table)
    except RowsOutsidePartitionError:
        return True
    return False


def _mask_refuses(slc: Slice, table: pa.Table) -> bool:
    inside = slc.mask(table).to_pylist()
    return not all(inside)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(KINDS)),
       offsets=st.lists(st.one_of(st.none(), st.integers(-30, 54)), min_size=1, max_size=12))
def test_check_rows_agrees_with_the_mask_on_intervals(kind: str, offsets: list[int | None]
                                                      ) -> None:
    arrow_type, ctype, value = KINDS[kind]
    table = pa.table({"p": pa.array([None if n is None else value(n) for n in offsets],
                                    arrow_type)})
    slc = Slice.of("p", ctype, INTERVAL)
    assert _refused(slc, table) == _mask_refuses(slc, table)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.integers(-3, 3)), min_size=1, max_size=8),
       chosen=st.integers(-3, 3))
def test_check_rows_agrees_with_the_mask_on_one_value(values: list[int | None], chosen: int
                                                      ) -> None:
    for arrow_type, ctype, form in ((pa.int64(), ColumnType("integer"), int),
                                    (pa.int16(), ColumnType("integer"), int),
                                    (pa.string(), ColumnType("string"), str)):
        table = pa.table({"p": pa.array([None if v is None else form(v) for v in values],
                                        arrow_type)})
        slc = Slice.of("p", ctype, form(chosen))
        assert _refused(slc, table) == _mask_refuses(slc, table)


def test_a_row_at_the_end_of_the_interval_is_refused_and_named() -> None:
    table = pa.table({"p": pa.array([date(2026, 3, 1), date(2026, 3, 2)], pa.date32())})
    with pytest.raises(RowsOutsidePartitionError, match=r"1 of 2 row\(s\).*p=2026-03-02"):
        Slice.of("p", ColumnType("date"), INTERVAL).check_rows(table)
