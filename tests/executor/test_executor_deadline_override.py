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


def test_the_update_names_the_impact_of_a_missed_deadline(tmp_path: Path) -> None:
    """Issue 39: when the deadline no longer fits, the update names which intervals miss it
    and which downstream consumers wait on them, with alternatives."""
    root = helpers.make_workdir(tmp_path / "wh", days=1)
    refused = run(root)
    assert outcomes(refused)["extract"] == "deadline-infeasible"
    update = subprocess.run(
        [sys.executable, "-m", "twice.cli", "update", "--ledger", str(root / "ledger.db")],
        capture_output=True, text=True, timeout=120)
    assert update.returncode == 0, update.stderr
    [action] = [line for line in update.stdout.splitlines() if line.startswith("Next action")]
    impact = action[action.index("Impact: "):]
    assert impact.startswith("Impact: extract (deadline 2026-11-2")  # one interval: its task
    assert "cannot be delivered by the deadline" in impact
    from twice.define.load import load_pipeline

    pipeline = load_pipeline(helpers.EXAMPLE)
    for task in pipeline.dependents_of("extract"):
        assert task in impact, (task, impact)
    assert "Alternatives:" in impact
