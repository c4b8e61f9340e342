"""Several first writes into a fresh embedded Iceberg warehouse at once.

Found by issue 39: the first `twice run` of three Iceberg tasks into a fresh warehouse failed
1-2 units failed-permanent in 6 of 9 tries, "table iceberg_tables already exists": each
writer's pyiceberg ``SqlCatalog`` created the embedded catalog's tables at the same moment.
Creating the embedded catalog is now serialised on a lock file in the warehouse.
"""

from __future__ import annotations

import threading
from datetime import date
from pathlib import Path

import pyarrow as pa

from twice.core.interval import Interval
from twice.define.schedule import Schedule
from twice.destinations import open_destination

WRITERS = 4
TRIALS = 6


def _day() -> Interval:
    return Schedule.daily("UTC").interval_for(date(2026, 11, 1))


def test_first_writes_of_several_tables_into_a_fresh_warehouse_all_land(tmp_path: Path) -> None:
    for trial in range(TRIALS):
        warehouse = tmp_path / f"wh{trial}"
        start = threading.Barrier(WRITERS)
        errors: list[BaseException] = []

        def write(k: int, warehouse: Path = warehouse, start: threading.Barrier = start,
                  errors: list[BaseException] = errors) -> None:
            spec = f"iceberg://{warehouse}?partition_column=day#ns.t{k}"
            rows = pa.table({"day": pa.array([date(2026, 11, 1)], pa.date32()), "k": [k]})
            try:
                start.wait()
                with open_destination(spec) as dest:
                    dest.replace_partition(rows, _day(), stamp=None)
            except BaseException as exc:  # collected: the assertion names them all
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(k,)) for k in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, f"trial {trial}: {[f'{type(e).__name__}: {e}' for e in errors]}"
        for k in range(WRITERS):
            with open_destination(f"iceberg://{warehouse}?partition_column=day#ns.t{k}") as dest:
                assert dest.read_partition(_day()).column("k").to_pylist() == [k]
