"""Property: ANY sequence of runs and reruns equals one clean run of each interval.

Hypothesis draws a sequence of (interval, rows) runs; later runs of the same interval may carry
changed source data (the latest is what the interval should hold) or no rows at all. Applying
the sequence must leave the destination identical, row for row and fingerprint for fingerprint,
to a fresh destination where each interval ran once with its latest data.
"""

from __future__ import annotations

from datetime import date, timedelta

import pyarrow as pa
from dest_helpers import day_interval, sorted_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twice.destinations import open_destination
from twice.destinations.fingerprint import fingerprint

FIRST = date(2026, 11, 26)
INTERVAL_DAYS = 2
INTERVALS = [day_interval(FIRST + timedelta(days=INTERVAL_DAYS * i), INTERVAL_DAYS)
             for i in range(3)]
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()),
                    ("amount", pa.decimal128(12, 2)), ("name", pa.string())])


@st.composite
def runs(draw: st.DrawFn) -> list[tuple[int, pa.Table]]:
    sequence = []
    for _ in range(draw(st.integers(1, 6))):
        index = draw(st.integers(0, len(INTERVALS) - 1))
        start = INTERVALS[index].start.date()
        rows = draw(st.lists(st.fixed_dictionaries({
            "id": st.integers(0, 20),
            "day": st.sampled_from([start + timedelta(days=d) for d in range(INTERVAL_DAYS)]),
            "amount": st.decimals(-1000, 1000, places=2, allow_nan=False),
            "name": st.none() | st.text(max_size=4).filter(lambda s: "\x00" not in s),
        }), max_size=5))
        sequence.append((index, pa.Table.from_pylist(rows, schema=SCHEMA)))
    return sequence


SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def check_reruns_equal_clean_run(engines, engine: str, sequence: list[tuple[int, pa.Table]]
                                 ) -> None:
    rerun = open_destination(engines.spec(engine))
    latest: dict[int, pa.Table] = {}
    for index, table in sequence:
        rerun.replace_partition(table, INTERVALS[index])
        latest[index] = table
    clean = open_destination(engines.spec(engine))
    for index in sorted(latest):
        clean.replace_partition(latest[index], INTERVALS[index])
    expected = sorted_rows(pa.concat_tables(latest.values()))
    assert sorted_rows(rerun.read_partition()) == expected
    assert sorted_rows(clean.read_partition()) == expected
    for interval in INTERVALS:
        assert fingerprint(rerun, interval) == fingerprint(clean, interval)
    rerun.close()
    clean.close()


@SETTINGS
@given(sequence=runs())
def test_sqlite_reruns(engines, sequence: list[tuple[int, pa.Table]]) -> None:
    check_reruns_equal_clean_run(engines, "sqlite", sequence)


@SETTINGS
@given(sequence=runs())
def test_duckdb_reruns(engines, sequence: list[tuple[int, pa.Table]]) -> None:
    check_reruns_equal_clean_run(engines, "duckdb", sequence)


@settings(SETTINGS, max_examples=25)
@given(sequence=runs())
def test_postgresql_reruns(engines, sequence: list[tuple[int, pa.Table]]) -> None:
    check_reruns_equal_clean_run(engines, "postgresql", sequence)


@SETTINGS
@given(sequence=runs())
def test_parquet_static_reruns(engines, sequence: list[tuple[int, pa.Table]]) -> None:
    check_reruns_equal_clean_run(engines, "parquet", sequence)


@settings(SETTINGS, max_examples=20)
@given(batches=st.lists(
    st.lists(st.tuples(st.integers(0, 8), st.integers(-5, 5)), max_size=6,
             unique_by=lambda t: t[0]),
    min_size=1, max_size=5,
))
def test_upsert_reruns_keep_latest_value_per_key(
    engines, batches: list[list[tuple[int, int]]]
) -> None:
    expected: dict[int, int] = {}
    for engine in ("sqlite", "duckdb", "postgresql"):
        dest = open_destination(engines.spec(engine, key_columns=("id",)))
        expected = {}
        for batch in batches + batches:  # every batch rerun once more at the end
            dest.upsert(pa.table({"id": pa.array([k for k, _ in batch], pa.int64()),
                                  "day": pa.array([FIRST] * len(batch), pa.date32()),
                                  "v": pa.array([v for _, v in batch], pa.int64())}))
            expected.update(dict(batch))
        got = {r["id"]: r["v"] for r in dest.read_partition().to_pylist()}
        assert got == expected, engine
        assert dest.row_count() == len(expected)
        dest.close()

