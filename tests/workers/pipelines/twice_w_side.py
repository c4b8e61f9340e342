"""Side effects the worker tests count: one row per execution, and the destination's rows.

Configured by environment variables, because each worker is a separate process:
``TWICE_W_DB`` (PostgreSQL database of the test), ``TWICE_W_SLEEP`` (seconds each task works),
``TWICE_W_PAUSE_BEFORE`` / ``TWICE_W_PAUSE_AFTER`` (seconds the crash task waits before / after
its destination write, so the test can kill the worker at that point), ``TWICE_W_BARRIER``
(``FOLDER:N``: each worker waits, when its pipeline loads, until N workers have loaded theirs,
so a fleet starts claiming together: on a loaded machine one worker's start-up can otherwise
outlast the whole run, and a test of shared work would see one worker do it all).
"""

from __future__ import annotations

import os
import time
from datetime import date
from typing import Any

import psycopg

from twice.define.pipeline import TaskContext
from twice.destinations import open_destination


def _barrier(spec: str, timeout: float = 120.0) -> None:
    folder, _, count = spec.rpartition(":")
    here = os.path.join(folder, str(os.getpid()))
    open(here, "w").close()
    ends = time.monotonic() + timeout
    while len(os.listdir(folder)) < int(count) and time.monotonic() < ends:
        time.sleep(0.02)


if os.environ.get("TWICE_W_BARRIER"):
    _barrier(os.environ["TWICE_W_BARRIER"])


EXECUTIONS_DDL = """
CREATE TABLE IF NOT EXISTS w_executions (
    id bigserial PRIMARY KEY,
    task text NOT NULL,
    day date NOT NULL,
    pid integer NOT NULL,
    attempt integer NOT NULL,
    job_id text,
    phase text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at timestamptz
)
"""
DESTINATION_DDL = """
CREATE TABLE IF NOT EXISTS w_positions (
    day date NOT NULL,
    account text NOT NULL,
    amount bigint NOT NULL,
    job_id text NOT NULL
)
"""
STAGING_DDL = """
CREATE TABLE IF NOT EXISTS w_staging (
    day date NOT NULL,
    account text NOT NULL,
    amount bigint NOT NULL
)
"""
ACCOUNTS = ("acc-1", "acc-2", "acc-3")


def db_url() -> str:
    return os.environ["TWICE_W_DB"]


def prepare(url: str) -> None:
    """Create the side tables before workers start (concurrent CREATE TABLE would race)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for ddl in (EXECUTIONS_DDL, DESTINATION_DDL, STAGING_DDL):
            conn.execute(ddl)


def destination(table: str) -> Any:
    return open_destination(
        f"{db_url()}?partition_column=day&key_columns=day,account#public.{table}"
    )


def begin(ctx: TaskContext) -> int:
    """Record that an execution started (in its own committed transaction)."""
    with psycopg.connect(db_url(), autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO w_executions (task, day, pid, attempt, job_id, phase) "
            "VALUES (%s, %s, %s, %s, %s, 'started') RETURNING id",
            (ctx.task_name, ctx.interval.start.date(), os.getpid(), ctx.attempt,
             ctx.job_id),
        ).fetchone()
    assert row is not None
    return int(row[0])


def mark(execution: int, phase: str) -> None:
    with psycopg.connect(db_url(), autocommit=True) as conn:
        conn.execute(
            "UPDATE w_executions SET phase = %s, "
            "ended_at = CASE WHEN %s = 'ended' THEN clock_timestamp() ELSE ended_at END "
            "WHERE id = %s",
            (phase, phase, execution),
        )


def work(variable: str = "TWICE_W_SLEEP", default: float = 0.0) -> None:
    seconds = float(os.environ.get(variable, default))
    if seconds > 0:
        time.sleep(seconds)


def amounts(day: date) -> list[dict[str, Any]]:
    """The deterministic source rows of one day."""
    return [
        {"day": day, "account": account, "amount": day.toordinal() * 10 + i}
        for i, account in enumerate(ACCOUNTS)
    ]
