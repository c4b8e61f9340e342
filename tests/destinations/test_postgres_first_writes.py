"""Concurrent first writes to a table that does not exist yet, on PostgreSQL.

Reported: 22 of 60 concurrent library writes failed with a ``pg_type`` unique violation (two
``CREATE TABLE IF NOT EXISTS`` racing) and were recorded failed-permanent. Each writer here has
its own connection, all released at once by a barrier; every write must succeed and every row
must be there exactly once.
"""

from __future__ import annotations

import threading
from datetime import date, timedelta

import pyarrow as pa

from twice.define.schedule import Schedule
from twice.destinations import open_destination

WRITERS = 12


def test_concurrent_first_writes_all_succeed(postgres_url: str) -> None:
    spec = f"{postgres_url}?partition_column=day#first_writes"
    schedule = Schedule.daily("UTC")
    days = [date(2026, 11, 1) + timedelta(days=i) for i in range(WRITERS)]
    barrier = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def write(day: date) -> None:
        rows = pa.table({"day": pa.array([day] * 3, pa.date32()),
                         "n": pa.array([1, 2, 3], pa.int64())})
        with open_destination(spec) as dest:
            dest.schema()  # connect before the barrier, so the writes really overlap
            barrier.wait()
            try:
                dest.replace_partition(rows, schedule.interval_for(day))
            except BaseException as exc:  # collected: the assertion shows them all
                errors.append(exc)

    threads = [threading.Thread(target=write, args=(day,)) for day in days]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    with open_destination(spec) as dest:
        table = dest.read_partition(None, ["day", "n"])
    got = sorted(zip(table.column("day").to_pylist(), table.column("n").to_pylist(),
                     strict=True))
    assert got == sorted((day, n) for day in days for n in (1, 2, 3))
