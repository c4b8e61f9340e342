"""``twice_commits`` is indexed for the reads every owned write makes, also when an earlier
release created it.

Found by the year of hourly units on PostgreSQL (``bench/bench_year.py``): the per-unit time of a
backfill grew with the range, 24 ms a unit at a month and 48 ms at a year. Every owned write
reads its table's ledger owner (the newest adoption, else the first record naming a ledger,
``SqlDestination._ledger_owner``), and with only the fence's index each read scanned all of the
table's records. ``COMMIT_INDEXES`` makes each a walk of a few index entries.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.destinations import postgres as pg_module
from twice.destinations.base import COMMIT_INDEXES
from twice.destinations.commits import WriteStamp

SCHEDULE = Schedule.daily("UTC")
NEW = sorted(set(COMMIT_INDEXES) - {"twice_commits_fence_ix"})


def _write(spec: str, day: date, token: int) -> None:
    rows = pa.table({"day": pa.array([day] * 2, pa.date32()), "n": pa.array([1, 2], pa.int64())})
    interval = SCHEDULE.interval_for(day)
    stamp = WriteStamp(uow_id=f"u{token}", fence_key=f"f/{day}", generation=1, attempt=1,
                       token=token, input_version="v1", ledger="L1", ledger_at="sqlite:///l")
    with open_destination(spec) as dest:
        dest.replace_partition(rows, interval, stamp=stamp)


def _pg_indexes(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'twice_commits'")
        return {name for (name,) in found.fetchall()}


def test_a_new_commits_table_has_every_index_on_sqlite(tmp_path: Path) -> None:
    import sqlite3

    _write(f"sqlite:///{tmp_path / 'wh.db'}?partition_column=day#t", date(2026, 11, 1), 1)
    with sqlite3.connect(tmp_path / "wh.db") as conn:
        names = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'twice_commits'")}
    assert set(COMMIT_INDEXES) <= names


def test_an_earlier_releases_commits_table_gets_the_indexes_on_postgres(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = f"{postgres_url}?partition_column=day#t"
    _write(spec, date(2026, 11, 1), 1)
    assert set(COMMIT_INDEXES) <= _pg_indexes(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as an earlier release left it
        for name in NEW:
            conn.execute(f'DROP INDEX "{name}"')
    assert not set(NEW) & _pg_indexes(postgres_url)
    monkeypatch.setattr(pg_module, "_COMMITS_INDEXED", set())  # a new process
    for n in range(3):
        _write(spec, date(2026, 11, 2) + timedelta(days=n), 2 + n)
    assert set(COMMIT_INDEXES) <= _pg_indexes(postgres_url)
