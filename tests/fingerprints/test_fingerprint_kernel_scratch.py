"""The ``twice-fp-v3`` kernel's shortcuts give the definition's checksum
(``fp_reference.reference_v3``): work arrays reused from batch to batch (batches of different
sizes, the largest not first), a column holding one value (or only NULLs) hashed once, repeated
text looked up in the distinct values of the column's previous batch, and dictionary arrays
hashed through their dictionary."""

from __future__ import annotations

import math
from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from fp_reference import reference_v3

from twice.destinations import fingerprint as fp
from twice.destinations.columns import DICTIONARY_MIN, ColumnType, schema_of

SCHEMA = pa.schema([
    ("amount", pa.decimal128(12, 2)), ("blob", pa.binary()), ("day", pa.date32()),
    ("fund", pa.string()), ("id", pa.int64()), ("x", pa.float64()),
])
FUNDS = ["fund-1", "", "ü✓😀" * 9, "exactly8", "nine byte", None]


def _batch(rows: list[dict[str, object]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


def _rows(n: int, start: int, *, constant: bool = False, funds: list[str | None] = FUNDS
          ) -> list[dict[str, object]]:
    return [{
        "amount": Decimal("12.50") if constant else Decimal(i - 500) / 100,
        "blob": f"{i:x}".encode() * (i % 5), "day": date(2026, 11, 30),
        "fund": funds[i % len(funds)], "id": 7 if constant else i,
        "x": [0.1, -0.0, math.nan, math.inf, None][i % 5],
    } for i in range(start, start + n)]


def _sums(batches: list[pa.RecordBatch]) -> str:
    schema = schema_of(pa.Table.from_batches(batches))
    _, high, low = fp.batches_sums(batches, [(name, schema[name]) for name in SCHEMA.names])
    return fp.checksum_from_sums(high, low)


def test_reused_work_arrays_hash_every_batch_as_its_rows() -> None:
    parts = [_rows(50, 0), _rows(3 * DICTIONARY_MIN, 50, constant=True),
             _rows(DICTIONARY_MIN + 76, 5000), _rows(1, 9000, constant=True),
             _rows(4 * DICTIONARY_MIN, 10_000, funds=[*FUNDS, "a new fund"])]
    rows = [row for part in parts for row in part]
    assert _sums([_batch(part) for part in parts]) == reference_v3(rows, SCHEMA)[1]


def test_repeated_text_is_looked_up_until_a_batch_brings_new_values(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    encode, lookup = fp.pc.dictionary_encode, fp.pc.index_in
    monkeypatch.setattr(fp.pc, "dictionary_encode",
                        lambda array: calls.append("encode") or encode(array))
    monkeypatch.setattr(fp.pc, "index_in",
                        lambda array, value_set: calls.append("lookup") or lookup(
                            array, value_set=value_set))
    n = 2 * DICTIONARY_MIN
    parts = [_rows(n, 0), _rows(n, n), _rows(n, 2 * n, funds=[*FUNDS, "new"]), _rows(n, 3 * n)]
    batches = [_batch(part).select(["fund"]) for part in parts]
    _, high, low = fp.batches_sums(batches, [("fund", schema_of(pa.Table.from_batches(
        batches))["fund"])])
    rows = [{"fund": row["fund"]} for part in parts for row in part]
    assert fp.checksum_from_sums(high, low) == reference_v3(rows, pa.schema(
        [SCHEMA.field("fund")]))[1]
    assert calls == ["encode", "lookup", "lookup", "encode", "encode"]


def test_constant_and_all_null_columns_hash_as_their_values() -> None:
    n = DICTIONARY_MIN + 3
    rows = [{"amount": None, "blob": None, "day": date(2026, 11, 30), "fund": None, "id": None,
             "x": None} for _ in range(n)]
    assert _sums([_batch(rows)]) == reference_v3(rows, SCHEMA)[1]
    rows = [{**row, "amount": Decimal("-3.00"), "fund": "same", "id": -(2**63), "x": -0.0}
            for row in rows]
    assert _sums([_batch(rows)]) == reference_v3(rows, SCHEMA)[1]


def test_a_dictionary_array_hashes_as_its_values() -> None:
    values = pa.array(["b", None, "ü✓😀" * 9, "", "a"])
    indices = pa.array([0, 1, None, 2, 3, 4, 0, 0] * 200, pa.int8())
    encoded = pa.DictionaryArray.from_arrays(indices, values).slice(3)
    decoded = encoded.dictionary_decode()
    as_text = [(name, ColumnType("string")) for name in ("s",)]
    assert (fp.arrow_sums(pa.table({"s": encoded}), as_text)
            == fp.arrow_sums(pa.table({"s": decoded}), as_text))
    # a dictionary value that no row refers to and that has no microsecond form
    stamps = pa.array([1_000, 1_001, 2_000], pa.int64()).cast(pa.timestamp("ns"))
    encoded = pa.DictionaryArray.from_arrays(pa.array([0, 2, None, 0], pa.int32()), stamps)
    as_stamp = [("t", ColumnType("timestamp"))]
    rows = [{"t": v} for v in [datetime(1970, 1, 1, 0, 0, 0, 1), datetime(1970, 1, 1, 0, 0, 0, 2),
                               None, datetime(1970, 1, 1, 0, 0, 0, 1)]]
    _, high, low = fp.arrow_sums(pa.table({"t": encoded}), as_stamp)
    assert fp.checksum_from_sums(high, low) == reference_v3(
        rows, pa.schema([("t", pa.timestamp("us"))]))[1]
