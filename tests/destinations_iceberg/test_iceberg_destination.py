"""The Iceberg destination's own behaviour: spec, snapshots as the log, time travel, upsert,
cross-engine fingerprints, a shared PostgreSQL catalog, and rerun sequences (hypothesis)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dest_helpers import day_interval, sorted_rows
from hypothesis import given, settings
from test_property_reruns import SETTINGS, check_reruns_equal_clean_run, runs

from twice.core.identifiers import IdentifierError
from twice.core.secrets import public_spec
from twice.destinations import DestinationError, open_destination
from twice.destinations.commits import FencedWriteError, WriteStamp
from twice.destinations.fingerprint import fingerprint
from twice.destinations.iceberg import COMMIT_PROPERTY, RETRY_PROPERTY, IcebergDestination

NOV30, DEC1 = date(2026, 11, 30), date(2026, 12, 1)
SpecFactory = Callable[..., str]  # the iceberg_spec fixture


def stamp(token: int, uow: str = "uow-a", fence: str = "pipe/task/2026-11-30") -> WriteStamp:
    return WriteStamp(uow, fence, 1, 1, token, "v1")


def rows(tag: str, day: date = NOV30, n: int = 3, start: int = 0) -> list[dict[str, Any]]:
    return [{"day": day, "id": start + i, "name": f"{tag}-{i}"} for i in range(n)]


# --------------------------------------------------------------------------- the spec


def test_spec_is_canonical_and_names_a_namespace(tmp_path: Path) -> None:
    dest = open_destination(f"iceberg://{tmp_path}/wh?partition_column=day#events")
    assert isinstance(dest, IcebergDestination)
    assert dest.spec == f"iceberg://{tmp_path}/wh?partition_column=day#default.events"
    assert (dest.namespace, dest.table, dest.engine) == ("default", "events", "iceberg")
    assert dest.schema() is None and dest.commit_records() == [] and dest.versions() == []
    assert not (tmp_path / "wh").exists()  # looking creates nothing


@pytest.mark.parametrize(
    ("fragment", "message"),
    [("a.b.c", "must be 'table' or 'namespace.table'"), ("", "names no table")],
)
def test_bad_table_names(tmp_path: Path, fragment: str, message: str) -> None:
    with pytest.raises(DestinationError, match=message):
        open_destination(f"iceberg://{tmp_path}/wh#{fragment}")


@pytest.mark.parametrize(("fragment", "field"),
                         [("ns;x.t", "namespace"), ('ns.t"', "table name"), ("../t", "name")])
def test_hostile_names_are_refused(tmp_path: Path, fragment: str, field: str) -> None:
    with pytest.raises((IdentifierError, DestinationError), match=field):
        open_destination(f"iceberg://{tmp_path}/wh#{fragment}")


def test_unknown_options_and_misplaced_passwords(tmp_path: Path) -> None:
    with pytest.raises(DestinationError, match="unknown options"):
        open_destination(f"iceberg://{tmp_path}/wh?overwrite=dynamic#t")
    with pytest.raises(DestinationError, match="catalog_uri only"):
        open_destination(f"iceberg://{tmp_path}/wh?password=x#t")
    with pytest.raises(DestinationError, match="must not carry a password") as caught:
        open_destination(f"iceberg://{tmp_path}/wh?catalog_uri=postgresql://u:s3cret@h/db#t")
    assert "s3cret" not in str(caught.value)


def test_catalog_password_is_never_in_the_spec(tmp_path: Path) -> None:
    written = (f"iceberg://{tmp_path}/wh?catalog_uri=postgresql://etl@127.0.0.1:5432/cat"
               "&password=s3cret#ns.t")
    assert "s3cret" not in public_spec(written)
    dest = open_destination(written)
    assert "s3cret" not in dest.spec and "s3cret" not in repr(dest)
    assert dest.spec == (f"iceberg://{tmp_path}/wh?catalog_uri=postgresql://etl@127.0.0.1:5432/"
                         "cat#ns.t")
    reopened = open_destination(dest.spec)  # the canonical spec reads back the same
    assert reopened.spec == dest.spec


# --------------------------------------------------------------------------- the log


def test_commit_record_lives_in_the_snapshot_summary(iceberg_spec: SpecFactory) -> None:
    dest = open_destination(iceberg_spec())
    assert isinstance(dest, IcebergDestination)
    dest.replace_partition(rows("v1"), NOV30)
    result = dest.replace_partition(rows("v2"), NOV30, stamp=stamp(4))
    assert result.commit is not None and result.rows_deleted == 3
    table = dest._require()
    current = table.current_snapshot()
    assert current is not None and current.summary is not None
    assert COMMIT_PROPERTY in current.summary.additional_properties
    assert table.properties[RETRY_PROPERTY] == "0"  # pyiceberg never retries past the fence
    assert dest.commit_records() == [result.commit]  # one record, though two snapshots
    assert [s.summary.operation.value for s in table.snapshots()] == [  # type: ignore[union-attr]
        "append", "delete", "append"]


def test_time_travel_returns_the_old_slice(iceberg_spec: SpecFactory) -> None:
    dest = open_destination(iceberg_spec())
    assert isinstance(dest, IcebergDestination)
    dest.replace_partition(rows("v1"), NOV30, stamp=stamp(1))
    dest.replace_partition(rows("v2", n=2), NOV30, stamp=stamp(2))
    dest.replace_partition(rows("other", DEC1), DEC1)
    versions = dest.versions()
    assert len(versions) == 3  # one per commit, not per snapshot (a replace makes two)
    assert sorted_rows(dest.read_partition_at(NOV30, versions[0])) == sorted_rows(rows("v1"))
    assert sorted_rows(dest.read_partition_at(NOV30, versions[1])) == sorted_rows(
        rows("v2", n=2))
    assert dest.read_partition_at(DEC1, versions[1]).num_rows == 0
    assert sorted_rows(dest.read_partition_at(day_interval(NOV30, 2), versions[2])) == (
        sorted_rows(rows("v2", n=2) + rows("other", DEC1)))
    with pytest.raises(DestinationError, match="no snapshot"):
        dest.read_partition_at(NOV30, 12345)


def test_the_diff_help_iceberg_example_runs_as_listed(iceberg_spec: SpecFactory) -> None:
    """Issue 37: ``twice diff --help`` showed ``--from 1 --to 2`` on Iceberg, which then took
    only snapshot ids. Issue 39: versions are listed, and taken, as ordinals 1, 2, ... (oldest
    first) with their snapshot ids, and a snapshot id still works; a version the table does
    not hold is refused, exit 2, listing the ones it holds."""
    import json
    import re

    from click.testing import CliRunner

    from twice.cli import cli

    help_text = CliRunner().invoke(cli, ["diff", "--help"]).output
    example = help_text[help_text.index("twice diff 'iceberg:"):]
    shown = [int(v) for v in re.findall(r"--(?:from|to) (\d+)", example)[:2]]
    assert shown == [1, 2], example
    assert "snapshot id" in example and "exit 2" in example
    spec = iceberg_spec(key_columns=("id",))
    dest = open_destination(spec)
    dest.replace_partition(rows("v1"), NOV30, stamp=stamp(1))
    dest.replace_partition(rows("v2", n=2), NOV30, stamp=stamp(2))
    ids = dest.versions()
    dest.close()
    wrong = CliRunner().invoke(cli, ["diff", spec, "--partition", "2026-11-30", "--from", "1",
                                     "--to", "3"])
    assert wrong.exit_code == 2 and "Traceback" not in wrong.output
    assert f"versions held: 1 (snapshot {ids[0]}), 2 (snapshot {ids[1]})" in wrong.output, (
        wrong.output)
    for versions in (["1", "2"], [str(ids[0]), str(ids[1])]):
        right = CliRunner().invoke(cli, ["diff", spec, "--partition", "2026-11-30", "--from",
                                         versions[0], "--to", versions[1], "--json"])
        assert right.exit_code == 0, right.output
        shown_json = json.loads(right.stdout)
        assert shown_json["removed"] == 1  # id 2 of v1 is not in v2
        assert (shown_json["from_version"], shown_json["to_version"]) == (1, 2)
        assert (shown_json["from_snapshot_id"], shown_json["to_snapshot_id"]) == tuple(ids)


def test_rolled_back_writes_are_not_in_the_log(iceberg_spec: SpecFactory) -> None:
    dest = open_destination(iceberg_spec())
    assert isinstance(dest, IcebergDestination)
    dest.replace_partition(rows("v1"), NOV30, stamp=stamp(1))
    first = dest.versions()[-1]
    dest.replace_partition(rows("v2"), NOV30, stamp=stamp(2, uow="uow-b"))
    table = dest._require()
    with table.manage_snapshots() as manage:
        manage.set_current_snapshot(first)
    assert [r.token for r in dest.commit_records()] == [1]
    assert sorted_rows(dest.read_partition(NOV30)) == sorted_rows(rows("v1"))


def test_a_foreign_table_gets_pyiceberg_retries_turned_off(iceberg_spec: SpecFactory) -> None:
    dest = open_destination(iceberg_spec())
    assert isinstance(dest, IcebergDestination)
    catalog = dest._open_catalog()
    catalog.create_namespace_if_not_exists("ns")
    catalog.create_table(("ns", dest.table),
                         schema=pa.Table.from_pylist(rows("x")).schema)  # not by twice
    dest.replace_partition(rows("v1"), NOV30, stamp=stamp(1))
    assert dest._require().properties[RETRY_PROPERTY] == "0"
    assert dest.row_count() == 3


# --------------------------------------------------------------------------- snapshot expiry


def expire_all_but_current(dest: IcebergDestination) -> None:
    """Routine table maintenance: expire every snapshot but the current one (their summaries,
    and the commit records in them, are gone from the table's metadata)."""
    table = dest._require()
    current = table.current_snapshot()
    assert current is not None
    old = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != current.snapshot_id]
    table.maintenance.expire_snapshots().by_ids(old).commit()


def test_the_fence_holds_after_the_fencing_snapshot_is_expired(
        iceberg_spec: SpecFactory) -> None:
    dest = open_destination(iceberg_spec())
    assert isinstance(dest, IcebergDestination)
    dest.replace_partition(rows("new"), NOV30, stamp=stamp(5))
    dest.replace_partition(rows("other", DEC1), DEC1,
                           stamp=stamp(6, uow="uow-b", fence="pipe/task/2026-12-01"))
    expire_all_but_current(dest)
    assert 5 not in [r.token for r in dest.commit_records()]  # the record went with it
    with pytest.raises(FencedWriteError):  # a zombie holding an older lease
        dest.replace_partition(rows("zombie"), NOV30, stamp=stamp(3))
    assert sorted_rows(dest.read_partition(NOV30)) == sorted_rows(rows("new"))
    dest.replace_partition(rows("newer"), NOV30, stamp=stamp(7))  # a newer token still may


def test_an_append_is_not_repeated_after_its_snapshot_is_expired(
        iceberg_spec: SpecFactory) -> None:
    dest = open_destination(iceberg_spec())
    assert isinstance(dest, IcebergDestination)
    first = dest.append(rows("a"), partition=NOV30, stamp=stamp(1))
    assert first.commit is not None
    dest.replace_partition(rows("other", DEC1), DEC1,
                           stamp=stamp(2, uow="uow-b", fence="pipe/task/2026-12-01"))
    expire_all_but_current(dest)
    assert dest.commit_records("uow-a") == []
    retried = WriteStamp("uow-a", "pipe/task/2026-11-30", 1, 2, 3, "v1")  # attempt 2, same gen
    again = dest.append(rows("a"), partition=NOV30, stamp=retried)
    assert again.rows_written == 0
    assert dest.row_count(NOV30) == 3
    next_generation = WriteStamp("uow-a", "pipe/task/2026-11-30", 2, 3, 4, "v1")
    assert dest.append(rows("b"), partition=NOV30, stamp=next_generation).rows_written == 3
    assert dest.row_count(NOV30) == 6


def test_a_rolled_back_append_is_written_again(iceberg_spec: SpecFactory) -> None:
    dest = open_destination(iceberg_spec())
    assert isinstance(dest, IcebergDestination)
    dest.replace_partition(rows("other", DEC1), DEC1)
    before = dest.versions()[-1]
    dest.append(rows("a"), partition=NOV30, stamp=stamp(1))
    with dest._require().manage_snapshots() as manage:  # an operator undoes the append
        manage.set_current_snapshot(before)
    assert dest.row_count(NOV30) == 0
    retried = WriteStamp("uow-a", "pipe/task/2026-11-30", 1, 2, 2, "v1")
    assert dest.append(rows("a"), partition=NOV30, stamp=retried).rows_written == 3
    assert dest.row_count(NOV30) == 3


# --------------------------------------------------------------------------- upsert


def test_upsert_updates_never_appends_and_is_fenced(iceberg_spec: SpecFactory) -> None:
    dest = open_destination(iceberg_spec(key_columns=("id", "day")))
    first = dest.upsert(rows("a"), stamp=stamp(3))
    again = dest.upsert(rows("b", n=2) + rows("c", start=5, n=1), stamp=stamp(3))
    assert dest.row_count() == 4
    assert {r["name"] for r in dest.read_partition().to_pylist()} == {"b-0", "b-1", "a-2",
                                                                      "c-0"}
    for result in (first, again):
        assert result.commit is not None
    assert again.commit is not None
    fresh = fingerprint(dest, None)
    assert (again.commit.row_count, again.commit.checksum) == (fresh.row_count, fresh.checksum)
    with pytest.raises(FencedWriteError):
        dest.upsert(rows("old"), stamp=stamp(2))
    assert dest.row_count() == 4
    inside = dest.upsert(rows("d", n=1), partition=NOV30, stamp=stamp(3))
    assert inside.commit is not None and inside.commit.row_count == 4
    dest.upsert(rows("next", DEC1, n=2), partition=DEC1)
    assert dest.row_count() == 6


def test_a_large_upsert_by_a_composite_key(iceberg_spec: SpecFactory) -> None:
    """12,000 rows upserted twice by (id, day) over two days (found by a probe: one EqualTo
    conjunction per row crashed pyiceberg's delete with SIGSEGV at about 10,000 rows); the
    second upsert updates every row and adds none, and the keys of each day stay apart."""
    dest = open_destination(iceberg_spec(key_columns=("id", "day")))
    half = 6_000
    first = (rows("a", NOV30, n=half) + rows("a", DEC1, n=half))
    dest.upsert(first)
    second = (rows("b", NOV30, n=half) + rows("b", DEC1, n=half - 1)
              + rows("c", DEC1, n=2, start=half + 10))
    dest.upsert(second)
    got = sorted((r["day"], r["id"], r["name"]) for r in dest.read_partition().to_pylist())
    expected = sorted(
        [(NOV30, i, f"b-{i}") for i in range(half)]
        + [(DEC1, i, f"b-{i}") for i in range(half - 1)] + [(DEC1, half - 1, f"a-{half - 1}")]
        + [(DEC1, half + 10 + i, f"c-{i}") for i in range(2)]
    )
    assert got == expected


def test_an_upsert_of_keys_distinct_in_every_column_keeps_the_rows_around_them(
    iceberg_spec: SpecFactory,
) -> None:
    """Keys distinct in every column (found by a probe: still one term per row, SIGSEGV at
    12,000): the delete names a superset (the widest key column's values) and puts back the
    rows it matched that are not upserted, so rows sharing an id with another name stay."""
    dest = open_destination(iceberg_spec(key_columns=("id", "name", "day")))
    n = 600
    dest.upsert([{"day": NOV30, "id": i, "name": f"k{i}"} for i in range(n)]
                + [{"day": NOV30, "id": i, "name": "other"} for i in range(n)]
                + [{"day": DEC1, "id": i, "name": f"k{i}"} for i in range(n)])
    dest.upsert([{"day": NOV30, "id": i, "name": f"k{i}"} for i in range(n)]
                + [{"day": NOV30, "id": n + i, "name": f"k{n + i}"} for i in range(3)],
                partition=NOV30)  # the superset is bounded by the slice
    got = sorted((r["day"], r["id"], r["name"]) for r in dest.read_partition().to_pylist())
    expected = sorted([(NOV30, i, f"k{i}") for i in range(n + 3)]
                      + [(NOV30, i, "other") for i in range(n)]
                      + [(DEC1, i, f"k{i}") for i in range(n)])
    assert got == expected


# --------------------------------------------------------------------------- fingerprints

SCHEMA = pa.schema([
    ("day", pa.date32()), ("id", pa.int64()), ("name", pa.string()), ("flag", pa.bool_()),
    ("amount", pa.decimal128(12, 2)), ("rate", pa.decimal128(20, 8)),
    ("at", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")),
    ("blob", pa.binary()), ("score", pa.float64()),
])
SAMPLE = [
    {"day": NOV30, "id": 1, "name": "Ünïcødé ✓", "flag": True, "amount": Decimal("-0.05"),
     "rate": Decimal("0.00000010"), "at": datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC),
     "local": datetime(2026, 11, 30), "blob": b"\x00\xab", "score": 0.1},
    {"day": NOV30, "id": -(2**62), "name": "", "flag": False, "amount": Decimal("1234567890.00"),
     "rate": Decimal("-99999999999.99999999"), "at": datetime(2026, 11, 30, 3, tzinfo=UTC),
     "local": datetime(2026, 11, 30, 12, 34, 56, 1), "blob": b"", "score": 2e23},
    {"day": NOV30, "id": 0, "name": None, "flag": None, "amount": None, "rate": None,
     "at": None, "local": None, "blob": None, "score": math.nan},
    {"day": NOV30, "id": 2, "name": "N", "flag": None, "amount": Decimal("0.00"),
     "rate": Decimal("0E-8"), "at": None, "local": None, "blob": None, "score": -0.0},
    {"day": NOV30, "id": 3, "name": "x", "flag": True, "amount": Decimal("1.00"),
     "rate": Decimal("1.5"), "at": None, "local": None, "blob": None, "score": math.inf},
]


def test_fingerprints_equal_duckdb_for_the_same_rows(iceberg_spec: SpecFactory,
                                                     tmp_path: Path) -> None:
    table = pa.Table.from_pylist(SAMPLE, schema=SCHEMA)
    iceberg = open_destination(iceberg_spec())
    duck = open_destination(f"duckdb://{tmp_path}/w.duckdb?partition_column=day#t")
    written = iceberg.replace_partition(table, NOV30, stamp=stamp(1))
    duck.replace_partition(table, NOV30)
    for partition in (NOV30, day_interval(NOV30), None):
        assert fingerprint(iceberg, partition) == fingerprint(duck, partition)
    assert fingerprint(iceberg, NOV30, ["id", "score"]) == fingerprint(duck, NOV30,
                                                                        ["score", "id"])
    record = written.commit
    assert record is not None
    fresh = fingerprint(duck, NOV30)
    assert (record.row_count, record.checksum, record.columns, record.algorithm) == (
        fresh.row_count, fresh.checksum, fresh.columns, fresh.algorithm)
    appended = iceberg.append(SAMPLE[:2], partition=NOV30, stamp=stamp(2, uow="uow-b"))
    duck.append(SAMPLE[:2], partition=NOV30, stamp=None)
    assert appended.commit is not None
    assert (appended.commit.row_count, appended.commit.checksum) == (
        fingerprint(duck, NOV30).row_count, fingerprint(duck, NOV30).checksum)
    duck.close()


def test_timestamptz_partition_column_with_hourly_intervals(iceberg_spec: SpecFactory) -> None:
    from twice.core.interval import Interval

    dest = open_destination(iceberg_spec(partition_column="at"))
    hour = datetime(2026, 11, 30, 5, tzinfo=UTC)
    first = Interval(hour, hour + timedelta(hours=1))
    second = Interval(hour + timedelta(hours=1), hour + timedelta(hours=2))
    dest.replace_partition([{"id": i, "at": hour + timedelta(minutes=10 * i)} for i in range(6)],
                           first)
    dest.replace_partition([{"id": 9, "at": hour + timedelta(hours=1)}], second)
    dest.replace_partition([{"id": 0, "at": hour}], first)
    assert dest.row_count(first) == 1 and dest.row_count() == 2


# --------------------------------------------------------------------------- shared catalog


@pytest.mark.postgres
def test_postgresql_catalog(postgres_url: str, tmp_path: Path) -> None:
    head, _, database = postgres_url.rpartition("/")
    scheme, _, rest = head.partition("://")
    userinfo, _, host = rest.rpartition("@")
    user, _, password = userinfo.partition(":")
    spec = (f"iceberg://{tmp_path}/wh?partition_column=day&catalog_uri={scheme}://{user}@{host}/"
            f"{database}&password={password}#ns.t")
    with open_destination(spec) as dest:
        assert f"password={password}" not in dest.spec
        result = dest.replace_partition(rows("v1"), NOV30, stamp=stamp(1))
        assert result.commit is not None
    assert not (tmp_path / "wh" / "twice_catalog.db").exists()  # the catalog is PostgreSQL's
    with open_destination(spec) as again:
        assert again.commit_records() == [result.commit]
        assert sorted_rows(again.read_partition(NOV30)) == sorted_rows(rows("v1"))
        with pytest.raises(FencedWriteError):
            again.replace_partition(rows("old"), NOV30, stamp=stamp(0))


# --------------------------------------------------------------------------- reruns


class _Engines:
    """What ``check_reruns_equal_clean_run`` asks of the ``engines`` fixture."""

    def __init__(self, make: SpecFactory) -> None:
        self.make = make

    def spec(self, engine: str, name: str | None = None, **options: Any) -> str:
        assert engine == "iceberg"
        return self.make(name, **options)


@settings(SETTINGS, max_examples=15)
@given(sequence=runs())
def test_iceberg_reruns(iceberg_spec: SpecFactory, sequence: list[tuple[int, pa.Table]]
                        ) -> None:
    check_reruns_equal_clean_run(_Engines(iceberg_spec), "iceberg", sequence)
