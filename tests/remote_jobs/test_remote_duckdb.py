"""DuckDBJobs: real DuckDB jobs in background threads, job table surviving a restart."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twice.remote import DuplicateJob, JobState, estimate_query, submit_or_inspect, wait_for_job
from twice.remote.duckdb_jobs import DuckDBJobs

SLOW = "SELECT count(*) FROM range(20000000000) t(x) WHERE x % 7 = 3"


def wait(svc: DuckDBJobs, job_id: str):
    return wait_for_job(svc, job_id, poll_interval=0.02, timeout=30)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "movements"
    for day in ("2024-12-01", "2024-12-02"):
        (root / f"business_date={day}").mkdir(parents=True)
        table = pa.table({"fund_id": [f"F{i % 3}" for i in range(300)],
                          "amount": [float(i) for i in range(300)]})
        pq.write_table(table, root / f"business_date={day}" / "part-0.parquet")
    return root


def test_job_runs_and_duplicate_id_returns_existing(tmp_path: Path, dataset: Path) -> None:
    db = tmp_path / "jobs.duckdb"
    with DuckDBJobs(db, datasets={"movements": dataset}) as svc:
        config = {"query": "SELECT fund_id, sum(amount) AS position FROM movements "
                           "WHERE business_date = '2024-12-02' GROUP BY fund_id",
                  "destination": "positions"}
        svc.submit("j1", config)
        done = wait(svc, "j1")
        assert done.succeeded and done.statistics["resultRows"] == 3
        with pytest.raises(DuplicateJob):
            svc.submit("j1", config)
        again = submit_or_inspect(svc, "j1", config)
        assert again.succeeded and again.statistics == done.statistics
        rows = svc._db.cursor().execute("SELECT count(*) FROM twice_jobs").fetchone()
        assert rows == (1,)  # one job, not two
        expected = sum(float(i) for i in range(300) if i % 3 == 0)
        got = svc._db.cursor().execute(
            "SELECT position FROM positions WHERE fund_id = 'F0'").fetchone()
        assert got == (expected,)


def test_failure_and_limit_are_done_with_error_result(tmp_path: Path, dataset: Path) -> None:
    with DuckDBJobs(tmp_path / "j.duckdb", datasets={"movements": dataset}) as svc:
        svc.submit("bad", {"query": "SELECT no_such_column FROM movements"})
        bad = wait(svc, "bad")
        assert bad.failed and bad.error_result.reason == "invalidQuery"
        estimate = estimate_query(svc, "SELECT amount FROM movements")
        assert estimate is not None and estimate.bytes > 0
        svc.submit("big", {"query": "SELECT amount FROM movements",
                           "maximum_bytes_billed": estimate.bytes - 1})
        big = wait(svc, "big")
        assert big.failed and big.error_result.reason == "bytesBilledLimitExceeded"
        svc.submit("fits", {"query": "SELECT amount FROM movements",
                            "maximum_bytes_billed": estimate.bytes})
        assert wait(svc, "fits").succeeded


def test_cancel_is_a_request_then_poll(tmp_path: Path) -> None:
    with DuckDBJobs(tmp_path / "j.duckdb") as svc:
        svc.submit("slow", {"query": SLOW})
        deadline = time.monotonic() + 10
        while svc.get("slow").state is not JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        answered = svc.cancel("slow")
        assert answered.state in (JobState.RUNNING, JobState.DONE)
        final = wait(svc, "slow")
        assert final.failed and final.error_result.reason == "stopped"
        svc.submit("quick", {"query": "SELECT 1"})
        assert wait(svc, "quick").succeeded
        late = svc.cancel("quick")  # too late: the job already finished
        assert late.succeeded


def test_status_survives_a_restart_and_a_killed_process(tmp_path: Path) -> None:
    db = tmp_path / "jobs.duckdb"
    with DuckDBJobs(db) as svc:
        svc.submit("finished", {"query": "SELECT 42 AS x", "destination": "answer"})
        assert wait(svc, "finished").succeeded
    child = textwrap.dedent(f"""
        import os, time
        from twice.remote.duckdb_jobs import DuckDBJobs
        svc = DuckDBJobs({str(db)!r})
        svc.submit("orphan", {{"query": {SLOW!r}, "destination": "never"}})
        while svc.get("orphan").state.value != "RUNNING":
            time.sleep(0.01)
        print("running", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "running"
    finally:
        proc.kill()
        proc.wait(10)
    with DuckDBJobs(db) as svc:
        assert svc.get("finished").succeeded
        orphan = svc.get("orphan")
        assert orphan.failed and orphan.error_result.reason == "backendError"
        tables = {r[0] for r in svc._db.cursor().execute("SHOW TABLES").fetchall()}
        assert "answer" in tables and "never" not in tables  # nothing of the orphan committed


def test_bad_config_names_the_field(tmp_path: Path) -> None:
    with DuckDBJobs(tmp_path / "j.duckdb") as svc:
        with pytest.raises(ValueError, match=r"config\.query"):
            svc.submit("x", {})
        with pytest.raises(ValueError, match=r"config\.maximum_bytes_billed"):
            svc.submit("x", {"query": "SELECT 1", "maximum_bytes_billed": 0})
    assert duckdb.connect(str(tmp_path / "j.duckdb")).execute(
        "SELECT count(*) FROM twice_jobs").fetchone() == (0,)
