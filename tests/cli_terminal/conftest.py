"""A small pipeline and a ledger it ran into: three days of two tasks, one of which fails on
the last day, so tables, progress, logs and errors have successes and failures to show."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from twice.cli import cli

PIPELINE = '''\
from twice import Pipeline, Schedule

pipeline = Pipeline("settlement_positions_nightly", schedule=Schedule.daily("UTC"))


@pipeline.task()
def extract_custodian_positions(ctx):
    return 1


@pipeline.task(depends_on=["extract_custodian_positions"])
def reconcile_against_general_ledger(ctx):
    if ctx.interval.start.day == 25:
        raise ValueError("the general ledger export for this day is missing its trailer row")
    return 2
'''


@pytest.fixture(scope="session")
def pipeline_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("terminal") / "nightly.py"
    path.write_text(PIPELINE)
    return path


@pytest.fixture(scope="session")
def ran(pipeline_file: Path) -> str:
    """The ledger of a run over 2026-11-23 .. 2026-11-26 (exit 1: one unit failed)."""
    ledger = str(pipeline_file.parent / "ledger.db")
    result = CliRunner().invoke(cli, ["run", str(pipeline_file), "--start", "2026-11-23",
                                      "--end", "2026-11-26", "--deadline", "none",
                                      "--ledger", ledger])
    assert result.exit_code == 1, result.output
    return ledger
