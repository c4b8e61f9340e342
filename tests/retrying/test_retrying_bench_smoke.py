"""`python bench/run_all.py --quick` runs every benchmark end to end and prints its tables.

Benchmarks never assert figures; this only proves the one command works (so the published
commands in docs/benchmarks.md keep running) and that PostgreSQL columns are measured when a
server is configured.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# One line every benchmark's table must print (its baseline and its subject).
EXPECTED = {
    "decide": ["python3 -c pass", "twice decide (lab mode)", "decide() engine only"],
    "retry": ["bare call", "@twice.retry", "@tenacity.retry", "twice.retry, 1 failure"],
    "ledger": ["bare INSERT + commit", "attempt: begin+observe+finish", "bare loop (total)",
               "backfill per interval", "Executor.run per interval"],
    "writers": ["raw bulk insert", "replace (rerun)", "upsert (update all)", "pandas to_sql",
                "fingerprint / count(*)", "fingerprint at scale"],
    "unit": ["twice, no-op task: per unit", "twice, no-op task, twice worker: per unit",
             "twice, no-op task, twice airflow: per unit",
             "floor: same transactions, bare script",
             "floor, 0.2 s task: overhead per unit",
             "no-op task: local PostgreSQL server's CPU per unit",
             "goal, no-op task, every driver (ms)", "goal, 0.2 s task (ms)"],
    "workers": ["speedup", "conflicts", "extra", "cpu ms/unit"],
    "year": ["restart: time to new work", "no-op rerun of 9 units", "peak RSS, largest"],
    "restart": ["units verified, 72 new", "time to new work"],
}


def test_quick_run_of_every_benchmark() -> None:
    url = os.environ.get("TWICE_TEST_POSTGRES_URL")
    if not url and os.environ.get("CI"):
        pytest.fail("TWICE_TEST_POSTGRES_URL is unset under CI: the PostgreSQL columns of the "
                    "ledger and writer benchmarks would not be measured")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_all.py"), "--quick",
         *(["--postgres", url] if url else [])],
        capture_output=True, text=True, timeout=180, cwd=ROOT, check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    for name, lines in EXPECTED.items():
        assert f"=== {name}: python bench/" in out
        assert f"--- {name}: " in out and f"--- {name}: FAILED" not in out
        for line in lines:
            assert line in out, f"{name} table lacks {line!r}"
    assert "all benchmarks:" in out and "failed:" not in out
    if url:
        assert "postgresql: unreachable" not in out and "postgresql: failed" not in out, out
        assert "postgresql: no --postgres" not in out


def test_run_all_refuses_an_unknown_benchmark() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_all.py"), "--only", "retry,nope"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )
    assert done.returncode == 2
    assert "--only: unknown benchmark nope" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.postgres
def test_restart_bench_on_postgresql_runs_and_drops_its_databases(postgres_url: str) -> None:
    """``bench_restart.py --engine postgresql`` (docs/benchmarks.md): the same restart with a
    PostgreSQL ledger and destination, saved as template databases; a scratch place drops them."""
    import psycopg

    admin = postgres_url.rsplit("/", 1)[0] + "/postgres"

    def restart_databases() -> set[str]:
        with psycopg.connect(admin, autocommit=True) as conn:
            rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE "
                                "'twice_restart_%'").fetchall()
        return {name for (name,) in rows}

    before = restart_databases()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_restart.py"), "--engine", "postgresql",
         "--verified", "6", "--repeat", "1", "--postgres", admin],
        capture_output=True, text=True, timeout=180, cwd=ROOT, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "6 units verified, 72 new" in done.stdout and "time to new work" in done.stdout
    assert restart_databases() == before


def test_unit_ab_bench_runs_both_sides_in_turn() -> None:
    """``bench_unit_ab.py`` (docs/benchmarks.md): both sides run, each in its own process; the
    baseline's side imports twice from ``--baseline-src`` (here a copy of this checkout's
    source that marks itself, so the test sees which side imported which); ``--sleep`` runs a
    task that sleeps."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as place:
        baseline = Path(place) / "src"
        shutil.copytree(ROOT / "src", baseline, ignore=shutil.ignore_patterns("__pycache__"))
        marker = Path(place) / "imported-from-baseline"
        init = baseline / "twice" / "__init__.py"
        init.write_text(init.read_text() + f"\nopen({str(marker)!r}, 'a').write('x')\n")
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "bench_unit_ab.py"), "--baseline-src",
             str(baseline), "--engine", "sqlite", "--units", "2", "--repeat", "2",
             "--sleep", "0.01"],
            capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "before  wall median" in done.stdout and "after   wall median" in done.stdout
        assert "2 units of a 0.01 s task (its overhead)" in done.stdout
        assert marker.read_text() == "xx"  # the baseline's two runs, and only those
