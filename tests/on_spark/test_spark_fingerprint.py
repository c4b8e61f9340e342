"""Fingerprints computed inside Spark equal twice-fp-v2 on DuckDB and SQLite for the same rows,
and equal an independent implementation of the documented definition (floats:
test_spark_float_fingerprint.py)."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Context, Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fingerprints.fp_reference import reference_v3
from tests.on_spark.spark_rows import days
from twice.destinations import DestinationError, open_destination
from twice.destinations.fingerprint import ALGORITHM_V2, fingerprint

DAY = date(2026, 11, 30)
WIDE = Context(prec=60)  # decimal(38, s) exceeds the default 28 digits
SCHEMA = pa.schema([
    ("day", pa.date32()), ("id", pa.int64()), ("name", pa.string()), ("flag", pa.bool_()),
    ("amount", pa.decimal128(12, 2)), ("rate", pa.decimal128(20, 8)),
    ("big", pa.decimal128(38, 10)), ("at", pa.timestamp("us", tz="UTC")),
    ("local", pa.timestamp("us")), ("blob", pa.binary()),
])
SAMPLE: list[dict[str, Any]] = [
    {"day": DAY, "id": 1, "name": "Ünïcødé ✓", "flag": True, "amount": Decimal("-0.05"),
     "rate": Decimal("0.00000010"), "big": Decimal("1234567890123456789012345678.0123456789"),
     "at": datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC),
     "local": datetime(2026, 11, 30, 0, 0), "blob": b"\x00\xab"},
    {"day": DAY, "id": -(2**63), "name": "", "flag": False, "amount": Decimal("1234567890.00"),
     "rate": Decimal("-99999999999.99999999"), "big": Decimal("-0.0000000001"),
     "at": datetime(2026, 11, 30, 3, tzinfo=timezone(timedelta(hours=-3))),
     "local": datetime(2026, 11, 30, 12, 34, 56, 1), "blob": b""},
    {"day": DAY, "id": 0, "name": None, "flag": None, "amount": None, "rate": None,
     "big": None, "at": None, "local": None, "blob": None},
    {"day": DAY, "id": 2**63 - 1, "name": "N", "flag": None, "amount": Decimal("0.00"),
     "rate": Decimal("0E-8"), "big": Decimal("0"), "at": None,
     "local": datetime(1970, 1, 1), "blob": None},
]


def reference(rows: list[dict[str, Any]], columns: list[str]) -> tuple[int, str]:
    """twice-fp-v2 (no float column here) as documented in twice.destinations.fingerprint, written
    without twice's code."""

    def text(value: Any, arrow_type: pa.DataType) -> str:
        if value is None:
            return "N"
        if isinstance(value, bool):
            return "V" + ("true" if value else "false")
        if isinstance(value, datetime):
            if value.tzinfo is not None:
                return "V" + value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") + "Z"
            return "V" + value.strftime("%Y-%m-%d %H:%M:%S.%f")
        if isinstance(value, date):
            return "V" + value.isoformat()
        if isinstance(value, Decimal):
            scale = arrow_type.scale
            return "V" + format(value.quantize(Decimal(1).scaleb(-scale), context=WIDE), "f")
        if isinstance(value, bytes):
            return "V" + value.hex()
        return "V" + str(value)

    total = 0
    for row in rows:
        line = "\x1f".join(text(row[c], SCHEMA.field(c).type) for c in sorted(columns))
        total += int(hashlib.md5(line.encode("utf-8")).hexdigest()[:15], 16)
    return len(rows), format(total % 2**64, "016x")


def write_all(tmp: Path, table: pa.Table) -> dict[str, Any]:
    """The same rows in Spark, DuckDB and SQLite (fresh tables)."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    dests = {
        "spark": open_destination(f"spark://{tmp}/warehouse?partition_column=day#{name}"),
        "duckdb": open_destination(f"duckdb://{tmp}/w.duckdb?partition_column=day#{name}"),
        "sqlite": open_destination(f"sqlite://{tmp}/w.db?partition_column=day#{name}"),
    }
    for dest in dests.values():
        dest.replace_partition(table, DAY)
    return dests


def test_spark_equals_duckdb_sqlite_and_the_definition(spark: Any, tmp_path: Path) -> None:
    dests = write_all(tmp_path, pa.Table.from_pylist(SAMPLE, schema=SCHEMA))
    expected = reference(SAMPLE, SCHEMA.names)
    prints = {name: fingerprint(d, days(DAY, 1), algorithm=ALGORITHM_V2)
              for name, d in dests.items()}
    for name, fp in prints.items():
        assert (fp.row_count, fp.checksum) == expected, name
    assert prints["spark"].engine == "spark"
    assert len(set(prints.values())) == 1
    current = {name: fingerprint(d, days(DAY, 1)) for name, d in dests.items()}  # twice-fp-v3
    assert {(fp.row_count, fp.checksum) for fp in current.values()} == {
        reference_v3(SAMPLE, SCHEMA)}
    keyed = {name: fingerprint(d, DAY, ["id", "big"], ALGORITHM_V2) for name, d in dests.items()}
    assert {(fp.row_count, fp.checksum) for fp in keyed.values()} == {
        reference(SAMPLE, ["id", "big"])
    }
    nulls = dests["spark"].null_counts(DAY, ["name", "at", "id"])
    assert nulls == dests["duckdb"].null_counts(DAY, ["name", "at", "id"]) == {
        "name": 1, "at": 2, "id": 0
    }


def test_checksum_wraps_modulo_2_64_like_the_other_engines(spark: Any, tmp_path: Path) -> None:
    many = [dict(SAMPLE[0], id=i) for i in range(300)]  # sum of 60-bit hashes >> 2**64
    dests = write_all(tmp_path, pa.Table.from_pylist(many, schema=SCHEMA))
    total = sum(int(hashlib.md5(s.encode()).hexdigest()[:15], 16) for s in [
        "\x1f".join(["V2026-11-30", f"V{i}"]) for i in range(300)
    ])
    assert total > 2**64
    expected = reference(many, ["day", "id"])
    for name, dest in dests.items():
        fp = fingerprint(dest, DAY, ["id", "day"], ALGORITHM_V2)
        assert (fp.row_count, fp.checksum) == expected, name
        fp = fingerprint(dest, DAY, ["id", "day"])
        assert (fp.row_count, fp.checksum) == reference_v3(many, SCHEMA, ["day", "id"]), name


def test_session_time_zone_does_not_change_the_fingerprint(spark: Any, tmp_path: Path) -> None:
    table = pa.Table.from_pylist(SAMPLE, schema=SCHEMA)
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Sao_Paulo")
    try:
        dests = write_all(tmp_path, table)
        spark_fp = fingerprint(dests["spark"], DAY, ["at", "local", "id"])
        back = dests["spark"].read_partition(DAY, ["id", "at", "local"])
        assert spark.conf.get("spark.sql.session.timeZone") == "America/Sao_Paulo"  # restored
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    assert spark_fp == fingerprint(dests["duckdb"], DAY, ["at", "local", "id"])
    assert sorted(back.to_pylist(), key=lambda r: r["id"]) == sorted(
        table.select(["id", "at", "local"]).to_pylist(), key=lambda r: r["id"]
    )


def test_empty_slice_and_float_columns(spark: Any, tmp_path: Path) -> None:
    dest = open_destination(f"spark://{tmp_path}/w?partition_column=day#t_floats")
    dest.replace_partition([{"day": DAY, "id": 1, "x": 0.5}], DAY)
    empty = fingerprint(dest, date(2026, 1, 1))
    assert (empty.row_count, empty.checksum) == (0, "0" * 16)
    assert fingerprint(dest, DAY).columns == ("day", "id", "x")  # floats are covered
    duck = open_destination(f"duckdb://{tmp_path}/w.duckdb?partition_column=day#t_floats")
    duck.replace_partition([{"day": DAY, "id": 1, "x": 0.5}], DAY)
    assert fingerprint(dest, DAY) == fingerprint(duck, DAY)
    assert fingerprint(dest, DAY, ["x"]) == fingerprint(duck, DAY, ["x"])
    with pytest.raises(DestinationError, match="not in the table"):
        fingerprint(dest, DAY, ["nope"])


ROW = st.fixed_dictionaries({
    "day": st.just(DAY),
    "id": st.integers(-(2**63), 2**63 - 1),
    "name": st.none() | st.text(st.characters(blacklist_categories=("Cs",),
                                              blacklist_characters="\x00"), max_size=6),
    "flag": st.none() | st.booleans(),
    "amount": st.none() | st.decimals(-(10**9), 10**9, places=2, allow_nan=False),
    "rate": st.none() | st.decimals(-(10**11), 10**11, places=8, allow_nan=False),
    "big": st.none() | st.decimals(-(10**27), 10**27, places=10, allow_nan=False),
    "at": st.none() | st.datetimes(datetime(1970, 1, 1), datetime(2100, 1, 1),
                                   timezones=st.just(UTC)),
    "local": st.none() | st.datetimes(datetime(1970, 1, 1), datetime(2100, 1, 1)),
    "blob": st.none() | st.binary(max_size=4),
})


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=6))
def test_property_spark_fingerprint_matches_duckdb_and_rerun_is_stable(
    spark: Any, tmp_path: Path, rows: list[dict[str, Any]]
) -> None:
    """Invariant: for any rows, Spark's fingerprint == DuckDB's == the definition, and
    replacing the partition again with the same rows changes neither rows nor fingerprint."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    dests = write_all(tmp_path, table)
    expected = reference(rows, SCHEMA.names)
    spark_dest = dests["spark"]
    first = fingerprint(spark_dest, DAY, algorithm=ALGORITHM_V2)
    assert (first.row_count, first.checksum) == expected
    assert first == fingerprint(dests["duckdb"], DAY, algorithm=ALGORITHM_V2)
    assert fingerprint(spark_dest, DAY) == fingerprint(dests["duckdb"], DAY)  # twice-fp-v3
    spark_dest.replace_partition(table, DAY)
    assert fingerprint(spark_dest, DAY, algorithm=ALGORITHM_V2) == first
    for dest in dests.values():
        dest.close()
