"""The "Your first pipeline" guide (docs/guides/first-pipeline.md), command by command.

The example (examples/first_pipeline) is copied into a temporary directory laid out like the
repository root, and the guide's own command lines run there through the real CLI
(``python -m twice`` in a subprocess). After every step the warehouse is read with DuckDB and
compared row by row with what the CSV files say it must hold (computed here with the csv module,
independently of twice), and the ledger is read through ``twice status --json``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "first_pipeline"
GUIDE = REPO / "docs" / "guides" / "first-pipeline.md"
DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")
TASKS = ("orders", "revenue")

PIPELINE = "examples/first_pipeline/pipeline.py"
LEDGER = "--ledger first-pipeline-work/ledger.db"
# The guide's commands, verbatim (test_the_guide_runs_what_is_tested keeps them in step).
RUN_THREE_DAYS = (f"twice run {PIPELINE} --start 2026-11-01 --end 2026-11-04 "
                  f"--deadline none {LEDGER}")
STATUS = f"twice status {LEDGER}"
RERUN = f"twice run {PIPELINE} --interval 2026-11-02 --deadline none {LEDGER}"
RERUN_FORCE = f"twice run {PIPELINE} --interval 2026-11-02 --force --deadline none {LEDGER}"
BACKFILL = f"twice backfill {PIPELINE} --start 2026-11-01 --end 2026-11-04 {LEDGER}"
BACKFILL_FORCE = f"twice backfill {PIPELINE} --start 2026-11-01 --end 2026-11-04 --force {LEDGER}"
VERIFY = f"twice verify {LEDGER}"
EXPLAIN = f"twice explain first_pipeline.orders.20261102 {LEDGER}"  # a unique id prefix
FLAKY_RERUN = (f"FIRST_PIPELINE_FLAKY=1 twice run {PIPELINE} --interval 2026-11-03 --force "
               f"--deadline none {LEDGER}")
TESTED = {RUN_THREE_DAYS, STATUS, RERUN, RERUN_FORCE, BACKFILL, BACKFILL_FORCE, VERIFY,
          EXPLAIN, FLAKY_RERUN}

Row = tuple[Any, ...]


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A directory laid out like the repository root, holding a copy of the example."""
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "first_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def sh(root: Path, line: str, *, expect: int = 0) -> str:
    """Run one guide command line (``VAR=value twice ...``) in ``root``; return its stdout."""
    words = shlex.split(line)
    env = {k: v for k, v in os.environ.items()
           if k not in {"TWICE_LEDGER", "FIRST_PIPELINE_WORKDIR", "FIRST_PIPELINE_FLAKY"}}
    env["COLUMNS"] = "200"
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[0] == "twice", line
    done = subprocess.run([sys.executable, "-m", "twice", *words[1:]], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == expect, (
        f"{line}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def expected_orders(root: Path) -> list[Row]:
    """(day, order_id, customer, amount) for every line of every day's CSV file."""
    rows = []
    for day in DAYS:
        path = root / "examples" / "first_pipeline" / "data" / f"orders-{day}.csv"
        with path.open(newline="", encoding="utf-8") as handle:
            for line in csv.DictReader(handle):
                rows.append((day, line["order_id"], line["customer"], Decimal(line["amount"])))
    return sorted(rows)


def expected_revenue(root: Path) -> list[Row]:
    """(day, customer, orders, revenue), summed from the CSV lines."""
    counts: Counter[tuple[str, str]] = Counter()
    totals: dict[tuple[str, str], Decimal] = {}
    for day, _order, customer, amount in expected_orders(root):
        counts[day, customer] += 1
        totals[day, customer] = totals.get((day, customer), Decimal(0)) + amount
    return sorted((day, customer, counts[day, customer], totals[day, customer])
                  for day, customer in counts)


def table(root: Path, sql: str) -> list[Row]:
    path = root / "first-pipeline-work" / "warehouse.duckdb"
    with duckdb.connect(str(path), read_only=True) as db:
        return sorted(db.execute(sql).fetchall())


def warehouse(root: Path) -> dict[str, list[Row]]:
    return {
        "orders": table(root, "SELECT strftime(day, '%Y-%m-%d'), order_id, customer, amount "
                              "FROM orders"),
        "revenue": table(root, "SELECT strftime(day, '%Y-%m-%d'), customer, orders, revenue "
                               "FROM revenue"),
    }


def assert_warehouse_is_the_input(root: Path) -> None:
    """The tables hold exactly what the CSVs say: every row once, nothing else."""
    held = warehouse(root)
    assert held["orders"] == expected_orders(root)
    assert held["revenue"] == expected_revenue(root)
    for name, rows in held.items():
        assert len(rows) == len(set(rows)), f"{name} holds duplicate rows"
    duplicated = table(root, "SELECT day, order_id FROM orders GROUP BY ALL HAVING count(*) > 1")
    assert duplicated == []


def units(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """``twice status --json``: (task, day) -> the current unit's row (a unit replaced by a
    new input version shows as superseded and is left out)."""
    document = json.loads(sh(root, f"{STATUS} --json"))
    current = [u for u in document["units"] if u["health"] != "superseded"]
    found = {(u["task"], u["interval_start"][:10]): u for u in current}
    assert len(found) == len(current)
    assert set(found) == {(task, day) for task in TASKS for day in DAYS}
    assert document["headline"].startswith("done: 6/6 verified")
    assert all(u["health"] == "verified" for u in found.values()), found
    return found


def generations(root: Path) -> dict[tuple[str, str], int]:
    return {key: unit["generation"] for key, unit in units(root).items()}


# --------------------------------------------------------------------------- the guide


def test_the_guide_step_by_step(root: Path) -> None:
    # Run three days: every unit executes once, in generation 1, and is verified.
    sh(root, RUN_THREE_DAYS)
    assert (root / "first-pipeline-work" / "warehouse.duckdb").is_file()
    assert_warehouse_is_the_input(root)
    first = generations(root)
    assert set(first.values()) == {1}
    status = sh(root, STATUS)
    assert "done: 6/6 verified" in status

    # The same day again without --force: nothing executes, nothing changes.
    out = sh(root, RERUN)
    assert "not run again" in out
    assert generations(root) == first
    assert_warehouse_is_the_input(root)

    # Rerun one day with --force: a new generation for that day's units, same rows, once.
    sh(root, RERUN_FORCE)
    after_rerun = generations(root)
    for key, generation in after_rerun.items():
        assert generation == (2 if key[1] == "2026-11-02" else 1), key
    assert_warehouse_is_the_input(root)

    # Backfill without --force: every unit is verified with the same versions, so skipped.
    out = sh(root, BACKFILL)
    assert len(re.findall(r"^\s+2026-11-0[123] (orders|revenue)\s+skipped", out, re.M)) == 6
    assert generations(root) == after_rerun
    assert_warehouse_is_the_input(root)

    # Backfill with --force: every unit executes again, in a new generation; rows unchanged.
    out = sh(root, BACKFILL_FORCE)
    after_backfill = generations(root)
    assert after_backfill == {key: g + 1 for key, g in after_rerun.items()}
    assert out.count("checksum unchanged") == 6
    assert_warehouse_is_the_input(root)

    # Verify recomputes every partition's fingerprint: all six match the ledger.
    out = sh(root, VERIFY)
    assert "verified 6/6 partitions match the ledger" in out

    # Explain one unit: its timeline shows each generation that ran.
    uow_id = units(root)[("orders", "2026-11-02")]["id"]
    out = sh(root, EXPLAIN)
    assert out.startswith(uow_id)
    for generation in (1, 2, 3):
        assert f"job generation {generation}:" in out


def test_a_declared_transient_error_is_retried_and_lands_once(root: Path) -> None:
    sh(root, RUN_THREE_DAYS)
    sh(root, FLAKY_RERUN)
    unit = units(root)[("orders", "2026-11-03")]
    assert unit["generation"] == 2
    assert unit["attempt"] == 3  # generation 1: attempt 1; the forced rerun: 2 failed, 3 ok
    timeline = json.loads(sh(root, f"twice explain {unit['id']} {LEDGER} --json"))
    finished = [e["summary"] for e in timeline["events"] if e["kind"] == "attempt-finished"]
    assert len(finished) == 3 and "failed-transient" in finished[1], finished
    assert_warehouse_is_the_input(root)


def test_a_change_behind_twices_back_is_found_and_repaired(root: Path) -> None:
    sh(root, RUN_THREE_DAYS)
    path = root / "first-pipeline-work" / "warehouse.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("DELETE FROM orders WHERE day = DATE '2026-11-02' AND order_id = "
                   "(SELECT min(order_id) FROM orders WHERE day = DATE '2026-11-02')")
    out = sh(root, VERIFY, expect=1)
    assert "verified 5/6 partitions match the ledger" in out
    out = sh(root, BACKFILL)  # skips verified units on the ledger's word (issue 38)
    assert "6 skipped" in out, out
    out = sh(root, f"{BACKFILL} --verify-untouched")
    assert re.search(r"2026-11-02 orders\s+succeeded .*drift", out), out
    # the guide's step 7: the day's revenue may have read the drifted orders, so it runs again
    # (and comes out unchanged); every other unit is skipped
    assert re.search(r"2026-11-02 revenue\s+succeeded v\d+: rows 4 -> 4, checksum unchanged",
                     out), out
    assert "4 skipped, 2 succeeded" in out, out
    assert_warehouse_is_the_input(root)
    sh(root, VERIFY)


def test_a_corrected_file_reruns_only_its_day(root: Path) -> None:
    """Interval-keyed input: a changed file is a new unit of work for its day alone."""
    sh(root, RUN_THREE_DAYS)
    before = units(root)
    path = root / "examples" / "first_pipeline" / "data" / "orders-2026-11-03.csv"
    with path.open("a", encoding="utf-8") as handle:
        handle.write("A-1013,globex,10.00\n")
    out = sh(root, BACKFILL)
    assert "2 succeeded" in out and "4 skipped" in out
    after = units(root)
    for key, unit in after.items():
        assert (unit["id"] != before[key]["id"]) == (key[1] == "2026-11-03"), key
    assert_warehouse_is_the_input(root)  # the expectation re-reads the corrected file


def test_the_guide_runs_what_is_tested() -> None:
    """Every ``twice`` command line in the guide's shell blocks is one this file runs."""
    text = GUIDE.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        lines += [" ".join(line.split()) for line in joined.splitlines()
                  if re.match(r"\s*([A-Z_]+=\S+ )*twice ", line)]
    assert lines, "no twice commands found in the guide"
    untested = sorted(set(lines) - TESTED)
    assert not untested, f"guide commands this test does not run: {untested}"
    assert TESTED <= set(lines), sorted(TESTED - set(lines))


def test_the_guide_shows_the_example_file() -> None:
    """The pipeline the guide prints is the example file, byte for byte."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    assert (EXAMPLE / "pipeline.py").read_text(encoding="utf-8") in blocks


def test_the_example_type_checks(tmp_path: Path) -> None:
    """A user's mypy accepts the guide's pipeline as written (every @pipeline.task option it
    uses, ``write=`` included, is in the typed signature)."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "--cache-dir",
         str(tmp_path / ".mypy_cache"), str(EXAMPLE / "pipeline.py")],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
