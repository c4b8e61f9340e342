"""replace_partition on every engine: exact slice, idempotent reruns, refusals before delete."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pytest
from dest_helpers import day_interval, sorted_rows

from twice.core.interval import Interval
from twice.destinations import (
    DuplicateKeyError,
    PartitionError,
    RowsOutsidePartitionError,
    SchemaError,
    open_destination,
)

NOV30, DEC1 = date(2026, 11, 30), date(2026, 12, 1)


def rows_for(day: date, ids: range, amount: str = "1.25") -> list[dict[str, object]]:
    return [{"id": i, "day": day, "amount": Decimal(amount), "name": f"n{i}"} for i in ids]


def test_rerun_replaces_only_its_slice(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    dest.replace_partition(rows_for(NOV30, range(3)), day_interval(NOV30))
    dest.replace_partition(rows_for(DEC1, range(10, 12)), day_interval(DEC1))
    first = dest.replace_partition(rows_for(NOV30, range(3), "9.50"), day_interval(NOV30))
    again = dest.replace_partition(rows_for(NOV30, range(3), "9.50"), day_interval(NOV30))
    assert first.rows_deleted == 3 and again.rows_deleted == 3 and again.rows_written == 3
    assert sorted_rows(dest.read_partition(day_interval(NOV30))) == sorted_rows(
        pa.Table.from_pylist(rows_for(NOV30, range(3), "9.50"))
    )
    assert dest.row_count(DEC1) == 2  # the neighbouring slice is untouched
    assert dest.row_count() == 5
    dest.close()


def test_rows_outside_slice_are_refused_before_any_delete(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    dest.replace_partition(rows_for(NOV30, range(3)), day_interval(NOV30))
    stray = rows_for(NOV30, range(2)) + rows_for(DEC1, range(5, 6))
    with pytest.raises(RowsOutsidePartitionError, match=r"1 of 3 row\(s\).*day=2026-12-01"):
        dest.replace_partition(stray, day_interval(NOV30))
    with pytest.raises(RowsOutsidePartitionError):
        dest.replace_partition(stray, NOV30)  # explicit partition value, same rule
    assert dest.row_count(NOV30) == 3 and dest.row_count() == 3
    dest.close()


def test_null_partition_value_is_outside_every_slice(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    dest.replace_partition(rows_for(NOV30, range(2)), NOV30)
    bad = pa.table({"id": [7], "day": pa.array([None], pa.date32()),
                    "amount": pa.array([Decimal("1.00")], pa.decimal128(38, 2)), "name": ["x"]})
    with pytest.raises(RowsOutsidePartitionError):
        dest.replace_partition(bad, NOV30)
    assert dest.row_count() == 2


def test_zero_rows_empty_the_slice(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    dest.replace_partition(rows_for(NOV30, range(4)), day_interval(NOV30))
    schema = dest.read_partition(NOV30).schema
    result = dest.replace_partition(schema.empty_table(), day_interval(NOV30))
    assert result.rows_deleted == 4 and dest.row_count(NOV30) == 0


def test_schema_mismatch_is_refused_clearly(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    dest.replace_partition(rows_for(NOV30, range(2)), NOV30)
    # the SQL engines word it as a refused schema change (test_additive_schema.py)
    with pytest.raises(SchemaError,
                       match=r"missing columns \['name'\]|column 'name' is not in the output"):
        dest.replace_partition([{"id": 1, "day": NOV30, "amount": Decimal(1)}], NOV30)
    with pytest.raises(SchemaError, match=r"unknown columns|new column 'extra'"):
        dest.replace_partition([{**rows_for(NOV30, range(1))[0], "extra": 1}], NOV30)
    wrong = pa.table({"id": ["one"], "day": [NOV30], "amount": [Decimal("1.00")], "name": ["a"]})
    with pytest.raises(SchemaError, match=r"column 'id' is string (in the output )?but (the "
                                          r"table has )?integer"):
        dest.replace_partition(wrong, NOV30)
    assert dest.row_count() == 2


def test_accepts_arrow_pandas_polars_like_and_dicts(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    arrow = pa.Table.from_pylist(rows_for(NOV30, range(3)))
    dest.replace_partition(arrow, NOV30)
    frame = pd.DataFrame(rows_for(NOV30, range(3)))
    frame["day"] = pd.to_datetime(frame["day"]).dt.date
    dest.replace_partition(frame, NOV30)

    class PolarsLike:  # polars is not installed; twice only needs .to_arrow()
        def to_arrow(self) -> pa.Table:
            return arrow

    dest.replace_partition(PolarsLike(), NOV30)
    dest.replace_partition(iter(rows_for(NOV30, range(3))), NOV30)
    assert sorted_rows(dest.read_partition(NOV30)) == sorted_rows(arrow)


def test_batch_with_duplicate_keys_is_refused(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine, key_columns=("id",)))
    dest.replace_partition(rows_for(NOV30, range(2)), NOV30)
    with pytest.raises(DuplicateKeyError, match=r"appear more than once.*'id': 1"):
        dest.replace_partition(rows_for(NOV30, range(2)) + rows_for(NOV30, range(1, 2)), NOV30)
    assert dest.row_count() == 2


def test_timestamptz_partition_column_with_hourly_intervals(sql_engine: str, engines) -> None:
    # (Parquet partition columns are dates, integers or strings: they become directory names.)
    dest = open_destination(engines.spec(sql_engine, partition_column="at"))
    hour = datetime(2026, 11, 30, 5, tzinfo=UTC)
    first = Interval(hour, hour + timedelta(hours=1))
    rows = [{"id": i, "at": hour + timedelta(minutes=10 * i)} for i in range(6)]
    dest.replace_partition(rows, first)
    next_hour = [{"id": 9, "at": hour + timedelta(hours=1)}]  # end is exclusive
    with pytest.raises(RowsOutsidePartitionError):
        dest.replace_partition(next_hour, first)
    second = Interval(hour + timedelta(hours=1), hour + timedelta(hours=2))
    dest.replace_partition(next_hour, second)
    dest.replace_partition(rows[:2], first)
    assert dest.row_count(first) == 2 and dest.row_count() == 3


def test_date_column_needs_midnight_bounds(engines) -> None:
    dest = open_destination(engines.spec("sqlite"))
    dest.replace_partition(rows_for(NOV30, range(1)), NOV30)
    noon = datetime(2026, 11, 30, 12, tzinfo=UTC)
    with pytest.raises(PartitionError, match="must be a midnight"):
        dest.replace_partition(rows_for(NOV30, range(1)), Interval(noon, noon + timedelta(days=1)))


def test_missing_partition_column_is_refused(engines) -> None:
    dest = open_destination(engines.spec("duckdb", partition_column="missing"))
    with pytest.raises(SchemaError, match="missing"):
        dest.replace_partition(rows_for(NOV30, range(1)), NOV30)


def test_type_round_trip(engine: str, engines) -> None:
    """Every supported kind comes back exactly as written."""
    dest = open_destination(engines.spec(engine))
    table = pa.table({
        "day": pa.array([NOV30, NOV30], pa.date32()),
        "i": pa.array([-(2**62), None], pa.int64()),
        "s": ["ünï ' \" \n,", ""],
        "b": [True, None],
        "d": pa.array([Decimal("-0.00000001"), Decimal("12345.67890000")], pa.decimal128(20, 8)),
        "ts": pa.array([datetime(2026, 11, 30, 1, 2, 3, 4), None], pa.timestamp("us")),
        "tz": pa.array([datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC), None],
                       pa.timestamp("us", tz="UTC")),
        "bin": pa.array([b"\x00\xff", None], pa.binary()),
        "f": [0.1, None],
    })
    dest.replace_partition(table, NOV30)
    back = dest.read_partition(NOV30, columns=table.column_names)
    assert sorted_rows(back) == sorted_rows(table)
