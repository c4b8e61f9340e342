"""Float columns are fingerprinted, by one canonical text, equal on every engine.

``twice-fp-v1`` left float columns out; ``twice-fp-v2`` writes every float as its shortest
round-trip text (NaN, the infinities and -0.0 normalised). The oracle is ``fp_reference``,
written from the documentation without twice's code. Spark: tests/on_spark.
"""

from __future__ import annotations

import math
from datetime import date

import pyarrow as pa
import pytest
from fp_reference import as_float32, reference
from fp_strategies import EDGES, FLOATS, NAN_PAYLOADS
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from twice.destinations import DestinationError, open_destination
from twice.destinations.columns import SchemaError
from twice.destinations.commits import WriteStamp
from twice.destinations.fingerprint import ALGORITHM_V2, fingerprint

DAY = date(2026, 11, 30)
SCHEMA = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("x", pa.float64()),
                    ("y", pa.float64()), ("g", pa.float32())])
ROW = st.fixed_dictionaries({
    "x": FLOATS, "y": st.none() | FLOATS,
    "g": st.none() | st.floats(width=32, allow_nan=True, allow_subnormal=True),
})


def table_of(rows: list[dict[str, object]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"day": DAY, "id": i, **row} for i, row in enumerate(rows)], schema=SCHEMA
    )


def expected_rows(table: pa.Table) -> list[dict[str, object]]:
    """The rows as stored: float32 values widened exactly to float64."""
    return [dict(row, g=None if row["g"] is None else as_float32(row["g"]))
            for row in table.to_pylist()]


def has_nan(table: pa.Table) -> bool:
    return any(isinstance(v, float) and math.isnan(v)
               for row in table.to_pylist() for v in row.values())


# --------------------------------------------------------------------------- engines


def write_everywhere(engines, table: pa.Table, targets: dict[str, str]) -> dict[str, object]:
    written = {}
    for engine, spec in targets.items():
        dest = open_destination(spec)
        if engine == "sqlite" and has_nan(table):
            with pytest.raises(SchemaError, match=r"column 'x'|column 'y'|column 'g'"):
                dest.replace_partition(table, DAY)
            dest.close()
            continue
        dest.replace_partition(table, DAY)
        written[engine] = dest
    return written


@pytest.fixture
def targets(engines) -> dict[str, str]:
    return {e: engines.target(e).spec for e in ("sqlite", "duckdb", "postgresql", "parquet")}


def test_every_edge_value_fingerprints_alike_on_all_engines(engines, targets) -> None:
    finite = [v for v in EDGES if not math.isnan(v)]
    rows = [{"x": v, "y": None if i % 3 == 0 else -v, "g": v if abs(v) < 3e38 else None}
            for i, v in enumerate(finite)]
    table = table_of(rows)
    dests = write_everywhere(engines, table, targets)
    assert set(dests) == {"sqlite", "duckdb", "postgresql", "parquet"}
    expected = reference(expected_rows(table), SCHEMA)
    for name, dest in dests.items():
        fp = fingerprint(dest, DAY, algorithm=ALGORITHM_V2)
        assert fp.columns == ("day", "g", "id", "x", "y"), name
        assert fp.algorithm == "twice-fp-v2"
        assert (fp.row_count, fp.checksum) == expected, name
        only_x = fingerprint(dest, DAY, ["x"], ALGORITHM_V2)
        assert (only_x.row_count, only_x.checksum) == reference(
            expected_rows(table), SCHEMA, ["x"]), name


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=8))
@example(rows=[{"x": v, "y": v, "g": None} for v in EDGES])
@example(rows=[{"x": v, "y": None, "g": v} for v in [*NAN_PAYLOADS, math.nan, -0.0]])
def test_property_same_floats_same_fingerprint_on_every_engine(engines, targets,
                                                               rows: list[dict]) -> None:
    """For any floats (subnormal, huge, integral, NaN with any payload, +-inf, -0.0), SQLite,
    DuckDB, PostgreSQL and Parquet give the documented fingerprint; SQLite, which cannot store
    NaN, refuses a batch holding one instead of storing NULL."""
    table = table_of(rows)
    dests = write_everywhere(engines, table, targets)
    expected = reference(expected_rows(table), SCHEMA)
    prints = {name: fingerprint(dest, DAY, algorithm=ALGORITHM_V2) for name, dest in dests.items()}
    for name, fp in prints.items():
        assert (fp.row_count, fp.checksum) == expected, name
    assert len(set(prints.values())) == 1
    for dest in dests.values():
        dest.close()


def test_a_changed_float_changes_the_fingerprint(engine: str, engines) -> None:
    target = engines.target(engine)
    with open_destination(target.spec) as dest:
        dest.replace_partition(table_of([{"x": 0.1, "y": 1.0, "g": None}]), DAY)
        before = fingerprint(dest, DAY)
        dest.replace_partition(table_of([{"x": 0.1 + 2**-56, "y": 1.0, "g": None}]), DAY)
        after = fingerprint(dest, DAY)  # the last bit of one float
    assert before.row_count == after.row_count and before.checksum != after.checksum


def test_commit_record_fingerprint_covers_floats_and_equals_a_fresh_one(engine: str,
                                                                        engines) -> None:
    """Item 4: the fingerprint taken inside the write transaction is v2, over every column,
    and equal to ``fingerprint(dest, slice)`` afterwards (keyed destination included)."""
    keys = () if engine == "parquet" else ("id",)
    target = engines.target(engine, key_columns=keys)
    stamp = WriteStamp(uow_id="u", fence_key="p/t/d", generation=1, attempt=1, token=1)
    rows = [{"x": v, "y": None, "g": 0.5} for v in (2e23, 5e-324, -0.0, math.inf)]
    with open_destination(target.spec) as dest:
        record = dest.replace_partition(table_of(rows), DAY, stamp=stamp).commit
        fresh = fingerprint(dest, DAY)
    assert record is not None
    assert (record.algorithm, record.columns) == ("twice-fp-v3", ("day", "g", "id", "x", "y"))
    assert (record.row_count, record.checksum) == (fresh.row_count, fresh.checksum)


def test_sqlite_refuses_nan_at_write_time_naming_the_column(engines) -> None:
    target = engines.target("sqlite")
    with open_destination(target.spec) as dest:
        dest.replace_partition(table_of([{"x": 1.0, "y": 2.0, "g": None}]), DAY)
        with pytest.raises(SchemaError, match=r"column 'y' \(float\) holds 1 NaN"):
            dest.replace_partition(table_of([{"x": 1.0, "y": math.nan, "g": None}]), DAY)
        assert dest.read_partition(DAY).column("y").to_pylist() == [2.0]  # nothing written
        with pytest.raises(SchemaError, match="NaN"):
            dest.append(table_of([{"x": math.nan, "y": None, "g": None}]), partition=DAY,
                        stamp=None)


def test_unsupported_type_is_refused_naming_column_and_type(engines) -> None:
    """A column without a canonical text is never silently left out of a fingerprint, and
    twice never writes such a table."""
    target = engines.target("postgresql")
    with open_destination(target.spec) as dest:
        dest.replace_partition(table_of([{"x": 1.0, "y": 2.0, "g": None}]), DAY)
    target.sql("ALTER TABLE {t} ADD COLUMN doc jsonb")
    with open_destination(target.spec) as dest:
        with pytest.raises(DestinationError, match=r"'doc' \(unsupported type jsonb\)"):
            fingerprint(dest, DAY)
        with pytest.raises(SchemaError, match=r"'doc' \(jsonb\)"):
            dest.replace_partition(table_of([{"x": 1.0, "y": 2.0, "g": None}]), DAY)
        assert fingerprint(dest, DAY, ["x", "id"]).columns == ("id", "x")  # named columns
