"""Real Apache Airflow 3.3: `airflow dags test` on SQLite metadata, the ledger on PostgreSQL.

One Airflow home per module (``airflow db migrate`` once), then in order:

(a) the DAG's ``extract`` task writes its partition and fails transiently on twice attempt 1 (a
    lost acknowledgement after the write); Airflow retries it; the ledger shows attempt 1
    failed-transient and attempt 2 succeeded in ONE twice run, one attempt per Airflow try, and
    the destination holds each row once;
(b) ``airflow dags test`` again for the same interval leaves the destination file byte-for-byte
    unchanged, and the ledger shows it (no new attempt, fingerprint v2 equal to v1);
(c) a DAG on Airflow 3's default ``schedule="@daily"`` (zero-width data interval) is refused.

Airflow runs from ``$TWICE_AIRFLOW_VENV`` (fallback /work/venvs/airflow): skipped when absent
locally, a failure under CI.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from twice.define.load import load_pipeline
from twice.drivers.airflow import pool_commands
from twice.engine.evidence import RUN_STARTED
from twice.ledger import Ledger

pytestmark = pytest.mark.postgres

PIPELINE_FILE = Path(__file__).with_name("pipeline_airflow_demo.py")
DAG_ID = "twice_af_demo"
TRIGGER_DAG_ID = "twice_af_trigger"
LOGICAL_DATE = "2026-11-05"
DAY = date(2026, 11, 4)  # the daily interval Airflow gives a manual run on 2026-11-05
DAG_FILE = f'''
from datetime import datetime, timezone

from airflow.sdk import DAG

from twice.drivers.airflow import TwiceTaskOperator, to_dag
from twice.define.load import load_pipeline

PIPELINE = {str(PIPELINE_FILE)!r}
dag = to_dag(PIPELINE, dag_id={DAG_ID!r})  # ledger from $TWICE_LEDGER on the workers

with DAG({TRIGGER_DAG_ID!r}, schedule="@daily", catchup=False,
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as trigger_dag:
    TwiceTaskOperator(task_id="extract", pipeline=load_pipeline(PIPELINE), twice_task="extract",
                      retries=2)
'''
INSPECT = '''
import json, runpy, sys
ns = runpy.run_path(sys.argv[1])
dag = ns["dag"]
print(json.dumps({
    "timetable": type(dag.timetable).__name__,
    "tasks": {t.task_id: {
        "upstream": sorted(t.upstream_task_ids), "retries": t.retries,
        "retry_delay": t.retry_delay.total_seconds(),
        "retry_exponential_backoff": t.retry_exponential_backoff,
        "pool": t.pool, "pool_slots": t.pool_slots,
        "execution_timeout": t.execution_timeout and t.execution_timeout.total_seconds(),
        "doc": t.doc_md} for t in dag.tasks}}))
'''


def _absent(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@dataclass
class AirflowHome:
    """An Airflow installation in a temporary folder, and the twice side of it."""

    bin: Path
    env: dict[str, str]
    home: Path
    data: Path
    dag_file: Path
    ledger_url: str

    def airflow(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "airflow"), *args], env=self.env, text=True,
                              capture_output=True, timeout=timeout, cwd=self.home)

    def metadata(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.home / "airflow.db") as conn:
            return conn.execute(sql).fetchall()

    def warehouse(self) -> dict[str, list[tuple[Any, ...]]]:
        with sqlite3.connect(self.data / "warehouse.db") as conn:
            return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                    for table in ("positions", "totals")}

    def warehouse_sha256(self) -> str:
        return hashlib.sha256((self.data / "warehouse.db").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def postgres_ledger() -> Iterator[str]:
    """A fresh PostgreSQL database for this module's ledger, dropped afterwards."""
    import psycopg

    admin = os.environ.get("TWICE_TEST_POSTGRES_URL")
    if not admin:
        _absent("TWICE_TEST_POSTGRES_URL is not set (PostgreSQL ledger for the Airflow tests)")
    name = f"twice_af_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        _absent(f"PostgreSQL not reachable at TWICE_TEST_POSTGRES_URL: {exc}")
    base, _, _ = (admin or "").rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory,
                 postgres_ledger: str) -> AirflowHome:
    venv = Path(os.environ.get("TWICE_AIRFLOW_VENV") or "/work/venvs/airflow")
    if not (venv / "bin" / "airflow").exists():
        _absent(f"no Airflow at {venv}/bin/airflow (set TWICE_AIRFLOW_VENV)")
    root = tmp_path_factory.mktemp("airflow")
    home, dags, data = root / "home", root / "dags", root / "data"
    for folder in (home, dags, data):
        folder.mkdir()
    dag_file = dags / "twice_dags.py"
    dag_file.write_text(DAG_FILE)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "TWICE_LEDGER": postgres_ledger,
        "TWICE_AF_DIR": str(data),
        "TWICE_AF_FAIL_ATTEMPTS": "1",
    }
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)  # SQLite metadata in AIRFLOW_HOME
    installed = AirflowHome(venv / "bin", env, home, data, dag_file, postgres_ledger)
    migrated = installed.airflow("db", "migrate")
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    return installed


@pytest.fixture(scope="module")
def first_run(airflow_home: AirflowHome) -> subprocess.CompletedProcess[str]:
    run = airflow_home.airflow("dags", "test", DAG_ID, LOGICAL_DATE)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return run


def _units(url: str) -> dict[str, Any]:
    with Ledger.open(url) as ledger:
        found = {}
        for unit in ledger.units(pipeline="af_demo"):
            found[unit.task] = {
                "uow_id": unit.uow_id,
                "attempts": [(a.number, a.outcome, a.holder) for a in ledger.attempts(unit.uow_id)],
                "runs": sum(o.state == RUN_STARTED for o in ledger.observations(unit.uow_id)),
            }
        prints = {(f.destination.rsplit("#", 1)[-1], f.version): (f.row_count, f.checksum)
                  for f in ledger.latest_fingerprints()
                  for f in ledger.fingerprints(f.destination, f.partition)}
    return {"units": found, "fingerprints": prints}


def test_dag_structure_follows_the_pipeline(airflow_home: AirflowHome) -> None:
    out = subprocess.run([str(airflow_home.bin / "python"), "-c", INSPECT,
                          str(airflow_home.dag_file)], env=airflow_home.env, text=True,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    dag = json.loads(out.stdout.strip().splitlines()[-1])
    pipeline = load_pipeline(PIPELINE_FILE)
    assert dag["timetable"] == "CronDataIntervalTimetable"  # never the zero-width default
    assert set(dag["tasks"]) == set(pipeline.tasks)
    for name, task in pipeline.tasks.items():
        got = dag["tasks"][name]
        assert got["upstream"] == sorted(task.depends_on)
        assert got["retries"] == task.retry.max_attempts - 1
        assert got["retry_delay"] == pytest.approx(task.retry.initial_delay)
        assert got["pool_slots"] == task.slots
        assert got["pool"] == (task.pool or "default_pool")
        assert f"{task.retry.max_attempts} execution(s)" in got["doc"]
    # the pool commands describe prints are valid for this Airflow
    for command in pool_commands(pipeline):
        argv = shlex.split(command)
        done = airflow_home.airflow(*argv[1:])
        assert done.returncode == 0, done.stderr[-2000:]
    listed = airflow_home.airflow("pools", "get", "positions_db", "--output", "json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    pool = json.loads(listed.stdout)[0]
    assert pool["slots"] in (2, "2")
    # a deferred task keeps its slots: the pool stands for the dependency's capacity
    assert pool["include_deferred"] in (True, "True", "true"), pool


def test_a_transient_failure_then_success_in_one_run(
    airflow_home: AirflowHome, first_run: subprocess.CompletedProcess[str]
) -> None:
    ledger = _units(airflow_home.ledger_url)["units"]
    extract = ledger["extract"]
    assert [(n, outcome) for n, outcome, _ in extract["attempts"]] == [
        (1, "failed-transient"), (2, "succeeded")
    ]
    assert extract["runs"] == 1  # Airflow's second try continued the same twice run
    holders = [holder for _, _, holder in extract["attempts"]]
    assert [h.rsplit(":", 1)[-1] for h in holders] == ["try-1", "try-2"]
    assert len({h.rsplit(":", 1)[0] for h in holders}) == 1  # same DAG run, same task
    # Airflow's own count agrees: two tries of extract, one of load, both succeeded
    tries = dict(airflow_home.metadata(
        f"SELECT task_id, try_number FROM task_instance WHERE dag_id = '{DAG_ID}' "
        "AND state = 'success'"
    ))
    assert tries == {"extract": len(extract["attempts"]), "load": len(ledger["load"]["attempts"])}
    assert [outcome for _, outcome, _ in ledger["load"]["attempts"]] == ["succeeded"]
    # attempt 1 wrote and then failed; attempt 2 replaced the partition: every row once
    expected = [(i, DAY.isoformat(), 10 * i + DAY.day) for i in range(5)]
    rows = airflow_home.warehouse()
    assert [(r[0], str(r[1])[:10], r[2]) for r in rows["positions"]] == expected
    assert [(str(r[0])[:10], r[1], r[2]) for r in rows["totals"]] == [
        (DAY.isoformat(), sum(amount for _, _, amount in expected), len(expected))
    ]


def test_b_rerun_of_the_interval_leaves_the_destination_unchanged(
    airflow_home: AirflowHome, first_run: subprocess.CompletedProcess[str]
) -> None:
    before_rows, before_sha = airflow_home.warehouse(), airflow_home.warehouse_sha256()
    before = _units(airflow_home.ledger_url)
    rerun = airflow_home.airflow("dags", "test", DAG_ID, LOGICAL_DATE)
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-4000:]
    assert "already succeeded earlier: not run again" in rerun.stdout + rerun.stderr
    assert airflow_home.warehouse_sha256() == before_sha  # byte for byte
    assert airflow_home.warehouse() == before_rows
    after = _units(airflow_home.ledger_url)
    for task in ("extract", "load"):
        assert after["units"][task]["attempts"] == before["units"][task]["attempts"]
    for table in ("positions", "totals"):  # verified once, before the first success
        assert (table, 1) in before["fingerprints"]
        assert after["fingerprints"] == before["fingerprints"]
    succeeded = airflow_home.metadata(
        f"SELECT count(*) FROM dag_run WHERE dag_id = '{DAG_ID}' AND state = 'success'"
    )
    assert succeeded[0][0] >= 1


def test_c_airflow_default_zero_width_interval_is_refused(airflow_home: AirflowHome) -> None:
    run = airflow_home.airflow("dags", "test", TRIGGER_DAG_ID, LOGICAL_DATE)
    text = run.stdout + run.stderr
    assert "zero-width" in text and "data_interval_start == data_interval_end" in text, text[-4000:]
    states = airflow_home.metadata(
        f"SELECT state, try_number FROM task_instance WHERE dag_id = '{TRIGGER_DAG_ID}'"
    )
    assert states == [("failed", 1)]  # AirflowFailException: no retry
