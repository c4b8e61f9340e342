"""``twice run --deadline``: a past interval's delivery deadline is enforced unless overridden."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.backfill import helpers


def run(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "twice.cli", "run", str(helpers.EXAMPLE), "--interval",
         "2026-11-23", "--ledger", str(root / "ledger.db"), "--json", *extra],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "TWICE_FUNDS_WORKDIR": str(root)},
    )


def outcomes(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {unit["task"]: unit["outcome"] for unit in json.loads(done.stdout)["units"]}


def test_past_deadline_refuses_then_override_runs(tmp_path: Path) -> None:
    root = helpers.make_workdir(tmp_path / "wh", days=1)
    refused = run(root)
    assert refused.returncode == 1, refused.stderr
    assert outcomes(refused)["extract"] == "deadline-infeasible"
    assert not (root / "warehouse.duckdb").exists()

    done = run(root, "--deadline", "none")
    assert done.returncode == 0, done.stderr
    assert set(outcomes(done).values()) == {"succeeded"}

    bad = run(root, "--deadline", "yesterday")
    assert bad.returncode == 2
    assert "--deadline" in bad.stderr and "Traceback" not in bad.stderr
