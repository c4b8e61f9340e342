"""The pipeline file the concurrency suite starts in several ``twice run`` processes at once.

On import each process announces itself (``ready/<pid>``) and then waits for the test's
``go`` file, so all of them reach the lease at the same moment rather than one by one as
their interpreters happen to start. The tasks append (never replace) their rows to a plain
SQLite table and a line to an execution log: a second execution of any unit would show up
as duplicate rows and a second log line, so nothing but twice's lease prevents duplicates.

Configured by ``TWICE_RACE_DIR`` (the shared folder of one trial), ``TWICE_RACE_ROWS`` and
``TWICE_RACE_WORK_SECONDS``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule

ROOT = Path(os.environ["TWICE_RACE_DIR"])
ROWS_PER_UNIT = int(os.environ.get("TWICE_RACE_ROWS", "5"))
WORK_SECONDS = float(os.environ.get("TWICE_RACE_WORK_SECONDS", "0.5"))


def _barrier() -> None:
    ready = ROOT / "ready"
    ready.mkdir(exist_ok=True)
    (ready / str(os.getpid())).touch()
    go = ROOT / "go"
    give_up = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > give_up:
            raise SystemExit("race_pipeline: no go file after 60 s")
        time.sleep(0.002)


_barrier()

pipeline = Pipeline("race", schedule=Schedule.daily("UTC"))


def _execute(ctx: TaskContext, task: str) -> int:
    """Do the unit's work once: log it, take a while, append its rows."""
    line = f"{task} {ctx.interval.label} {os.getpid()}\n"
    with (ROOT / "executions.log").open("a", encoding="utf-8") as log:
        log.write(line)
    time.sleep(WORK_SECONDS)
    with sqlite3.connect(ROOT / "warehouse.db", timeout=30) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS rows "
                     "(task TEXT, day TEXT, n INTEGER, pid INTEGER)")
        conn.executemany(
            "INSERT INTO rows VALUES (?, ?, ?, ?)",
            [(task, ctx.interval.label, n, os.getpid()) for n in range(ROWS_PER_UNIT)],
        )
    return ROWS_PER_UNIT


@pipeline.task(timeout=30)
def extract(ctx: TaskContext) -> int:
    return _execute(ctx, "extract")


@pipeline.task(depends_on=[extract], timeout=30)
def load(ctx: TaskContext) -> int:
    return _execute(ctx, "load")
