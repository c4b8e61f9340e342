"""Float fingerprints in Spark equal the other engines' and the documented definition.

Spark's own double-to-string is Java's (``4.9E-324``, ``1.9999999999999998E23``), so twice
writes the float part of each row with its Python function in Spark's Python workers
(``mapInArrow``); these tests hold it to the independent oracle of tests/fingerprints, for
subnormals, huge and tiny exponents, integers as floats, NaN (any payload), +-inf and -0.0.
"""

from __future__ import annotations

import math
import uuid
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.fingerprints.fp_reference import as_float32, reference
from tests.fingerprints.fp_strategies import EDGES, FLOATS, NAN_PAYLOADS
from twice.destinations import open_destination
from twice.destinations.commits import WriteStamp
from twice.destinations.fingerprint import ALGORITHM_V2, fingerprint, verify

DAY = date(2026, 11, 30)
SCHEMA = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("x", pa.float64()),
                    ("y", pa.float64()), ("g", pa.float32())])
ROW = st.fixed_dictionaries({
    "x": FLOATS, "y": st.none() | FLOATS,
    "g": st.none() | st.floats(width=32, allow_nan=True, allow_subnormal=True),
})


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"day": DAY, "id": i, **row} for i, row in enumerate(rows)], schema=SCHEMA
    )


def expected(table: pa.Table) -> tuple[int, str]:
    rows = [dict(r, g=None if r["g"] is None else as_float32(r["g"])) for r in table.to_pylist()]
    return reference(rows, SCHEMA)


def write_all(tmp: Path, table: pa.Table) -> dict[str, Any]:
    """The same rows in Spark, DuckDB and Parquet (fresh tables; SQLite cannot hold NaN)."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    dests = {
        "spark": open_destination(f"spark://{tmp}/warehouse?partition_column=day#{name}"),
        "duckdb": open_destination(f"duckdb://{tmp}/w.duckdb?partition_column=day#{name}"),
        "parquet": open_destination(f"parquet://{tmp}/{name}?partition_column=day"),
    }
    for dest in dests.values():
        dest.replace_partition(table, DAY)
    return dests


def test_edge_values_equal_the_definition_in_spark(spark: Any, tmp_path: Path) -> None:
    rows = [{"x": v, "y": None if i % 4 == 0 else -v, "g": v if abs(v) < 3e38 else None}
            for i, v in enumerate([*EDGES, *NAN_PAYLOADS])]
    table = table_of(rows)
    dests = write_all(tmp_path, table)
    want = expected(table)
    for name, dest in dests.items():
        fp = fingerprint(dest, DAY, algorithm=ALGORITHM_V2)
        assert fp.columns == ("day", "g", "id", "x", "y"), name
        assert (fp.row_count, fp.checksum) == want, name
    assert len({fingerprint(dest, DAY) for dest in dests.values()}) == 1  # twice-fp-v3
    assert fingerprint(dests["spark"], DAY, ["x"]) == fingerprint(dests["duckdb"], DAY, ["x"])
    sqlite = open_destination(f"sqlite://{tmp_path}/w.db?partition_column=day#t")
    finite = table_of([r for r in rows if not any(
        isinstance(v, float) and math.isnan(v) for v in r.values())])
    sqlite.replace_partition(finite, DAY)
    dests["spark"].replace_partition(finite, DAY)
    assert fingerprint(sqlite, DAY) == fingerprint(dests["spark"], DAY)


def test_spark_commit_record_and_verify_cover_floats(spark: Any, tmp_path: Path) -> None:
    dest = open_destination(f"spark://{tmp_path}/warehouse?partition_column=day#t_fl")
    stamp = WriteStamp(uow_id="u", fence_key="p/t/d", generation=1, attempt=1, token=1)
    table = table_of([{"x": 0.1 * i, "y": 2e23, "g": None} for i in range(6)])
    record = dest.replace_partition(table, DAY, stamp=stamp).commit
    assert record is not None and record.algorithm == "twice-fp-v3"
    recorded = fingerprint(dest, DAY)
    assert (record.row_count, record.checksum, record.columns) == (
        recorded.row_count, recorded.checksum, recorded.columns)
    assert verify(dest, DAY, recorded).matches
    folder = Path(dest.location) / f"day={DAY.isoformat()}"  # change one float by hand
    files = sorted(folder.glob("*.parquet"))
    data = pa.concat_tables([pq.read_table(f) for f in files])
    for f in files:
        f.unlink()
    index = data.schema.get_field_index("x")
    values = data["x"].to_pylist()
    values[3] = values[3] * 100
    pq.write_table(data.set_column(index, "x", pa.array(values, data["x"].type)),
                   folder / "part-by-hand.parquet")
    result = verify(dest, DAY, recorded)
    assert not result.matches and result.reasons[0].startswith("checksum")


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=6))
@example(rows=[{"x": v, "y": None, "g": v} for v in [*NAN_PAYLOADS, math.nan, -0.0, 5e-324]])
def test_property_spark_float_fingerprint_equals_the_other_engines(
    spark: Any, tmp_path: Path, rows: list[dict[str, Any]]
) -> None:
    table = table_of(rows)
    dests = write_all(tmp_path, table)
    want = expected(table)
    prints = {name: fingerprint(dest, DAY, algorithm=ALGORITHM_V2) for name, dest in dests.items()}
    for name, fp in prints.items():
        assert (fp.row_count, fp.checksum) == want, name
    assert len(set(prints.values())) == 1
    assert len({fingerprint(dest, DAY) for dest in dests.values()}) == 1  # twice-fp-v3
    for dest in dests.values():
        dest.close()
