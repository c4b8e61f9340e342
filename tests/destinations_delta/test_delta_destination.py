"""The Delta destination's own behaviour: spec, log-held commit records, fencing through app
transactions, merge upserts, time travel, ``twice diff`` and cross-engine fingerprints."""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from dest_helpers import day_interval, sorted_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from test_property_reruns import SETTINGS, check_reruns_equal_clean_run, runs

from twice.cli import cli
from twice.core.interval import Interval
from twice.destinations import DestinationError, open_destination
from twice.destinations.commits import FencedWriteError, WriteStamp
from twice.destinations.delta import FENCE_APP, UNIT_APP, DeltaDestination
from twice.destinations.diff import DiffError, diff_tables, diff_versions
from twice.destinations.fingerprint import fingerprint

DAY, NEXT = date(2026, 11, 30), date(2026, 12, 1)
FENCE = "pipe/task/2026-11-30"


def stamp(token: int, *, uow: str = "uow-a", generation: int = 1, attempt: int = 1,
          fence: str = FENCE) -> WriteStamp:
    return WriteStamp(uow, fence, generation, attempt, token, "v1")


def delta(spec: str) -> DeltaDestination:
    dest = open_destination(spec)
    assert isinstance(dest, DeltaDestination)
    return dest


# --------------------------------------------------------------------------- spec


def test_spec_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = delta(f"delta://{tmp_path}/t?partition_column=day&key_columns=id")
    assert dest.spec == f"delta://{tmp_path}/t?partition_column=day&key_columns=id"
    assert dest.root == tmp_path / "t" and dest.engine == "delta"
    monkeypatch.chdir(tmp_path)
    relative = delta("delta:rel/t?partition_column=day")
    assert relative.root == tmp_path / "rel" / "t"
    assert delta("delta:s3://bucket/x?partition_column=day").uri == "s3://bucket/x"
    with pytest.raises(DestinationError, match="unknown options"):
        open_destination(f"delta://{tmp_path}/t?mode=x")
    with pytest.raises(DestinationError, match="drop the '#"):
        open_destination(f"delta://{tmp_path}/t#table")
    with pytest.raises(DestinationError, match="local files"):
        open_destination("delta://evil.example/t")
    assert dest.schema() is None and dest.commit_records() == [] and dest.versions() == []
    assert not (tmp_path / "t").exists()  # looking creates nothing


# --------------------------------------------------------------------------- the log


def test_the_record_and_the_app_transactions_ride_in_the_commit(delta_spec: Any) -> None:
    dest = delta(delta_spec())
    result = dest.replace_partition([{"day": DAY, "id": 1, "x": 0.1}], DAY,
                                    stamp=stamp(7, generation=2, attempt=3))
    assert result.commit is not None
    from deltalake import DeltaTable

    table = DeltaTable(dest.uri)
    assert table.version() == 0  # ONE commit: rows, record and transactions together
    (entry,) = table.history()
    assert json.loads(entry["twice.commit"])["token"] == 7
    assert table.transaction_version(FENCE_APP + FENCE) == 7
    assert table.transaction_version(UNIT_APP + "uow-a") == (2 << 32) + 3
    assert dest.commit_versions() == {0: result.commit}
    fresh = fingerprint(dest, DAY)
    assert (result.commit.row_count, result.commit.checksum, result.commit.columns) == (
        fresh.row_count, fresh.checksum, fresh.columns)


def test_fencing_refuses_older_tokens_for_every_write(delta_spec: Any) -> None:
    dest = delta(delta_spec(key_columns=("id",)))
    dest.replace_partition([{"day": DAY, "id": 1, "n": "t5"}], DAY, stamp=stamp(5))
    for write in (
        lambda: dest.replace_partition([{"day": DAY, "id": 1, "n": "t4"}], DAY, stamp=stamp(4)),
        lambda: dest.upsert([{"day": DAY, "id": 1, "n": "t4"}], stamp=stamp(4)),
        lambda: dest.append([{"day": DAY, "id": 2, "n": "t4"}], stamp=stamp(4, uow="b")),
    ):
        with pytest.raises(FencedWriteError) as caught:
            write()
        assert caught.value.newer_token == 5
    assert dest.versions() == [0]  # nothing was committed
    assert dest.read_partition(DAY).to_pylist() == [{"day": DAY, "id": 1, "n": "t5"}]
    dest.upsert([{"day": DAY, "id": 1, "n": "t6"}], stamp=stamp(6, uow="c"))
    assert [r.token for r in dest.commit_records()] == [5, 6]


def test_an_append_is_not_repeated_after_log_retention_cleaned_its_commit(
        delta_spec: Any) -> None:
    from deltalake import DeltaTable

    dest = delta(delta_spec())
    first = dest.append([{"day": DAY, "id": 1, "n": "a"}], partition=DAY, stamp=stamp(1))
    assert first.commit is not None
    for token in (2, 3):
        dest.replace_partition([{"day": NEXT, "id": token, "n": "b"}], NEXT,
                               stamp=stamp(token, uow="uow-b", fence="pipe/task/2026-12-01"))
    table = DeltaTable(dest.uri)
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    table = DeltaTable(dest.uri)
    table.create_checkpoint()
    table.cleanup_metadata()  # what a routine checkpoint does once the retention has passed
    assert dest.commit_records("uow-a") == []  # the history no longer holds the append
    again = dest.append([{"day": DAY, "id": 1, "n": "a"}], partition=DAY,
                        stamp=stamp(4, attempt=2))
    assert (again.rows_written, again.commit) == (0, None)
    assert dest.row_count(DAY) == 1
    later = dest.append([{"day": DAY, "id": 2, "n": "c"}], partition=DAY,
                        stamp=stamp(5, generation=2, attempt=3))
    assert later.rows_written == 1 and dest.row_count(DAY) == 2


def test_upsert_merges_by_key_and_its_record_matches(delta_spec: Any) -> None:
    dest = delta(delta_spec(key_columns=("id",)))
    first = dest.upsert([{"day": DAY, "id": i, "v": i} for i in range(4)], stamp=stamp(1))
    assert first.commit is not None and first.commit.row_count == 4
    # id 3 moves to the next day: the slice of DAY loses it, NEXT gains it
    moved = dest.upsert([{"day": DAY, "id": 1, "v": 10}, {"day": NEXT, "id": 3, "v": 30},
                         {"day": NEXT, "id": 9, "v": 90}], stamp=stamp(2, uow="u2"))
    assert moved.commit is not None
    assert moved.commit.checksum == fingerprint(dest, None).checksum
    in_day = dest.upsert([{"day": DAY, "id": 2, "v": 20}], partition=DAY,
                         stamp=stamp(3, uow="u3"))
    assert in_day.commit is not None and in_day.commit.row_count == 3
    assert in_day.commit.checksum == fingerprint(dest, DAY).checksum
    assert {r["id"]: r["v"] for r in dest.read_partition().to_pylist()} == {
        0: 0, 1: 10, 2: 20, 3: 30, 9: 90}
    for _ in range(2):  # reruns update, never append
        dest.upsert([{"day": DAY, "id": 1, "v": 10}])
    assert dest.row_count() == 5


@settings(SETTINGS, max_examples=15)
@given(batches=st.lists(
    st.lists(st.tuples(st.integers(0, 8), st.integers(-5, 5)), max_size=6,
             unique_by=lambda t: t[0]),
    min_size=1, max_size=4,
))
def test_upsert_reruns_keep_latest_value_per_key(delta_spec: Any,
                                                 batches: list[list[tuple[int, int]]]) -> None:
    dest = delta(delta_spec(key_columns=("id",)))
    expected: dict[int, int] = {}
    for batch in batches + batches:
        dest.upsert(pa.table({"id": pa.array([k for k, _ in batch], pa.int64()),
                              "day": pa.array([DAY] * len(batch), pa.date32()),
                              "v": pa.array([v for _, v in batch], pa.int64())}))
        expected.update(dict(batch))
    assert {r["id"]: r["v"] for r in dest.read_partition().to_pylist()} == expected


@SETTINGS
@given(sequence=runs())
def test_delta_reruns_equal_a_clean_run(engines: Any, sequence: list[tuple[int, pa.Table]]
                                        ) -> None:
    check_reruns_equal_clean_run(engines, "delta", sequence)


def test_timestamptz_partition_column_with_hourly_intervals(delta_spec: Any) -> None:
    dest = delta(delta_spec(partition_column="at"))
    hour = datetime(2026, 11, 30, 5, tzinfo=UTC)
    first = Interval(hour, hour + timedelta(hours=1))
    second = Interval(hour + timedelta(hours=1), hour + timedelta(hours=2))
    rows = [{"id": i, "at": hour + timedelta(minutes=10 * i)} for i in range(6)]
    dest.replace_partition(rows, first)
    dest.replace_partition([{"id": 9, "at": hour + timedelta(hours=1)}], second)
    dest.replace_partition(rows[:2], first)
    assert dest.row_count(first) == 2 and dest.row_count(second) == 1
    assert dest.row_count() == 3


def test_string_partition_values_are_literals_not_sql(delta_spec: Any) -> None:
    dest = delta(delta_spec(partition_column="region"))
    evil = "x') OR 1=1; --"
    dest.replace_partition([{"region": evil, "n": 1}], evil)
    dest.replace_partition([{"region": "eu", "n": 2}], "eu")
    dest.replace_partition([{"region": evil, "n": 3}], evil)
    assert sorted(r["n"] for r in dest.read_partition().to_pylist()) == [2, 3]


# --------------------------------------------------------------------------- fingerprints

SCHEMA = pa.schema([
    ("day", pa.date32()), ("id", pa.int64()), ("name", pa.string()), ("flag", pa.bool_()),
    ("amount", pa.decimal128(12, 2)), ("at", pa.timestamp("us", tz="UTC")),
    ("local", pa.timestamp("us")), ("blob", pa.binary()), ("score", pa.float64()),
])
SAMPLE = [
    {"day": DAY, "id": 1, "name": "Ünïcødé ✓", "flag": True, "amount": Decimal("-0.05"),
     "at": datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC),
     "local": datetime(2026, 11, 30), "blob": b"\x00\xab", "score": 0.1},
    {"day": DAY, "id": -(2**62), "name": "", "flag": False, "amount": Decimal("1234567890.00"),
     "at": datetime(2026, 11, 30, 3, tzinfo=UTC), "local": datetime(2026, 11, 30, 12, 34, 56, 1),
     "blob": b"", "score": 2e23},
    {"day": DAY, "id": 0, "name": None, "flag": None, "amount": None, "at": None,
     "local": None, "blob": None, "score": None},
    {"day": DAY, "id": 2, "name": "N", "flag": None, "amount": Decimal("0.00"), "at": None,
     "local": None, "blob": None, "score": -0.0},
]


def test_fingerprints_equal_duckdb_for_the_same_rows(engines: Any) -> None:
    table = pa.Table.from_pylist(SAMPLE, schema=SCHEMA)
    prints, keyed, older = {}, {}, {}
    for engine in ("duckdb", "delta"):
        with open_destination(engines.spec(engine)) as dest:
            dest.replace_partition(table, day_interval(DAY))
            prints[engine] = fingerprint(dest, day_interval(DAY))
            keyed[engine] = fingerprint(dest, DAY, ["score", "id"])
            older[engine] = fingerprint(dest, DAY, algorithm="twice-fp-v2")
    assert prints["duckdb"] == prints["delta"]  # every column, floats included
    assert keyed["duckdb"] == keyed["delta"] and older["duckdb"] == older["delta"]
    assert prints["delta"].engine == "delta" and prints["delta"].row_count == 4


# --------------------------------------------------------------------------- time travel, diff

BEFORE = [{"day": DAY, "id": i, "name": f"n{i}", "score": i / 10} for i in range(6)]
# removed: 0 and 1; changed: 2 (name), 3 (score by one ulp); unchanged: 4, 5; added: 7, 8, 9
AFTER = (
    [{"day": DAY, "id": 2, "name": "renamed", "score": 0.2},
     {"day": DAY, "id": 3, "name": "n3", "score": math.nextafter(0.3, 1.0)}]
    + BEFORE[4:]
    + [{"day": DAY, "id": i, "name": f"new{i}", "score": None} for i in (7, 8, 9)]
)


def test_diff_tables_exact_counts_and_keys() -> None:
    result = diff_tables(pa.Table.from_pylist(BEFORE), pa.Table.from_pylist(AFTER), ["id"])
    assert (result.added, result.removed, result.changed, result.unchanged) == (3, 2, 2, 2)
    assert [k["id"] for k in result.added_keys] == [7, 8, 9]
    assert [k["id"] for k in result.removed_keys] == [0, 1]
    assert [k["id"] for k in result.changed_keys] == [2, 3]
    assert result.changed_columns == {"name": 1, "score": 1}
    assert (result.rows_before, result.rows_after) == (6, 7)
    few = diff_tables(pa.Table.from_pylist(BEFORE), pa.Table.from_pylist(AFTER), ["id"],
                      samples=1)
    assert few.added == 3 and [k["id"] for k in few.added_keys] == [7]
    same = diff_tables(pa.Table.from_pylist(BEFORE), pa.Table.from_pylist(BEFORE[::-1]), ["id"])
    assert same.identical
    with pytest.raises(DiffError, match="more than once"):
        diff_tables(pa.Table.from_pylist(BEFORE + BEFORE[:1]), pa.Table.from_pylist(AFTER),
                    ["id"])
    with pytest.raises(DiffError, match="key columns"):
        diff_tables(pa.Table.from_pylist(BEFORE), pa.Table.from_pylist(AFTER), [])


def test_time_travel_and_diff_over_a_known_change(delta_spec: Any) -> None:
    spec = delta_spec("known", key_columns=("id",))
    dest = delta(spec)
    dest.replace_partition(BEFORE, DAY)  # version 0
    dest.replace_partition([{"day": NEXT, "id": 100, "name": "other day", "score": 1.0}],
                           NEXT)  # version 1: another slice
    dest.replace_partition(AFTER, DAY)  # version 2
    assert dest.versions() == [0, 1, 2]
    assert sorted_rows(dest.read_partition_at(DAY, 0)) == sorted_rows(
        pa.Table.from_pylist(BEFORE))
    assert dest.read_partition_at(NEXT, 0).num_rows == 0
    result = diff_versions(dest, DAY, 0, 2)
    assert (result.added, result.removed, result.changed) == (3, 2, 2)
    assert diff_versions(dest, DAY, 1, 2) == result  # version 1 left DAY as it was
    assert diff_versions(dest, NEXT, 0, 2).added == 1
    with pytest.raises(DiffError, match="no such version"):
        diff_versions(dest, DAY, 0, 7)

    out = CliRunner().invoke(cli, ["diff", spec, "--partition", "2026-11-30", "--from", "0",
                                   "--to", "2", "--json"])
    assert out.exit_code == 0, out.output
    printed = json.loads(out.stdout)
    assert (printed["added"], printed["removed"], printed["changed"]) == (3, 2, 2)
    assert printed["added_keys"] == [{"id": 7}, {"id": 8}, {"id": 9}]
    assert printed["removed_keys"] == [{"id": 0}, {"id": 1}]
    assert printed["changed_keys"] == [{"id": 2}, {"id": 3}]
    text = CliRunner().invoke(cli, ["diff", spec, "--partition", "2026-11-30", "--from", "0",
                                    "--to", "2", "--samples", "1"])
    assert text.exit_code == 0, text.output
    assert "added      3" in text.output and "added keys (first 1 of 3):" in text.output
    assert "id=7" in text.output and "id=8" not in text.output


def test_diff_refusals_name_the_problem(tmp_path: Path, delta_spec: Any) -> None:
    sqlite = f"sqlite:///{tmp_path}/w.db?partition_column=day&key_columns=id#t"
    with open_destination(sqlite) as dest:
        dest.replace_partition(BEFORE, DAY)
    refused = CliRunner().invoke(cli, ["diff", sqlite, "--partition", "2026-11-30", "--from",
                                       "0", "--to", "1"])
    assert refused.exit_code == 2
    assert "delta and iceberg" in refused.output and "Traceback" not in refused.output
    spec = delta_spec()
    delta(spec).replace_partition(BEFORE, DAY)
    keyless = CliRunner().invoke(cli, ["diff", spec, "--partition", "2026-11-30", "--from", "0",
                                       "--to", "0"])
    assert keyless.exit_code == 2 and "--key-columns" in keyless.output
    missing = CliRunner().invoke(cli, ["diff", spec, "--partition", "2026-11-30", "--from", "0",
                                       "--to", "3", "--key-columns", "id"])
    assert missing.exit_code == 2 and "--to 3: no such version" in missing.output
