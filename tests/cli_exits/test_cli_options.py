"""One option vocabulary: --lease-ttl on run and backfill, --deadline on worker."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from twice.cli import cli
from twice.ledger import Ledger

PIPELINE = """\
from datetime import time
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule

pipeline = Pipeline("opts", schedule=Schedule.daily("UTC"), deadline=time(6, 0))

@pipeline.task(destination="sqlite://{root}/w.db?partition_column=day#t", write="replace",
               safe_repeat=True)
def t(ctx):
    return [{{"day": ctx.interval.start.date(), "n": 1}}]
"""


def _files(tmp_path: Path) -> tuple[str, str]:
    path = tmp_path / "p.py"
    path.write_text(PIPELINE.format(root=tmp_path))
    return str(path), str(tmp_path / "ledger.db")


def test_lease_ttl_on_run_and_backfill(tmp_path: Path) -> None:
    pipeline, ledger = _files(tmp_path)
    run = CliRunner().invoke(cli, ["run", pipeline, "--interval", "2026-11-30", "--ledger",
                                   ledger, "--deadline", "none", "--lease-ttl", "7", "--json"])
    assert run.exit_code == 0, run.output
    with Ledger.open(ledger) as opened:
        [unit] = opened.units()
        lease = opened.lease(unit.uow_id)
        assert lease is not None
        assert (lease.expires_at - lease.acquired_at).total_seconds() == 7
    bad = CliRunner().invoke(cli, ["backfill", pipeline, "--start", "2026-11-29", "--end",
                                   "2026-11-30", "--ledger", ledger, "--lease-ttl", "0"])
    assert bad.exit_code == 2 and "--lease-ttl" in bad.output
    ok = CliRunner().invoke(cli, ["backfill", pipeline, "--start", "2026-11-29", "--end",
                                  "2026-11-30", "--ledger", ledger, "--lease-ttl", "9", "--json"])
    assert ok.exit_code == 0, ok.output


def test_worker_takes_a_deadline_override(tmp_path: Path) -> None:
    pipeline, ledger = _files(tmp_path)
    args = ["worker", pipeline, "--interval", "2026-11-30", "--ledger", ledger, "--once",
            "--json"]
    refused = CliRunner().invoke(cli, args)  # the interval's 06:00 deadline is long past
    assert refused.exit_code == 1
    assert json.loads(refused.output)["units"][0]["outcome"] == "deadline-infeasible"
    overridden = CliRunner().invoke(cli, [*args, "--deadline", "none"])
    assert overridden.exit_code == 0, overridden.output
    bad = CliRunner().invoke(cli, [*args, "--deadline", "tomorrow"])
    assert bad.exit_code == 2 and "--deadline" in bad.output
