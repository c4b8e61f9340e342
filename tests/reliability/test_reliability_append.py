"""Append once under kill -9, rerun at once: ``twice backfill`` of an appending pipeline
(tests/reliability/append_pipeline.py) SIGKILLed one to three times at random moments, then run
again straight away until it exits 0, on SQLite, DuckDB, Parquet and PostgreSQL.

What must hold, compared row by row with tables computed without twice: every day's events
exactly once (an append repeated after a kill is a duplicate, one lost is a gap), the rollup
equal to a summary of them, and the rerun succeeding at once (the killed process's lease is
free because its process is gone: ``twice.ledger.lease_holders``), without waiting out the
300 s default lease. Trials: 2 per engine, times ``TWICE_RELIABILITY_TRIALS``."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

import pytest

from tests.reliability import append_pipeline as pipe
from tests.reliability.conftest import record, scale
from twice.destinations import open_destination

PIPELINE = Path(pipe.__file__)
DAYS = [date(2026, 11, 1) + timedelta(days=i) for i in range(8)]
RERUNS = 3


def _command(root: Path) -> list[str]:
    return [sys.executable, "-m", "twice", "backfill", str(PIPELINE),
            "--start", DAYS[0].isoformat(), "--end", (DAYS[-1] + timedelta(days=1)).isoformat(),
            "--ledger", str(root / "ledger.db"), "--deadline", "none"]


def _rows(spec: str, columns: tuple[str, ...]) -> list[tuple[object, ...]]:
    with open_destination(spec) as dest:
        return sorted(tuple(r[c] for c in columns) for r in dest.read_partition(None).to_pylist())


def one_trial(engine: str, root: Path, postgres: str, rng: random.Random) -> dict[str, int]:
    env = {**os.environ, "APPEND_ENGINE": engine, "APPEND_ROOT": str(root),
           "APPEND_PG": postgres, "PYTHONPATH": os.pathsep.join(sys.path)}
    kills = rng.randint(1, 3)
    for _ in range(kills):
        child = subprocess.Popen(_command(root), env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 2.5))
        child.send_signal(signal.SIGKILL)
        child.wait()
    runs = []
    for _ in range(RERUNS):
        done = subprocess.run(_command(root), env=env, capture_output=True, text=True,
                              timeout=300)
        runs.append(done)
        if done.returncode == 0:
            break
    assert runs[0].returncode == 0, (  # at once: no waiting out the killed process's lease
        f"rerun after {kills} kill(s) exited {runs[0].returncode}:\n"
        f"{runs[0].stdout[-2000:]}\n{runs[0].stderr[-2000:]}")
    events = _rows(pipe.spec("events", engine, str(root), postgres), ("day", "id", "amount"))
    rollup = _rows(pipe.spec("rollup", engine, str(root), postgres), ("day", "n", "total"))
    want_events = sorted((r["day"], r["id"], r["amount"]) for d in DAYS for r in pipe.day_rows(d))
    want_rollup = sorted(tuple(pipe.rollup_row(d).values()) for d in DAYS)
    mismatches = len(set(events) ^ set(want_events)) + abs(len(events) - len(set(events)))
    mismatches += len(set(rollup) ^ set(want_rollup))
    assert events == want_events, f"events: {len(events)} rows, expected {len(want_events)}"
    assert rollup == want_rollup
    return {"trials": 1, "faults": kills, "rows_compared": len(events) + len(rollup),
            "mismatches": mismatches}


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", "parquet",
                                    pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_append_once_under_kill_nine_and_an_immediate_rerun(
        engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    create: Callable[[], str] | None = (
        request.getfixturevalue("postgres_databases") if engine == "postgresql" else None)
    rng = random.Random(f"append-{engine}")
    for number in range(2 * scale()):
        root = tmp_path / f"trial{number}"
        root.mkdir()
        figures = one_trial(engine, root, create() if create else "", rng)
        record(f"append kill -9 ({engine})", **figures)
