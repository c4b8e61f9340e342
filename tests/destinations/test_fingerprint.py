"""Fingerprints: same values -> same fingerprint on all four engines; duplicates are caught."""

from __future__ import annotations

import hashlib
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from dest_helpers import day_interval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twice.destinations import DestinationError, open_destination
from twice.destinations.fingerprint import ALGORITHM_V2, Fingerprint, fingerprint, verify

NOV30 = date(2026, 11, 30)
SCHEMA = pa.schema([
    ("day", pa.date32()), ("id", pa.int64()), ("name", pa.string()), ("flag", pa.bool_()),
    ("amount", pa.decimal128(12, 2)), ("rate", pa.decimal128(20, 8)),
    ("at", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")), ("blob", pa.binary()),
])


def reference(rows: list[dict[str, object]], columns: list[str]) -> tuple[int, str]:
    """The documented definition, written independently of twice's code."""

    def text(value: object) -> str:
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
            return "V" + format(value, "f")
        if isinstance(value, bytes):
            return "V" + value.hex()
        return "V" + str(value)

    total = 0
    for row in rows:
        line = "\x1f".join(text(row[c]) for c in sorted(columns))
        total += int(hashlib.md5(line.encode()).hexdigest()[:15], 16)
    return len(rows), format(total % 2**64, "016x")


SAMPLE = [
    {"day": NOV30, "id": 1, "name": "Ünïcødé ✓", "flag": True, "amount": Decimal("-0.05"),
     "rate": Decimal("0.00000010"), "at": datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC),
     "local": datetime(2026, 11, 30, 0, 0), "blob": b"\x00\xab"},
    {"day": NOV30, "id": -(2**62), "name": "", "flag": False, "amount": Decimal("1234567890.00"),
     "rate": Decimal("-99999999999.99999999"),
     "at": datetime(2026, 11, 30, 3, tzinfo=timezone(timedelta(hours=-3))),
     "local": datetime(2026, 11, 30, 12, 34, 56, 1), "blob": b""},
    {"day": NOV30, "id": 0, "name": None, "flag": None, "amount": None, "rate": None,
     "at": None, "local": None, "blob": None},
    {"day": NOV30, "id": 2, "name": "N", "flag": None, "amount": Decimal("0.00"),
     "rate": Decimal("0E-8"), "at": None, "local": None, "blob": None},
]


def write_everywhere(engines, rows: list[dict[str, object]]) -> dict[str, object]:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    written = {}
    for engine in ("sqlite", "duckdb", "postgresql", "parquet"):
        dest = open_destination(engines.spec(engine))
        dest.replace_partition(table, NOV30)
        written[engine] = dest
    return written


def test_equal_across_engines_and_equal_to_the_definition(engines) -> None:
    dests = write_everywhere(engines, SAMPLE)
    expected = reference(SAMPLE, SCHEMA.names)
    prints = {name: fingerprint(d, day_interval(NOV30), algorithm=ALGORITHM_V2)
              for name, d in dests.items()}
    for name, fp in prints.items():
        assert (fp.row_count, fp.checksum) == expected, name
        assert fp.engine == name and fp.columns == tuple(sorted(SCHEMA.names))
    assert len(set(prints.values())) == 1
    keyed = {name: fingerprint(d, NOV30, ["id", "day"], ALGORITHM_V2) for name, d in dests.items()}
    assert len(set(keyed.values())) == 1
    assert next(iter(keyed.values())).checksum == reference(SAMPLE, ["id", "day"])[1]


def test_duplicated_row_changes_the_fingerprint(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    dest.replace_partition(pa.Table.from_pylist(SAMPLE[:2], schema=SCHEMA), NOV30)
    once = fingerprint(dest, NOV30, ["id", "name"])
    # A pair of identical rows would cancel under XOR; the sum must move.
    dest.replace_partition(pa.Table.from_pylist(SAMPLE[:2] + SAMPLE[1:2] * 2, schema=SCHEMA),
                           NOV30)
    twice = fingerprint(dest, NOV30, ["id", "name"])
    assert twice.row_count == 4 and twice.checksum != once.checksum
    dest.replace_partition(pa.Table.from_pylist(SAMPLE[:2] * 2, schema=SCHEMA), NOV30)
    assert fingerprint(dest, NOV30, ["id", "name"]).checksum != once.checksum


def test_order_independent_and_column_order_independent(engines) -> None:
    a = open_destination(engines.spec("duckdb"))
    b = open_destination(engines.spec("duckdb"))
    a.replace_partition(pa.Table.from_pylist(SAMPLE, schema=SCHEMA), NOV30)
    b.replace_partition(pa.Table.from_pylist(SAMPLE[::-1], schema=SCHEMA), NOV30)
    assert fingerprint(a, NOV30, ["id", "name"]) == fingerprint(b, NOV30, ["name", "id"])


def test_empty_partition_and_floats(engines) -> None:
    dest = open_destination(engines.spec("sqlite"))
    dest.replace_partition([{"day": NOV30, "id": 1, "x": 0.5}], NOV30)
    empty = fingerprint(dest, date(2026, 1, 1))
    assert (empty.row_count, empty.checksum) == (0, "0" * 16)
    assert fingerprint(dest, NOV30).columns == ("day", "id", "x")  # the float is covered
    assert fingerprint(dest, NOV30, ["x"]).columns == ("x",)
    with pytest.raises(DestinationError, match=r"not in the table"):
        fingerprint(dest, NOV30, ["nope"])


def test_verify_detects_change(engine: str, engines) -> None:
    dest = open_destination(engines.spec(engine))
    dest.replace_partition(pa.Table.from_pylist(SAMPLE, schema=SCHEMA), NOV30)
    recorded = fingerprint(dest, NOV30, ["id", "amount"])
    stored = Fingerprint.from_dict(recorded.to_dict())
    assert verify(dest, NOV30, stored).matches
    changed = [dict(SAMPLE[0], amount=Decimal("0.06")), *SAMPLE[1:]]
    dest.replace_partition(pa.Table.from_pylist(changed, schema=SCHEMA), NOV30)
    result = verify(dest, NOV30, stored)
    assert not result.matches and result.reasons[0].startswith("checksum")
    assert result.row_count_delta == 0


ROW = st.fixed_dictionaries({
    "day": st.just(NOV30),
    "id": st.integers(-(2**63), 2**63 - 1),
    "name": st.none() | st.text(st.characters(blacklist_categories=("Cs",),
                                              blacklist_characters="\x00"), max_size=8),
    "flag": st.none() | st.booleans(),
    "amount": st.none() | st.decimals(-(10**9), 10**9, places=2, allow_nan=False),
    "rate": st.none() | st.decimals(-(10**11), 10**11, places=8, allow_nan=False),
    "at": st.none() | st.datetimes(datetime(1970, 1, 1), datetime(2100, 1, 1),
                                   timezones=st.just(UTC)),
    "local": st.none() | st.datetimes(datetime(1970, 1, 1), datetime(2100, 1, 1)),
    "blob": st.none() | st.binary(max_size=6),
})


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=6))
def test_property_cross_engine_equality(engines, rows: list[dict[str, object]]) -> None:
    dests = write_everywhere(engines, rows)
    expected = reference(rows, SCHEMA.names)
    for name, dest in dests.items():
        fp = fingerprint(dest, NOV30, algorithm=ALGORITHM_V2)
        assert (fp.row_count, fp.checksum) == expected, name
        dest.close()
