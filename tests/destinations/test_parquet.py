"""Partitioned Parquet: static vs dynamic overwrite, atomic commits, crash leftovers."""

from __future__ import annotations

from datetime import date, timedelta

import pyarrow.dataset as ds
import pytest
from dest_helpers import day_interval, sorted_rows

from twice.destinations import DestinationError, SchemaError, open_destination

D1, D2, D3 = (date(2026, 11, 28) + timedelta(days=i) for i in range(3))
WEEK = day_interval(D1, 3)


def rows(*days: date, tag: str = "v1") -> list[dict[str, object]]:
    return [{"day": d, "id": i, "tag": tag} for d in days for i in range(2)]


def partitions(root) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith((".", "_")))


def test_static_overwrite_empties_partitions_without_rows(engines) -> None:
    dest = open_destination(engines.spec("parquet", "ds"))
    root = engines.tmp / "ds"
    dest.replace_partition(rows(D1, D2, D3), WEEK)
    result = dest.replace_partition(rows(D2, tag="v2"), WEEK)  # reprocessed: D1, D3 now empty
    assert result.partitions_written == ("day=2026-11-29",)
    assert result.partitions_removed == ("day=2026-11-28", "day=2026-11-30")
    assert result.rows_deleted == 6
    assert partitions(root) == ["day=2026-11-29"]
    assert sorted_rows(dest.read_partition()) == sorted_rows(rows(D2, tag="v2"))


def test_dynamic_overwrite_keeps_old_rows_of_partitions_without_data(engines) -> None:
    """Documented Spark-like behaviour: the reason backfills should use static mode."""
    dest = open_destination(engines.spec("parquet", "ds") + "&overwrite=dynamic")
    assert dest.spec.endswith("overwrite=dynamic")
    dest.replace_partition(rows(D1, D2, D3), WEEK)
    result = dest.replace_partition(rows(D2, tag="v2"), WEEK)
    assert result.mode == "dynamic" and result.partitions_removed == ()
    assert dest.row_count(D1) == 2 and dest.row_count(D3) == 2  # stale rows survive
    assert {r["tag"] for r in dest.read_partition(D2).to_pylist()} == {"v2"}
    dest.replace_partition(rows(D2, tag="v3"), WEEK, overwrite="static")
    assert dest.row_count() == 2


def test_plain_hive_readers_see_twice_datasets(engines) -> None:
    dest = open_destination(engines.spec("parquet", "ds"))
    dest.replace_partition(rows(D1, D2), WEEK)
    table = ds.dataset(engines.tmp / "ds", partitioning="hive").to_table()
    assert table.num_rows == 4 and set(table.column_names) == {"day", "id", "tag"}


def test_leftovers_of_a_crash_are_cleaned_on_the_next_run(engines) -> None:
    spec = engines.spec("parquet", "ds")
    root = engines.tmp / "ds"
    open_destination(spec).replace_partition(rows(D1), D1)
    (root / ".twice-new-day=2026-11-28-abc").mkdir()
    (root / ".twice-new-day=2026-11-28-abc" / "part-00000.parquet").write_bytes(b"half")
    (root / ".twice-del-day=2026-11-20-def").mkdir()
    aside = root / ".twice-old-day=2026-11-29-0123456789ab"
    aside.mkdir()  # an interrupted two-rename swap whose target is missing: restore it
    open_destination(spec).replace_partition(rows(D2), D2)  # the new run wrote D2 over it
    assert partitions(root) == ["day=2026-11-28", "day=2026-11-29"]
    assert not [p for p in root.iterdir() if p.name.startswith(".twice-")]
    assert sorted_rows(open_destination(spec).read_partition()) == sorted_rows(rows(D1, D2))


def test_recover_restores_a_moved_aside_partition(engines) -> None:
    spec = engines.spec("parquet", "ds")
    root = engines.tmp / "ds"
    dest = open_destination(spec)
    dest.replace_partition(rows(D1), D1)
    (root / "day=2026-11-28").rename(root / ".twice-old-day=2026-11-28-0123456789ab")
    assert dest.recover() == ["restored day=2026-11-28 from .twice-old-day=2026-11-28-0123456789ab"]
    assert dest.row_count(D1) == 2


def test_fallback_two_rename_commit(engines) -> None:
    dest = open_destination(engines.spec("parquet", "ds"))
    dest.use_exchange = False  # what non-Linux systems do
    dest.replace_partition(rows(D1), D1)
    dest.replace_partition(rows(D1, tag="v2"), D1)
    assert {r["tag"] for r in dest.read_partition(D1).to_pylist()} == {"v2"}
    assert not [p for p in (engines.tmp / "ds").iterdir() if p.name.startswith(".twice-")]


def test_partition_column_kinds_and_schema(engines) -> None:
    by_region = open_destination(engines.spec("parquet", "r", partition_column="region"))
    by_region.replace_partition([{"region": "eu-west", "n": 1}], "eu-west")
    by_region.replace_partition([{"region": "us", "n": 2}], "us")
    assert by_region.row_count("eu-west") == 1 and by_region.row_count() == 2
    by_year = open_destination(engines.spec("parquet", "y", partition_column="year"))
    by_year.replace_partition([{"year": 2026, "n": 1}], 2026)
    assert by_year.read_partition(2026).to_pylist() == [{"year": 2026, "n": 1}]
    with pytest.raises(SchemaError, match="column 'n' is string"):
        by_year.replace_partition([{"year": 2026, "n": "x"}], 2026)
    reopened = open_destination(f"parquet://{engines.tmp}/y")  # partition column remembered
    assert reopened.partition_column == "year" and reopened.row_count(2026) == 1


def test_bad_parquet_options(engines) -> None:
    with pytest.raises(DestinationError, match="overwrite must be"):
        open_destination(engines.spec("parquet", "ds") + "&overwrite=append")
    with pytest.raises(DestinationError, match="drop the '#"):
        open_destination(f"parquet://{engines.tmp}/ds#t")
    dest = open_destination(engines.spec("parquet", "ts", partition_column="at"))
    with pytest.raises(SchemaError, match="use a date, integer or string"):
        dest.replace_partition([{"at": __import__("datetime").datetime(2026, 1, 1), "n": 1}],
                               "2026-01-01T00:00:00")


def test_every_file_hive_readers_read_is_in_the_fingerprint(engines) -> None:
    """Found by a probe: a data file copied into a partition under another extension
    (``part-00001.snappy``) doubled the rows for Arrow datasets and Spark, and twice verify
    still said the partition matched (it read ``*.parquet`` only)."""
    import shutil

    from twice.destinations.fingerprint import fingerprint, verify

    dest = open_destination(engines.spec("parquet", "ds"))
    dest.replace_partition(rows(D1), day_interval(D1, 1))
    recorded = fingerprint(dest, D1)
    directory = engines.tmp / "ds" / "day=2026-11-28"
    [data] = [p for p in directory.iterdir() if p.suffix == ".parquet"]
    shutil.copy(data, directory / "part-00001.snappy")
    assert ds.dataset(engines.tmp / "ds", partitioning="hive").to_table().num_rows == 4
    assert dest.row_count(D1) == 4
    result = verify(dest, D1, recorded)
    assert not result.matches and "row count 2 -> 4" in result.reasons
    # twice's own records and hidden files are not data
    (directory / ".hidden").write_text("x")
    (directory / "_SUCCESS").write_text("")
    assert dest.row_count(D1) == 4
