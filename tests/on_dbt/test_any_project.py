"""Any dbt project runs as it is: the materialization decides each node's unit of work (issue 37).

Reported: a stock dbt-duckdb project was refused ("model customers: no event_time config");
with event_time added, a ``materialized: table`` model was rebuilt once per day and reported
as per-day slices ("1, 1, 0 rows") though it held 99 rows; a failing model showed ANSI codes
and dbt's summary line while the cause was only in a log under ``target/``.

``tests/on_dbt/shop`` is a jaffle_shop-style project written with no thought of twice: seeds,
staging views, an ephemeral intermediate model, mart tables, a source loaded by another system
(no event_time), a microbatch model, an incremental model and a snapshot (dbt's YAML snapshot,
strategy ``check``). Real dbt-duckdb (``$TWICE_DBT_VENV``) runs it through the CLI:

- one backfill of two days runs every node (no ``--select``) and verifies each unit; the tables,
  views, seeds and the snapshot are built once, as whole relations recorded with whole-relation
  fingerprints, the table over the microbatch model after both of its days; the ephemeral model
  is no unit (no run, no ledger entry, no relation): its SQL is part of the table that reads
  it, whose rows are those computed here from the seed files;
- the same command again executes nothing;
- an edit of the ephemeral model is an edit of its reader: the next backfill rebuilds that
  table alone, with the new rows;
- a customer renamed in the seed: twice keys the snapshot's unit by its definition and the
  whole-relation fingerprint of what it reads (``stg_customers``), so the changed upstream is a
  new unit, which runs ``dbt snapshot`` once and the snapshot records the change (the old
  version closed, the new one current). Put back as it was, the upstream names the first
  unit again; twice runs it again because another unit wrote the snapshot since (its slot was
  overwritten), so the snapshot records that change too; a third backfill executes nothing. An
  unchanged upstream never runs the snapshot (nothing for it to record);
- a dropped source and a seed that breaks a dbt test: the failing model's cause is one line
  (no colour codes) in the CLI and the ledger, the rejected build is not verified, and what
  reads either is blocked.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import date
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
         "customers", "customer_activity", "customer_revenue", "customers_snapshot")
EPHEMERAL = "int_order_totals"  # read by customer_revenue
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

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        with duckdb.connect(str(self.database), read_only=True) as conn:
            return conn.execute(query).fetchall()

    def seed(self, name: str) -> list[dict[str, str]]:
        with open(self.project / "seeds" / f"{name}.csv", newline="") as seed:
            return list(csv.DictReader(seed))

    def revenue(self) -> list[tuple[Any, ...]]:
        return self.rows("SELECT customer_id, first_name, orders, round(revenue, 2), last_order "
                         "FROM customer_revenue ORDER BY customer_id")

    def expected_revenue(self, counted: Callable[[str], bool]) -> list[tuple[Any, ...]]:
        """customer_revenue computed here from the seed files: each customer's orders whose
        status is ``counted``, amounts in cents."""
        orders = [o for o in self.seed("raw_orders") if counted(o["status"])]
        found = []
        for customer in self.seed("raw_customers"):
            mine = [o for o in orders if o["user_id"] == customer["id"]]
            found.append((int(customer["id"]), customer["first_name"], len(mine),
                          round(sum(int(o["amount"]) for o in mine) / 100, 2),
                          max((date.fromisoformat(o["order_date"]) for o in mine), default=None)))
        return sorted(found)

    def snapshot(self) -> list[tuple[Any, ...]]:
        """The snapshot's versions: customer, names, and whether the version is current."""
        return self.rows("SELECT customer_id, first_name, last_name, dbt_valid_to IS NULL "
                         "FROM customers_snapshot ORDER BY customer_id, dbt_valid_from")

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
    assert units["customers_snapshot"] == {"name": "customers_snapshot", "scope": "whole",
                                           "resource_type": "snapshot", "materialized": "snapshot"}
    # the ephemeral model is selected (dbt ls names it) but is no unit: no run, no relation
    assert EPHEMERAL in result["dbt"]["selected"] and EPHEMERAL not in units
    assert not runs_of(result, EPHEMERAL)
    assert not house.rows(f"SELECT 1 FROM information_schema.tables WHERE table_name = "
                          f"'{EPHEMERAL}'")
    # its SQL is part of customer_revenue, whose rows are those the seed files give
    assert house.revenue() == house.expected_revenue(lambda status: status != "returned")
    assert house.revenue()[1] == (2, "Shawn", 0, 0.0, None)  # only a returned order
    # the snapshot holds one current version of each customer
    assert house.snapshot() == [(int(c["id"]), c["first_name"], c["last_name"], True)
                                for c in house.seed("raw_customers")]

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
        assert not ledger.units(pipeline=PIPELINE, task=EPHEMERAL)
        # the snapshot runs `dbt snapshot`, after the view it reads
        [snapshot] = ledger.units(pipeline=PIPELINE, task="customers_snapshot")
        evidence = [o for o in ledger.observations(snapshot.uow_id) if o.source == "dbt"]
        assert " snapshot --select customers_snapshot " in evidence[-1].detail["command"]
        staged = attempts[("stg_customers", WHOLE_RELATION.label)]
        assert staged.finished_at is not None and staged.finished_at <= attempts[
            ("customers_snapshot", WHOLE_RELATION.label)].started_at
        record = ledger.latest_fingerprint(snapshot.destination, WHOLE_RELATION.label)
        assert record is not None and record.row_count == 4 and record.version == 1
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


INT_ORDER_TOTALS = "models/intermediate/int_order_totals.sql"


@pytest.fixture(scope="module")
def edited(shop: tuple[Shop, dict[str, Any]]) -> tuple[Shop, dict[str, Any]]:
    """The ephemeral model now counts only orders that shipped or completed."""
    house, _ = shop
    path = house.project / INT_ORDER_TOTALS
    text = path.read_text()
    assert "where status != 'returned'" in text
    path.write_text(text.replace("where status != 'returned'",
                                 "where status in ('shipped', 'completed')"))
    return house, house.backfill()


def test_an_edited_ephemeral_model_rebuilds_its_reader(
        edited: tuple[Shop, dict[str, Any]]) -> None:
    house, result = edited
    ran = {run["task"] for run in result["runs"] if run["status"] == "succeeded"}
    assert ran == {"customer_revenue"}, result["counts"]
    assert result["counts"] == {"succeeded": 1, "skipped": len(WHOLE) + 2 * len(PER_DAY) - 1}
    assert house.revenue() == house.expected_revenue(lambda s: s in ("shipped", "completed"))
    assert house.revenue()[3] == (4, "Jimmy", 0, 0.0, None)  # only a placed order now
    with Ledger.open(str(house.ledger)) as ledger:
        assert not ledger.units(pipeline=PIPELINE, task=EPHEMERAL)
        units = ledger.units(pipeline=PIPELINE, task="customer_revenue")
        assert len({u.transform_version for u in units}) == 2  # the edit is its definition's
        latest = ledger.latest_fingerprint(units[0].destination, WHOLE_RELATION.label)
        assert latest is not None and latest.version == 2


def _renamed(house: Shop, before: str, after: str) -> dict[str, Any]:
    seed = house.project / "seeds" / "raw_customers.csv"
    text = seed.read_text()
    assert before in text
    seed.write_text(text.replace(before, after))
    return house.backfill()


#: What reads raw_customers: each rebuilt when a customer is renamed, the rest skipped.
CUSTOMER_NODES = {"raw_customers", "stg_customers", "customers", "customer_activity",
                  "customer_revenue", "customers_snapshot"}


@pytest.fixture(scope="module")
def renamed(edited: tuple[Shop, dict[str, Any]]
            ) -> tuple[Shop, list[dict[str, Any]], list[list[tuple[Any, ...]]]]:
    """Kathleen P. renamed Kathleen Q. in the seed, then put back, then the same again: each
    backfill's result and the snapshot's rows after it."""
    house, _ = edited
    results, snapshots = [], []
    for change in (("3,Kathleen,P.", "3,Kathleen,Q."), ("3,Kathleen,Q.", "3,Kathleen,P."), None):
        results.append(house.backfill() if change is None else _renamed(house, *change))
        snapshots.append(house.snapshot())
    return house, results, snapshots


def test_a_snapshot_records_a_changed_upstream_row(
        renamed: tuple[Shop, list[dict[str, Any]], list[list[tuple[Any, ...]]]]) -> None:
    house, [changed, back, again], [after_change, after_back, after_again] = renamed
    total = len(WHOLE) + 2 * len(PER_DAY)
    for result in (changed, back):  # what reads the seed runs, once; the rest is verified
        ran = {run["task"] for run in result["runs"] if run["status"] == "succeeded"}
        assert ran == CUSTOMER_NODES, result["counts"]
        assert result["counts"] == {"succeeded": len(CUSTOMER_NODES),
                                    "skipped": total - len(CUSTOMER_NODES)}
    [first] = runs_of(changed, "customers_snapshot")
    assert first["scope"] == "whole" and first["interval"] is None
    assert (first["diff"]["rows_before"], first["diff"]["rows_after"]) == (4, 5)
    assert after_change == [(1, "Michael", "P.", True), (2, "Shawn", "M.", True),
                            (3, "Kathleen", "P.", False), (3, "Kathleen", "Q.", True),
                            (4, "Jimmy", "C.", True)]
    [second] = runs_of(back, "customers_snapshot")
    assert (second["diff"]["rows_before"], second["diff"]["rows_after"]) == (5, 6)
    assert after_back == [(1, "Michael", "P.", True), (2, "Shawn", "M.", True),
                          (3, "Kathleen", "P.", False), (3, "Kathleen", "Q.", False),
                          (3, "Kathleen", "P.", True), (4, "Jimmy", "C.", True)]
    assert again["counts"] == {"skipped": total} and after_again == after_back
    with Ledger.open(str(house.ledger)) as ledger:
        units = ledger.units(pipeline=PIPELINE, task="customers_snapshot")
        assert len(units) == 2  # the seed as it was, and renamed
        records = ledger.fingerprints(units[0].destination, WHOLE_RELATION.label)
        assert [r.row_count for r in records] == [4, 5, 6]
        # put back, the upstream names the first unit again; it ran again (its slot had been
        # overwritten by the renamed one's build), verified with the whole relation's rows
        assert records[0].uow_id == records[2].uow_id == second["uow_id"]
        assert records[1].uow_id == first["uow_id"] != second["uow_id"]
        assert [a.outcome for a in ledger.attempts(second["uow_id"])] == ["succeeded"] * 2
        assert "partition_column" not in units[0].destination


@pytest.fixture(scope="module")
def broken(renamed: tuple[Shop, list[dict[str, Any]], list[list[tuple[Any, ...]]]]
           ) -> tuple[Shop, subprocess.CompletedProcess[str]]:
    """The source dropped, and an order with a status the accepted_values test refuses."""
    house = renamed[0]
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
