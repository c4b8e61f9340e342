"""examples/intermediates through the real CLI (``python -m twice`` in a subprocess): a forced
rerun reuses the stored ``enriched`` slice, a row changed behind twice's back is refused and
recomputed, and the dependents' tables always hold what the enriched rows say (computed here
with DuckDB SQL, independently of the example's Python)."""

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

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "intermediates"
PIPELINE = "examples/intermediates/pipeline.py"
LEDGER = "intermediates-work/ledger.db"
RUN = ["run", PIPELINE, "--interval", "2026-11-02", "--ledger", LEDGER]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "intermediates",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def twice(root: Path, *args: str, expect: int = 0) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in {"TWICE_LEDGER", "INTERMEDIATES_WORKDIR"}}
    env["COLUMNS"] = "250"
    done = subprocess.run([sys.executable, "-m", "twice", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == expect, f"{args}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return " ".join(done.stdout.split())  # table cells wrap: compare words


def catalog(root: Path) -> dict[str, Any]:
    [entry] = json.loads(twice(root, "intermediates", "--ledger", LEDGER, "--json"))[
        "intermediates"]  # JSON does not care about the collapsed whitespace
    return dict(entry)


def warehouse(root: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = duckdb.connect(str(root / "intermediates-work" / "warehouse.duckdb"))
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def dependents_match_enriched(root: Path) -> None:
    exposure = warehouse(root, "SELECT fund, market_value FROM exposure ORDER BY fund")
    expected = warehouse(root, "SELECT fund, sum(market_value) FROM enriched GROUP BY fund "
                               "ORDER BY fund")
    assert exposure == expected and len(exposure) == 3
    largest = warehouse(root, "SELECT fund, isin FROM largest ORDER BY fund")
    expected = warehouse(root, "SELECT fund, arg_max(isin, (market_value, isin)) FROM enriched "
                               "GROUP BY fund ORDER BY fund")
    assert largest == expected


def test_the_example_reuses_refuses_and_recomputes(root: Path) -> None:
    first = twice(root, *RUN)
    assert "reused the stored slice" not in first
    entry = catalog(root)
    assert (entry["name"], entry["owner"], entry["status"]) == ("enriched", "team-funds",
                                                                "active")
    assert (entry["rows"], entry["materializations"], entry["reuseCount"]) == (12, 1, 0)
    assert entry["tradeoff"]["recommendation"] in ("keep", "drop")
    dependents_match_enriched(root)
    original = warehouse(root, "SELECT * FROM enriched ORDER BY fund, isin")

    rerun = twice(root, *RUN, "--force")
    assert "reused the stored slice, its fingerprint matches; the task did not run" in rerun
    entry = catalog(root)
    assert (entry["materializations"], entry["reuseCount"], entry["refusals"]) == (1, 1, 0)
    dependents_match_enriched(root)

    warehouse(root, "UPDATE enriched SET quantity = quantity + 1 "
                    "WHERE fund = 'F1' AND isin = 'PT0001'")
    twice(root, "verify", "--ledger", LEDGER, expect=1)  # the change is visible to verify
    repaired = twice(root, *RUN, "--force")
    assert "refused the stored copy: fingerprint mismatch" in repaired
    entry = catalog(root)
    assert (entry["materializations"], entry["reuseCount"], entry["refusals"]) == (2, 1, 1)
    assert warehouse(root, "SELECT * FROM enriched ORDER BY fund, isin") == original
    dependents_match_enriched(root)
    assert "verified 3/3 partitions match the ledger" in twice(root, "verify", "--ledger",
                                                               LEDGER)
