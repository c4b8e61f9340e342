"""What the Delta and Iceberg child processes share (imported by ``delta_child`` and
``iceberg_child``, which add their engine's kill points).

``race SPEC TOKEN NAME WAIT_FILE``: replace 2026-11-30 with rows named NAME under token TOKEN;
with a WAIT_FILE other than ``-``, pause right before the engine's commit (print ``paused``,
through the destination's ``_before_commit`` seam) until that file exists. Prints ``ok`` or
``fenced NEWER``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import date


def race(spec: str, token: int, name: str, wait_file: str) -> int:
    from twice.destinations import open_destination
    from twice.destinations.commits import FencedWriteError, WriteStamp

    dest = open_destination(spec)
    if wait_file != "-":
        def pause() -> None:
            print("paused", flush=True)
            while not os.path.exists(wait_file):
                time.sleep(0.01)

        dest._before_commit = pause  # type: ignore[attr-defined]
    day = date(2026, 11, 30)
    rows = [{"day": day, "id": i, "name": name} for i in range(5)]
    stamp = WriteStamp(f"uow-{name}", "pipe/task/2026-11-30", 1, 1, token)
    try:
        dest.replace_partition(rows, day, stamp=stamp)
    except FencedWriteError as exc:
        print(f"fenced {exc.newer_token}", flush=True)
        return 0
    print("ok", flush=True)
    return 0


def run_crash(arm: Callable[[str, str], None], spec: str, ledger: str, point: str) -> int:
    """The crash writer of tests/reliability with the kill point ``arm(spec, point)`` set up:
    the executor writes version "new" of three days."""
    from tests.reliability import crash_writer as cw

    arm(spec, point)
    result = cw.run(spec, ledger, "new")
    print("done " + ",".join(u.outcome for u in result.units), flush=True)
    return 0


def main(arm: Callable[[str, str], None],
         modes: dict[str, Callable[..., int]] | None = None) -> None:
    """``crash SPEC LEDGER POINT``, ``race ...``, or an engine's own ``modes``."""
    mode, *args = sys.argv[1:]
    if mode == "crash":
        sys.exit(run_crash(arm, args[0], args[1], args[2]))
    if mode == "race":
        sys.exit(race(args[0], int(args[1]), args[2], args[3]))
    sys.exit((modes or {})[mode](*args))
