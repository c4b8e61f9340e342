"""Several real ``twice worker`` processes on one PostgreSQL ledger: each unit runs once, and a
one-slot pool is never held by two of them at the same time."""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta
from itertools import combinations
from pathlib import Path

import pytest

from tests.workers.pipelines.twice_w_side import amounts
from tests.workers.worker_procs import PIPELINES, rows, start
from twice.define.load import load_pipeline
from twice.define.schedule import Schedule
from twice.engine.executor import identify_unit
from twice.ledger import Ledger

pytestmark = pytest.mark.postgres

FIRST = date(2026, 11, 1)
DAYS = 12


def _days(count: int) -> list[date]:
    return [FIRST + timedelta(days=offset) for offset in range(count)]


def test_three_workers_run_every_unit_exactly_once(shared_db: str, tmp_path: Path) -> None:
    end = (FIRST + timedelta(days=DAYS)).isoformat()
    fleet = [
        start("w_many.py", shared_db, shared_db, f"w{n}", "--start", FIRST.isoformat(),
              "--end", end, "--poll", "0.1",
              env={"TWICE_W_SLEEP": "0.05", "TWICE_W_BARRIER": f"{tmp_path}:3"})
        for n in range(3)
    ]
    finished = [proc.finish() for proc in fleet]
    for (code, report), proc in zip(finished, fleet, strict=True):
        assert code == 0, (proc.name, report)
        assert report["ok"] and report["stopped"] == "finished"

    expected = {(task, day) for day in _days(DAYS) for task in ("extract", "load")}
    executions = Counter(
        (task, day) for task, day in rows(shared_db, "SELECT task, day FROM w_executions")
    )
    assert set(executions) == expected
    assert all(count == 1 for count in executions.values()), executions
    # The workers' own reports agree: each unit was run by exactly one of them...
    ran = Counter(
        (unit["task"], unit["interval"]) for _, report in finished
        for unit in report["units"] if unit["settlement"] == "ran"
    )
    assert len(ran) == len(expected) and set(ran.values()) == {1}
    # ...and the work was shared (several pids executed tasks).
    pids = {pid for (pid,) in rows(shared_db, "SELECT DISTINCT pid FROM w_executions")}
    assert len(pids) >= 2, pids

    # Destination: each day's source rows exactly once, none twice, none missing.
    written = rows(shared_db, "SELECT day, account, amount FROM w_positions")
    source = [(r["day"], r["account"], r["amount"]) for day in _days(DAYS) for r in amounts(day)]
    assert Counter(written) == Counter(source)

    pipeline = load_pipeline(PIPELINES / "w_many.py")
    schedule = Schedule.daily("UTC")
    with Ledger.open(shared_db) as ledger:
        for task, day in expected:
            uow = identify_unit(pipeline, ledger, task, schedule.interval_for(day))
            assert [a.outcome for a in ledger.attempts(uow.uow_id)] == ["succeeded"]
            lease = ledger.lease(uow.uow_id)
            assert lease is not None and lease.released_at is not None


def test_one_slot_pool_is_never_held_by_two_workers(shared_db: str, tmp_path: Path) -> None:
    fleet = [
        start("w_pooled.py", shared_db, shared_db, f"p{n}", "--start", "2026-11-01",
              "--end", "2026-11-05", "--poll", "0.1",
              env={"TWICE_W_SLEEP": "0.15", "TWICE_W_BARRIER": f"{tmp_path}:3"})
        for n in range(3)
    ]
    for proc in fleet:
        code, report = proc.finish()
        assert code == 0, (proc.name, report)

    spans = rows(shared_db, "SELECT pid, task, day, started_at, ended_at FROM w_executions")
    assert len(spans) == 3 * 4  # three tasks, four days, each once
    assert all(ended is not None for *_, ended in spans)
    overlaps = [
        (a, b) for a, b in combinations(spans, 2) if a[3] < b[4] and b[3] < a[4]
    ]
    assert not overlaps, overlaps
    assert len({pid for pid, *_ in spans}) >= 2  # the pool really was contended across workers
    with Ledger.open(shared_db) as ledger:
        holdings = ledger.pool_holdings("warehouse", active_only=False)
    assert len(holdings) == len(spans)  # one ledger holding per attempt
    assert all(h.released_at is not None for h in holdings)
