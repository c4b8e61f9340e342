"""upsert: insert-or-update by a deterministic key; reruns update, never append."""

from __future__ import annotations

import sqlite3
from datetime import date

import pyarrow as pa
import pytest
from dest_helpers import sorted_rows

from twice.destinations import (
    DestinationError,
    DuplicateKeyError,
    RowsOutsidePartitionError,
    open_destination,
)

NOV30 = date(2026, 11, 30)


def events(version: int, ids: range) -> list[dict[str, object]]:
    return [{"source_id": f"s{i}", "day": NOV30, "value": i * 10 + version} for i in ids]


def test_rerun_updates_never_appends(sql_engine: str, engines) -> None:
    dest = open_destination(engines.spec(sql_engine, key_columns=("source_id", "day")))
    for _ in range(3):
        dest.upsert(events(1, range(5)))
    assert dest.row_count() == 5
    dest.upsert(events(2, range(3, 8)))  # 3, 4 updated; 5, 6, 7 new
    assert dest.row_count() == 8
    values = {r["source_id"]: r["value"] for r in dest.read_partition().to_pylist()}
    assert values == {f"s{i}": i * 10 + (1 if i < 3 else 2) for i in range(8)}


def test_duplicate_or_null_keys_in_batch_are_refused(sql_engine: str, engines) -> None:
    dest = open_destination(engines.spec(sql_engine, key_columns=("source_id", "day")))
    dest.upsert(events(1, range(2)))
    with pytest.raises(DuplicateKeyError, match=r"more than once.*'source_id': 's1'"):
        dest.upsert(events(1, range(2)) + events(2, range(1, 2)))
    with pytest.raises(DuplicateKeyError, match="null key column 'source_id'"):
        dest.upsert([{"source_id": None, "day": NOV30, "value": 1}])
    assert sorted_rows(dest.read_partition()) == sorted_rows(
        pa.Table.from_pylist(events(1, range(2)))
    )


def test_only_key_columns_means_do_nothing(sql_engine: str, engines) -> None:
    dest = open_destination(engines.spec(sql_engine, key_columns=("source_id", "day")))
    rows = [{"source_id": "a", "day": NOV30}]
    dest.upsert(rows)
    dest.upsert(rows)
    assert dest.row_count() == 1


def test_partition_guard_on_upsert(sql_engine: str, engines) -> None:
    dest = open_destination(engines.spec(sql_engine, key_columns=("source_id",)))
    with pytest.raises(RowsOutsidePartitionError):
        dest.upsert(events(1, range(2)), partition=date(2026, 12, 1))
    dest.upsert(events(1, range(2)), partition=NOV30)
    assert dest.row_count() == 2


def test_upsert_without_keys_or_constraint_is_explained(engines) -> None:
    path = engines.tmp / "plain.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE ev (source_id TEXT, day DATE_TEXT, value BIGINT)")
    keyless = open_destination(f"sqlite://{path}#ev")
    with pytest.raises(DestinationError, match="upsert needs key_columns"):
        keyless.upsert(events(1, range(1)))
    dest = open_destination(f"sqlite://{path}?key_columns=source_id#ev")
    with pytest.raises(DestinationError, match="PRIMARY KEY or UNIQUE"):
        dest.upsert(events(1, range(1)))


def test_parquet_refuses_upsert(engines) -> None:
    dest = open_destination(engines.spec("parquet", key_columns=("source_id",)))
    with pytest.raises(DestinationError, match="replace_partition only"):
        dest.upsert(events(1, range(1)))
