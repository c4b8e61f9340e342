"""Any dbt project runs as it is: the materialization decides each node's unit of work (issue 37).

Reported: a stock dbt-duckdb project was refused ("model customers: no event_time config");
with event_time added, a ``materialized: table`` model was rebuilt once per day and reported
as per-day slices ("1, 1, 0 rows") though it held 99 rows; a failing model showed ANSI codes
and dbt's summary line while the cause was only in a log under ``target/``.

``tests/on_dbt/shop`` is a jaffle_shop-style project written with no thought of twice: seeds,
staging views, mart tables, a source loaded by another system (no event_time), a microbatch
model and an incremental model. Real dbt-duckdb (``$TWICE_DBT_VENV``) runs it through the CLI:

- one backfill of two days runs every node (no ``--select``) and verifies each unit; the tables
  and views are built once, as whole relations recorded with whole-relation fingerprints, the
  table over the microbatch model after both of its days;
- the same command again executes nothing;
- a dropped source and a seed that breaks a dbt test: the failing model's cause is one line
  (no colour codes) in the CLI and the ledger, the rejected build is not verified, and what
  reads either is blocked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.on_dbt.test_dbt_backfill import _dbt
from twice.drivers.dbt import WHOLE_RELATION
from twice.ledger import Ledger

SHOP = Path(__file__).resolve().parent / "shop"
PIPELINE = "dbt_shop"
DAYS = ("2026-11-01", "2026-11-02")
WHOLE = ("raw_customers", "raw_orders", "stg_customers", "stg_orders", "stg_events", "orders",
         "customers", "customer_activity")
PER_DAY = ("page_events", "daily_revenue")
EVENTS = [  # the source another system loads: clicks and purchases over two days
    (1, 1, "2026-11-01 08:00:00", "purchase", 12.5),
    (2, 2, "2026-11-01 09:30:00", "view", 0.0),
    (3, 3, "2026-11-02 10:00:00", "purchase", 20.0),
    (4, 1, "2026-11-02 11:15:00", "purchase", 5.0),
    (5, 4, "2026-11-02 12:00:00", "view", 0.0),
]


class Shop:
    """A copy of the project, its DuckDB file holding the loaded source, and a ledger."""

    def __init__(self, root: Path, dbt: Path) -> None:
        self.dbt = dbt
        self.project = root / "shop"
        shutil.copytree(SHOP, self.project, ignore=shutil.ignore_patterns("target", "logs"))
        self.database = root / "shop.duckdb"
        self.ledger = root / "ledger.db"
        with duckdb.connect(str(self.database)) as conn:
            conn.execute("CREATE TABLE raw_events (event_id INTEGER, customer_id INTEGER, "
                         "event_time TIMESTAMP, kind VARCHAR, amount DOUBLE)")
            conn.executemany("INSERT INTO raw_events VALUES (?, ?, ?, ?, ?)", EVENTS)

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "TWICE_DBT": str(self.dbt), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
        return subprocess.run(
            [sys.executable, "-m", "twice", "dbt", "backfill", "--project-dir", str(self.project),
             "--duckdb", str(self.database), "--start", DAYS[0], "--end", "2026-11-03",
             "--ledger", str(self.ledger), *extra],
            env=env, capture_output=True, text=True, timeout=900)

    def backfill(self) -> dict[str, Any]:
        done = self.run("--json")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def count(self, table: str) -> int:
        with duckdb.connect(str(self.database), read_only=True) as conn:
            [(found,)] = conn.execute(f"SELECT count(*) FROM {table}").fetchall()
        return int(found)

    def attempt_folders(self) -> list[Path]:
        return sorted((self.project / "target" / "twice" / "runs").glob("*/attempt-*"))


def runs_of(result: dict[str, Any], task: str) -> list[dict[str, Any]]:
    return [run for run in result["runs"] if run["task"] == task]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> tuple[Shop, dict[str, Any]]:
    house = Shop(tmp_path_factory.mktemp("shop"), _dbt())
    return house, house.backfill()


def test_every_node_runs_once_per_its_scope_and_is_verified(
        shop: tuple[Shop, dict[str, Any]]) -> None:
    house, result = shop
    assert result["ok"] and result["counts"] == {"succeeded": len(WHOLE) + 2 * len(PER_DAY)}
    for name in WHOLE:  # once, over the whole relation, with all its rows
        [run] = runs_of(result, name)
        assert run["scope"] == "whole" and run["interval"] is None, run
        assert run["diff"]["rows_after"] == house.count(name), name
    for name in PER_DAY:  # once per day, each day's slice
        runs = runs_of(result, name)
        assert [r["interval"][:10] for r in runs] == list(DAYS), name
        assert {r["scope"] for r in runs} == {"interval"}
        assert sum(r["diff"]["rows_after"] for r in runs) == house.count(name), name
    assert runs_of(result, "orders")[0]["diff"]["rows_after"] == 6  # not a day's slice of it
    units = {u["name"]: u for u in result["dbt"]["units"]}
    assert units["orders"]["materialized"] == "table" and units["orders"]["scope"] == "whole"
    assert units["page_events"]["scope"] == "interval"

    with Ledger.open(str(house.ledger)) as ledger:
        attempts = {}
        for unit in ledger.units(pipeline=PIPELINE):
            record = ledger.latest_fingerprint(unit.destination, unit.interval.label)
            assert record is not None and record.uow_id == unit.uow_id, unit.task  # verified
            [attempts[(unit.task, unit.interval.label)]] = ledger.attempts(unit.uow_id)
            if unit.task in WHOLE:
                assert unit.interval == WHOLE_RELATION and "partition_column" not in (
                    unit.destination), unit.destination
        assert len(attempts) == len(WHOLE) + 2 * len(PER_DAY)
        # the table over the microbatch model is built after both of its days
        activity = attempts[("customer_activity", WHOLE_RELATION.label)]
        days = [a for (task, _), a in attempts.items() if task == "page_events"]
        assert all(d.finished_at is not None and d.finished_at <= activity.started_at
                   for d in days)
        # orders opted in to its dbt tests (meta: {twice: {tests: true}}): they ran and passed
        [orders] = ledger.units(pipeline=PIPELINE, task="orders")
        evidence = [o for o in ledger.observations(orders.uow_id) if o.source == "dbt"]
        tests = evidence[-1].detail["tests"]
        assert {t["status"] for t in tests} == {"pass"} and len(tests) == 3, tests
        [customers] = ledger.units(pipeline=PIPELINE, task="customers")
        evidence = [o for o in ledger.observations(customers.uow_id) if o.source == "dbt"]
        assert "tests" not in evidence[-1].detail  # not opted in, no --tests


def test_the_same_backfill_again_executes_nothing(shop: tuple[Shop, dict[str, Any]]) -> None:
    house, _ = shop
    before = house.attempt_folders()
    again = house.backfill()
    assert again["ok"] and again["counts"] == {"skipped": len(WHOLE) + 2 * len(PER_DAY)}
    assert house.attempt_folders() == before  # no dbt run at all
    # a unit's identity does not depend on the selection: orders alone is verified too
    alone = house.run("--json", "--select", "orders")
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)["counts"] == {"skipped": 1}
    assert house.attempt_folders() == before


@pytest.fixture(scope="module")
def broken(shop: tuple[Shop, dict[str, Any]]) -> tuple[Shop, subprocess.CompletedProcess[str]]:
    """The source dropped, and an order with a status the accepted_values test refuses."""
    house, _ = shop
    with duckdb.connect(str(house.database)) as conn:
        conn.execute("DROP TABLE raw_events")
    seed = house.project / "seeds" / "raw_orders.csv"
    seed.write_text(seed.read_text() + "7,2,2026-11-03,lost,900\n")
    return house, house.run()


def test_a_failing_model_shows_its_cause_in_one_line(
        broken: tuple[Shop, subprocess.CompletedProcess[str]]) -> None:
    house, done = broken
    assert done.returncode == 1, done.stdout + done.stderr
    cause = "Catalog Error: Table with name raw_events does not exist!"
    [line] = [line for line in done.stderr.splitlines() if line.startswith("failed: stg_events")]
    assert line.startswith("failed: stg_events whole relation: ") and line.endswith(cause + ")")
    assert "\x1b" not in done.stdout + done.stderr
    assert "Runtime Error in model" not in done.stderr  # dbt's heading, not the cause
    for reader, upstream in (("page_events", "stg_events"), ("daily_revenue", "page_events")):
        for day in DAYS:
            assert f"{reader}  {day}  blocked  blocked: upstream {upstream} " in done.stdout
    assert "customer_activity  whole relation  blocked" in done.stdout
    with Ledger.open(str(house.ledger)) as ledger:
        units = [u for u in ledger.units(pipeline=PIPELINE, task="stg_events")]
        messages = [e.message for u in units for e in ledger.errors(u.uow_id)]
    assert messages and messages[-1].endswith(cause) and "\n" not in messages[-1], messages


def test_a_failing_dbt_test_rejects_the_build(
        broken: tuple[Shop, subprocess.CompletedProcess[str]]) -> None:
    house, done = broken
    [line] = [line for line in done.stderr.splitlines() if line.startswith("failed: orders")]
    assert "dbt tests rejected the output of orders: accepted_values_orders_status" in line, line
    assert "customers  whole relation  blocked  blocked: upstream orders" in done.stdout
    assert "raw_orders  whole relation  succeeded" in done.stdout
    assert house.count("orders") == 7  # dbt built it; twice did not accept it
    with Ledger.open(str(house.ledger)) as ledger:
        units = ledger.units(pipeline=PIPELINE, task="orders")
        latest = ledger.latest_fingerprint(units[0].destination, WHOLE_RELATION.label)
        assert latest is not None and latest.row_count == 6  # still the accepted build's
        rejected = [u for u in units if ledger.attempts(u.uow_id)[-1].outcome != "succeeded"]
        assert [ledger.attempts(u.uow_id)[-1].outcome for u in rejected] == ["failed-permanent"]
