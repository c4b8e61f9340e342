"""The pipeline of the workers benchmark (bench/bench_workers.py): I/O-bound tasks, owned writes.

``TWICE_BENCH_TASKS`` independent daily tasks (default 4), each sleeping ``TWICE_BENCH_SLEEP``
seconds (the task's own time: I/O it waits for) and returning 10 rows that twice writes to its
own PostgreSQL table at ``TWICE_BENCH_DEST`` (an owned ``replace`` write, with its commit record
and fingerprint). Every execution of a task body appends one line to a file of its process under
``TWICE_BENCH_SIDE``: the benchmark counts executions there, not in anything twice records.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa

from twice import Pipeline, Schedule, TaskContext

DEST = os.environ.get("TWICE_BENCH_DEST", "postgresql://localhost/twice_bench")
SIDE = Path(os.environ.get("TWICE_BENCH_SIDE", "."))
SLEEP = float(os.environ.get("TWICE_BENCH_SLEEP", "0.2"))
TASKS = int(os.environ.get("TWICE_BENCH_TASKS", "4"))
ROWS = 10

def _start_together() -> None:
    """With ``TWICE_BENCH_GO`` set: say this process is ready (its imports done: the command
    loads the pipeline after them), then wait for the benchmark to create the file it names,
    so every worker of a fleet starts working at the same instant."""
    go = os.environ.get("TWICE_BENCH_GO")
    if not go:
        return
    (SIDE / f"ready-{os.getpid()}").touch()
    while not os.path.exists(go):
        time.sleep(0.005)


# pyarrow imports pandas (when installed) the first time it converts a Python sequence: about
# 0.3 s of CPU, once a process. Done here, before the process says it is ready, so that each
# worker's first task body does not pay it inside the measured run: six processes paying it at
# once on two CPUs would be charged to the fleet's scaling, where it is the task's own one-time
# set-up (a single worker pays it once).
pa.array([0], pa.int64())
_start_together()

pipeline = Pipeline("bench_workers", schedule=Schedule.daily("UTC"),
                    description="I/O-bound tasks for the workers benchmark")


def _log(line: str) -> None:
    """One line, appended (O_APPEND) to this process's own file: never interleaved."""
    with open(SIDE / f"executions-{os.getpid()}.log", "a", encoding="utf-8") as out:
        out.write(line + "\n")


def _make(index: int) -> None:
    def body(ctx: TaskContext) -> pa.Table:
        began = time.time()
        _log(f"start {ctx.task_name} {ctx.interval.start.date()} {os.getpid()} {began:.6f}")
        time.sleep(SLEEP)
        day = ctx.interval.start
        table = pa.table({
            "day": pa.array([day] * ROWS, pa.timestamp("us", tz="UTC")),
            "item": pa.array(range(ROWS), pa.int64()),
            "value": pa.array([day.toordinal() * 100 + i for i in range(ROWS)], pa.int64()),
        })
        _log(f"end {ctx.task_name} {ctx.interval.start.date()} {os.getpid()} {time.time():.6f}")
        return table

    body.__name__ = body.__qualname__ = f"t{index}"
    body.__doc__ = f"Task {index}: waits {SLEEP} s, then returns {ROWS} rows."
    pipeline.task(destination=f"{DEST}?partition_column=day#public.bench_w_t{index}",
                  write="replace", safe_repeat=True)(body)


for _index in range(TASKS):
    _make(_index)
