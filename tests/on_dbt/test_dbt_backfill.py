"""`twice dbt backfill` on examples/dbt_project with real dbt-duckdb (a separate venv).

(a) A backfill of three days is SIGKILLed in the middle of day 2's first model (inside its
    transaction); the same command resumes it: the killed attempt is reconciled from dbt's run
    results (none: dbt ended without one, so a new job generation reruns the slice), day 1 is
    skipped as verified, and the final tables equal a clean run's row by row. Every model x day
    is in the ledger with its fingerprint and dbt's run result, and a rerun with unchanged
    inputs executes nothing.
(b) A changed source day reruns the microbatch model and its downstream model for that day
    only.

dbt runs from ``$TWICE_DBT_VENV`` (.ci/run builds it as .venv-dbt): skipped when it is not
set, a failure under CI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from twice.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "dbt_project"
DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")
MODELS = ("stg_events", "daily_totals")
PIPELINE = "dbt_twice_dbt_example"


def _dbt() -> Path:
    venv = os.environ.get("TWICE_DBT_VENV")
    dbt = Path(venv or ".venv-dbt") / "bin" / "dbt"
    if not venv or not dbt.exists():
        message = f"no dbt at {dbt} (set TWICE_DBT_VENV to a venv with dbt-duckdb)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return dbt


class Warehouse:
    """A copy of the example project, its DuckDB file (seeded) and a ledger."""

    def __init__(self, root: Path, dbt: Path) -> None:
        self.root, self.dbt = root, dbt
        self.project = root / "project"
        shutil.copytree(EXAMPLE, self.project, ignore=shutil.ignore_patterns("target", "logs"))
        self.database = root / "warehouse.duckdb"
        self.ledger = root / "ledger.db"
        seeded = subprocess.run(
            [str(dbt), "seed", "--project-dir", str(self.project), "--profiles-dir",
             str(self.project), "--quiet"], env=self.env(), capture_output=True, text=True)
        assert seeded.returncode == 0, seeded.stdout + seeded.stderr

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "TWICE_DBT": str(self.dbt), "TWICE_DBT_DUCKDB": str(self.database),
                "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", **extra}

    def command(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "twice", "dbt", "backfill", "--project-dir",
                str(self.project), "--duckdb", str(self.database), "--select", "stg_events+",
                "--start", DAYS[0], "--end", "2026-11-04", "--ledger", str(self.ledger),
                "--json", *extra]

    def backfill(self, *extra: str) -> dict[str, Any]:
        done = subprocess.run(self.command(*extra), env=self.env(), capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        with duckdb.connect(str(self.database), read_only=True) as conn:
            return conn.sql(f"SELECT * FROM {table} ORDER BY ALL").fetchall()

    def runs(self) -> list[Path]:
        return sorted((self.project / "target" / "twice" / "runs").glob("*/attempt-*"))


def statuses(result: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(r["task"], r["interval"][:10]): r["status"] for r in result["runs"]}


@pytest.fixture(scope="module")
def dbt() -> Path:
    return _dbt()


@pytest.fixture(scope="module")
def clean(dbt: Path, tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    house = Warehouse(tmp_path_factory.mktemp("clean"), dbt)
    result = house.backfill()
    assert result["ok"] and result["counts"] == {"succeeded": 6}
    assert set(result) == documented_keys(), "docs/reference/json-output.md"
    return house


def documented_keys() -> set[str]:
    from tests.cli_vocabulary.test_json_output import documented

    return documented()["twice dbt backfill --json"]


def test_killed_mid_model_then_resumed_equals_a_clean_run(
        dbt: Path, clean: Warehouse, tmp_path: Path) -> None:
    house = Warehouse(tmp_path, dbt)
    # Day 2's stg_events post-hook (inside the model's transaction) runs for minutes: kill there.
    killed = subprocess.Popen(house.command("--lease-ttl", "2"),
                              env=house.env(TWICE_DBT_EXAMPLE_SLOW_DAY=DAYS[1]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True)
    started = time.monotonic()
    output = None
    while time.monotonic() - started < 120:
        found = [p for p in house.runs() if "stg_events_20261102" in p.parent.name]
        if found and "START sql microbatch model" in (found[0] / "dbt.out").read_text(
                errors="replace"):
            output = found[0]
            break
        assert killed.poll() is None, killed.communicate()
        time.sleep(0.2)
    assert output is not None, "day 2's stg_events never started"
    time.sleep(2.0)  # the model's delete + insert are done; its post-hook is running
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert not (output / "run_results.json").exists()
    with Ledger.open(str(house.ledger)) as ledger:
        day2 = ledger.units(pipeline=PIPELINE, task="stg_events")
        outcomes = {u.interval.label[:10]: [a.outcome for a in ledger.attempts(u.uow_id)]
                    for u in day2}
    assert outcomes == {DAYS[0]: ["succeeded"], DAYS[1]: ["running"]}
    time.sleep(2.5)  # the killed run's leases expire

    resumed = house.backfill()
    assert resumed["ok"], resumed
    # One model at a time, its days in order (as dbt runs a microbatch model's batches): the
    # kill came before daily_totals' first day, so that day runs now.
    assert statuses(resumed) == {
        ("stg_events", DAYS[0]): "skipped", ("daily_totals", DAYS[0]): "succeeded",
        ("stg_events", DAYS[1]): "succeeded", ("daily_totals", DAYS[1]): "succeeded",
        ("stg_events", DAYS[2]): "succeeded", ("daily_totals", DAYS[2]): "succeeded",
    }
    settled = next(r for r in resumed["runs"]
                   if (r["task"], r["interval"][:10]) == ("stg_events", DAYS[1]))
    assert settled["reconciled"] and settled["reconciled"][0].endswith(": failed"), settled
    assert [a["outcome"] for a in settled["attempts"]] == ["failed-transient", "succeeded"]

    for table in ("stg_events", "daily_totals"):
        assert house.rows(table) == clean.rows(table), table
    assert len(house.rows("stg_events")) == 9

    # Every model x day in the ledger with its fingerprint (equal to the clean run's) and
    # dbt's run result as evidence.
    with Ledger.open(str(house.ledger)) as ledger, Ledger.open(str(clean.ledger)) as reference:
        for model in MODELS:
            units = ledger.units(pipeline=PIPELINE, task=model)
            latest = {}
            for unit in units:
                record = ledger.latest_fingerprint(unit.destination, unit.interval.label)
                assert record is not None and record.uow_id is not None
                latest[unit.interval.label[:10]] = (record.row_count, record.checksum)
            assert sorted(latest) == list(DAYS), model
            for unit in reference.units(pipeline=PIPELINE, task=model):
                record = reference.latest_fingerprint(unit.destination, unit.interval.label)
                assert record is not None
                assert latest[unit.interval.label[:10]] == (record.row_count, record.checksum)
            for unit in units:
                if ledger.attempts(unit.uow_id)[-1].outcome != "succeeded":
                    continue
                evidence = [o for o in ledger.observations(unit.uow_id) if o.source == "dbt"]
                assert evidence and evidence[-1].state == "dbt-success"
                assert evidence[-1].detail["status"] == "success"
                assert "adapter_response" in evidence[-1].detail

    # A rerun with unchanged inputs executes nothing: no dbt run, no attempt.
    before = house.runs()
    again = house.backfill()
    assert again["ok"] and again["counts"] == {"skipped": 6}, again["counts"]
    assert house.runs() == before


def test_a_changed_source_day_reruns_that_day_downstream_only(clean: Warehouse) -> None:
    before = {t: clean.rows(t) for t in MODELS}
    with duckdb.connect(str(clean.database)) as conn:
        conn.execute("UPDATE raw_events SET amount = amount + 100 "
                     "WHERE event_time >= '2026-11-02' AND event_time < '2026-11-03' "
                     "AND kind = 'purchase'")
    result = clean.backfill()
    assert result["ok"]
    ran = {key for key, status in statuses(result).items() if status == "succeeded"}
    assert ran == {("stg_events", DAYS[1]), ("daily_totals", DAYS[1])}, statuses(result)
    assert set(statuses(result).values()) == {"succeeded", "skipped"}
    after = {t: clean.rows(t) for t in MODELS}
    for table in MODELS:
        changed = set(after[table]) ^ set(before[table])
        assert changed, table
        day = 1 if table == "stg_events" else 0
        assert {str(row[day])[:10] for row in changed} == {DAYS[1]}, table
