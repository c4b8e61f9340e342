"""Child processes of the Delta crash and race tests (run as a script, never collected).

``crash SPEC LEDGER POINT``: the crash writer of tests/reliability (``crash_writer.run``: the
executor writes version "new" of three days) with ONE kill point armed. At a named point the
child prints ``at:POINT`` and sleeps until the parent's SIGKILL; the points wrap methods that
exist already (this process only):

* ``before-commit``: the fence is checked and the record made, delta-rs has written nothing
  (``DeltaDestination._before_commit``);
* ``after-commit``: the Delta commit returned, twice not yet (``_after_commit``);
* ``before-ledger-commit`` / ``after-ledger-commit``: around ``Ledger.finish_attempt``.

``files-written`` is not a method: a watcher thread SIGKILLs the child itself the moment a new
data file appears in the table directory, i.e. while delta-rs is between writing the data and
putting the commit into ``_delta_log`` (or just after: the race is the point of the trial).

``race ...``: see tests/reliability/table_format_child.py (the pause is before the Delta
commit).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def watch_for_data_files(root: Path) -> None:
    """SIGKILL this process as soon as a data file that was not there appears under ``root``."""
    before = {p.name for p in root.glob("*.parquet")}

    def watch() -> None:
        while True:
            if {p.name for p in root.glob("*.parquet")} - before:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def arm(spec: str, point: str) -> None:
    from tests.reliability import crash_writer as cw

    from twice.destinations.delta import DeltaDestination
    from twice.ledger import Ledger

    if point == "files-written":
        watch_for_data_files(Path(spec.removeprefix("delta://").split("?")[0]))
        return
    cw._ARMED[point] = 1
    where = {
        "before-commit": (DeltaDestination, "_before_commit", "before"),
        "after-commit": (DeltaDestination, "_after_commit", "before"),
        "before-ledger-commit": (Ledger, "finish_attempt", "before"),
        "after-ledger-commit": (Ledger, "finish_attempt", "after"),
    }
    owner, name, when = where[point]
    cw._around(owner, name, **{when: point})


def direct(spec: str, rows: int) -> int:
    """One stamped replace of 2026-11-30 (``rows`` rows named "new", unit ``uow-new``), killed
    by the watcher once its data file is on disk."""
    import pyarrow as pa

    from twice.destinations import open_destination
    from twice.destinations.commits import WriteStamp

    dest = open_destination(spec)
    watch_for_data_files(Path(spec.removeprefix("delta://").split("?")[0]))
    day = date(2026, 11, 30)
    table = pa.table({"day": pa.array([day] * rows, pa.date32()),
                      "id": pa.array(range(rows), pa.int64()), "name": ["new"] * rows})
    dest.replace_partition(table, day, stamp=WriteStamp("uow-new", "pipe/task/2026-11-30",
                                                        1, 1, 9))
    print("committed", flush=True)
    return 0


if __name__ == "__main__":
    from tests.reliability.table_format_child import main

    main(arm, {"direct": lambda spec, rows: direct(spec, int(rows))})
