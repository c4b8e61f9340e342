"""INSERT OVERWRITE on a real Spark session: dynamic replaces only partitions receiving rows,
static replaces exactly the named slice (clearing partitions that now have no rows), reruns
change nothing, and a table written earlier is found again from disk."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.on_spark.spark_rows import D1, D2, D3, canonical, concat, days, rows
from twice.destinations import (
    DestinationError,
    RowsOutsidePartitionError,
    SchemaError,
    open_destination,
)
from twice.destinations.fingerprint import fingerprint

ALL3 = days(D1, 3)


def seeded(spec: str) -> Any:
    dest = open_destination(spec)
    dest.replace_partition(concat(rows(D1, range(3)), rows(D2, range(4)), rows(D3, range(2))),
                           ALL3)
    return dest


def partition_dirs(dest: Any) -> set[str]:
    return {p.name for p in Path(dest.location).iterdir() if p.name.startswith("day=")}


def test_dynamic_touches_only_partitions_with_data(spec: str) -> None:
    dest = seeded(spec)
    before = {d: (canonical(dest.read_partition(d)), fingerprint(dest, d)) for d in (D1, D3)}
    new = rows(D2, range(10, 12), tag="b")
    result = dest.replace_partition(new, ALL3, overwrite="dynamic")
    assert result.partitions_written == ("day=2026-11-30",)
    assert result.partitions_removed == ()
    assert result.rows_deleted == 4 and result.rows_written == 2
    assert canonical(dest.read_partition(D2)) == canonical(new)
    for d in (D1, D3):  # no rows for them in the batch: kept as they were
        assert (canonical(dest.read_partition(d)), fingerprint(dest, d)) == before[d]


def test_dynamic_with_no_rows_leaves_the_slice_untouched(spec: str) -> None:
    dest = seeded(spec)
    before = canonical(dest.read_partition())
    result = dest.replace_partition(rows(D1, []), ALL3, overwrite="dynamic")
    assert result.rows_written == 0 and result.partitions_written == ()
    assert canonical(dest.read_partition()) == before


def test_static_replaces_exactly_one_partition(spec: str) -> None:
    dest = seeded(spec)
    others = {d: fingerprint(dest, d) for d in (D1, D3)}
    new = rows(D2, [7], tag="s")
    result = dest.replace_partition(new, D2, overwrite="static")
    assert result.mode == "static" and result.rows_deleted == 4
    assert canonical(dest.read_partition(D2)) == canonical(new)
    assert {d: fingerprint(dest, d) for d in (D1, D3)} == others


def test_static_with_no_rows_clears_the_partition(spec: str) -> None:
    dest = seeded(spec)
    others = {d: fingerprint(dest, d) for d in (D1, D3)}
    result = dest.replace_partition(rows(D2, []), D2)
    assert result.partitions_removed == ("day=2026-11-30",) and result.rows_deleted == 4
    assert dest.row_count(D2) == 0
    assert "day=2026-11-30" not in partition_dirs(dest)
    assert {d: fingerprint(dest, d) for d in (D1, D3)} == others


def test_static_interval_clears_partitions_without_rows_inside_it_only(spec: str) -> None:
    dest = seeded(spec)
    outside = fingerprint(dest, D3)
    result = dest.replace_partition(rows(D1, [1], tag="z"), days(D1, 2))
    assert result.partitions_written == ("day=2026-11-29",)
    assert result.partitions_removed == ("day=2026-11-30",)
    assert dest.row_count(days(D1, 2)) == 1
    assert fingerprint(dest, D3) == outside


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_rerun_of_an_interval_leaves_the_table_identical(spec: str, mode: str) -> None:
    batch = concat(rows(D1, range(5)), rows(D2, range(3)), rows(D3, range(1)))
    dest = open_destination(spec)
    dest.replace_partition(batch, ALL3, overwrite=mode)
    first = (canonical(dest.read_partition()), fingerprint(dest, ALL3), dest.row_count())
    again = dest.replace_partition(batch, ALL3, overwrite=mode)
    assert again.rows_deleted == batch.num_rows
    assert (canonical(dest.read_partition()), fingerprint(dest, ALL3), dest.row_count()) == first
    assert first[2] == batch.num_rows
    assert first[0] == canonical(batch.select(["id", "name", "day"]))


def test_rows_outside_the_slice_are_refused_before_anything_changes(spec: str) -> None:
    dest = seeded(spec)
    before = canonical(dest.read_partition())
    with pytest.raises(RowsOutsidePartitionError, match="outside the slice"):
        dest.replace_partition(concat(rows(D2, [1]), rows(D3, [2])), D2)
    assert canonical(dest.read_partition()) == before


def test_table_is_found_again_from_disk_by_a_fresh_catalog(spark: Any, spec: str) -> None:
    dest = seeded(spec)
    before = (canonical(dest.read_partition()), fingerprint(dest, ALL3))
    spark.sql(f"DROP TABLE {dest.table}")  # external table: the files stay, as after a restart
    assert not spark.catalog.tableExists(dest.table)
    again = open_destination(spec.replace("?partition_column=day", ""))
    assert again.partition_column == "day"  # recorded in _twice_table.json
    assert (canonical(again.read_partition()), fingerprint(again, ALL3)) == before


def test_schema_mismatch_is_refused(spec: str) -> None:
    dest = seeded(spec)
    with pytest.raises(SchemaError, match="missing columns"):
        dest.replace_partition([{"day": D1, "id": 1}], D1)


def test_upsert_is_refused_with_a_reason(spec: str) -> None:
    with pytest.raises(DestinationError, match="MERGE"):
        open_destination(spec).upsert(rows(D1, [1]))


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        ("&overwrite=sometimes", "overwrite must be"),
        ("&colour=red", "unknown options"),
        ("&table=other", "names two tables"),
    ],
)
def test_bad_spec_options_are_named(spark: Any, tmp_path: Path, suffix: str, message: str
                                    ) -> None:
    spec = f"spark://{tmp_path}/w?partition_column=day{suffix}#t_{uuid.uuid4().hex[:8]}"
    with pytest.raises(DestinationError, match=message):
        open_destination(spec)


def test_table_from_query_option_and_bad_names(spark: Any, tmp_path: Path) -> None:
    dest = open_destination(f"spark://{tmp_path}/w?partition_column=day&table=t_q")
    assert dest.spec == f"spark://{tmp_path}/w?partition_column=day#t_q"
    with pytest.raises(DestinationError, match="names no table"):
        open_destination(f"spark://{tmp_path}/w")
    with pytest.raises(DestinationError, match="table name"):
        open_destination(f"spark://{tmp_path}/w#bad-name")


def test_unsafe_partition_values_are_refused(spec: str) -> None:
    dest = open_destination(spec.replace("partition_column=day", "partition_column=name"))
    with pytest.raises(DestinationError, match="partition directory name"):
        dest.replace_partition([{"day": D1, "id": 1, "name": "../x"}], "../x")
    with pytest.raises(DestinationError, match="table"):
        dest.row_count()


def test_one_session_cannot_hold_two_tables_of_one_name(spark: Any, tmp_path: Path) -> None:
    name = f"t_{uuid.uuid4().hex[:8]}"
    first = open_destination(f"spark://{tmp_path}/a b?partition_column=day#{name}")
    first.replace_partition(rows(D1, [1]), D1)
    assert first.row_count() == 1  # a warehouse path with a space is fine
    other = open_destination(f"spark://{tmp_path}/other?partition_column=day#{name}")
    with pytest.raises(DestinationError, match="already has a table"):
        other.replace_partition(rows(D1, [1]), D1)
