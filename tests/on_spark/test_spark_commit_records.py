"""Commit records on Spark: written after the data (not atomic, see spark.py), fingerprint equal
to a fresh one, best-effort fencing, exactly-once append refused, unstamped append inserts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.on_spark.spark_rows import D1, D2, canonical, concat, days, rows
from twice.destinations import DestinationError, open_destination
from twice.destinations.commits import FencedWriteError, WriteStamp, stamped
from twice.destinations.fingerprint import fingerprint

BOTH = days(D1, 2)


def stamp(token: int, uow: str = "uow-a") -> WriteStamp:
    return WriteStamp(uow_id=uow, fence_key="p/t/two-days", generation=1, attempt=1,
                      token=token)


def test_stamped_replace_records_after_the_data_and_fences(spec: str) -> None:
    dest = open_destination(spec)
    assert dest.commit_records() == []
    with stamped(stamp(5)):
        result = dest.replace_partition(concat(rows(D1, range(3)), rows(D2, range(2))), BOTH)
    record = result.commit
    assert record is not None and record.token == 5 and record.mode == "replace"
    fresh = fingerprint(dest, BOTH)
    assert (record.row_count, record.checksum, record.columns) == (
        fresh.row_count, fresh.checksum, fresh.columns
    )
    assert dest.commit_records() == [record] and dest.commit_records("other") == []
    records_dir = Path(dest.warehouse) / "_twice_commits" / dest.table
    assert len(list(records_dir.glob("*.json"))) == 1
    before = canonical(dest.read_partition(BOTH))
    with pytest.raises(FencedWriteError):
        dest.replace_partition(rows(D1, range(9), tag="old"), BOTH, stamp=stamp(4, "stale"))
    assert canonical(dest.read_partition(BOTH)) == before
    unstamped = dest.replace_partition(rows(D1, range(1)), BOTH, stamp=None)
    assert unstamped.commit is None and [r.token for r in dest.commit_records()] == [5]


def test_append_unstamped_only(spec: str) -> None:
    dest = open_destination(spec)
    with pytest.raises(DestinationError, match="stamped"):
        dest.append(rows(D1, range(2)), stamp=stamp(1))
    first = dest.append(rows(D1, range(2)), partition=D1, stamp=None)
    dest.append(rows(D1, range(2, 4)), stamp=None)
    assert first.mode == "append" and first.commit is None
    assert dest.row_count(D1) == 4 and dest.commit_records() == []
