"""``twice demo``: the funds-positions pipeline through faults, a rerun and a backfill.

It proves the product's promise on the embedded default (SQLite ledger, DuckDB warehouse): after
transient errors, a lost acknowledgement, a slow task and a bad row, then a rerun of one day and a
backfill of the whole week, every partition's fingerprint equals that of one clean run into a
separate warehouse, and no row is duplicated. Exit 0 only if all of that holds.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import date, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from twice.cli.exits import exit_on_error, finish
from twice.errors import InputError

MARKER = ".twice-demo"
START = date(2026, 11, 23)


def example_dir() -> Path:
    """examples/funds_positions of the source tree twice is installed from (editable), else
    the copy a wheel installs under ``<prefix>/share/twice`` (pyproject.toml's data-files)."""
    import sys

    import twice

    source = Path(twice.__file__).resolve().parents[2] / "examples" / "funds_positions"
    if source.is_dir():
        return source
    return Path(sys.prefix) / "share" / "twice" / "examples" / "funds_positions"


def load_example() -> ModuleType:
    path = example_dir() / "pipeline.py"
    if not path.is_file():
        raise click.ClickException(f"demo pipeline not found at {path} (needs a source checkout)")
    if path not in _LOADED:  # once per process: its module-level pipeline reads the env
        from twice.define.load import load_module

        _LOADED[path] = load_module(path)
    return _LOADED[path]


_LOADED: dict[Path, ModuleType] = {}


def prepare_workdir(workdir: str | None) -> Path:
    """A fresh directory; a previous demo's directory (it has the marker) is reset."""
    if workdir is None:
        root = Path(tempfile.mkdtemp(prefix="twice-demo-"))
    else:
        root = Path(workdir)
        if root.exists() and any(root.iterdir()):
            if not (root / MARKER).exists():
                raise InputError(f"--workdir {workdir} is not empty and was not made by "
                                 "twice demo; choose an empty or new directory")
            for child in ("run", "clean"):
                shutil.rmtree(root / child, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text("made by twice demo\n", encoding="utf-8")
    return root


def compare_warehouses(example: ModuleType, run_dir: Path, clean_dir: Path,
                       intervals: list[Any]) -> list[tuple[str, str, Any, Any]]:
    """(table, day, fingerprint in the run, fingerprint in the clean run) for every partition."""
    from twice.destinations import open_destination
    from twice.destinations.fingerprint import fingerprint

    rows = []
    for table in example.TABLES:
        ran = open_destination(example.destination(run_dir / "warehouse.duckdb", table))
        clean = open_destination(example.destination(clean_dir / "warehouse.duckdb", table))
        try:
            for interval in intervals:
                rows.append((table, str(interval.start.date()), fingerprint(ran, interval),
                             fingerprint(clean, interval)))
        finally:
            ran.close()
            clean.close()
    return rows


def duplicate_rows(warehouse: Path) -> int:
    """Rows beyond the first per natural key, over every table of the warehouse."""
    import duckdb

    keys = {"raw_positions": "day, line", "positions_stage": "day, fund_id, isin",
            "positions": "day, fund_id, isin", "fund_daily": "day, fund_id", "load_jobs": "job_id"}
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        total = 0
        for table, key in keys.items():
            row = con.execute(
                f"SELECT count(*) - count(DISTINCT ({key})) FROM {table}"
            ).fetchone()
            total += int(row[0]) if row else 0
        return total
    finally:
        con.close()


def _load_evidence(warehouse: Path, interval: Any) -> tuple[int, int]:
    """(job markers, position rows) of one day: the proof a reconciled load did not double."""
    import duckdb

    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        day = interval.start.date()
        markers = con.execute("SELECT count(*) FROM load_jobs WHERE day = ?", [day]).fetchone()
        rows = con.execute("SELECT count(*) FROM positions WHERE day = ?", [day]).fetchone()
        return int(markers[0]) if markers else 0, int(rows[0]) if rows else 0
    finally:
        con.close()


@click.command("demo", epilog="""\b
Examples:
  twice demo --workdir twice-demo
  twice demo --workdir /tmp/fp --days 3
""")
@click.option("--workdir", default=None, metavar="DIR",
              help="Where to build the source, warehouses and ledgers (default: a new temp dir).")
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 31),
              help="Days of source data from 2026-11-23.")
@exit_on_error("twice demo")
def demo(workdir: str | None, days: int) -> None:
    """Run the funds-positions demo: faults, reconcile, rerun, backfill, compare to clean."""
    from rich.table import Table

    from twice.cli.backfill_cmd import describe_run
    from twice.cli.console import make_console
    from twice.define.acceptance import AcceptanceCriteria, LoadOutcome, evaluate
    from twice.drivers.backfill import run_backfill
    from twice.ledger import Ledger

    console = make_console()
    example = load_example()
    root = prepare_workdir(workdir)
    run_dir, clean_dir = root / "run", root / "clean"
    end = START + timedelta(days=days)
    for folder in (run_dir, clean_dir):
        example.source.build_source(folder / "source", START, days)
    faults = example.FaultPlan.demo()
    pipeline = example.build_pipeline(run_dir, faults)
    intervals = pipeline.schedule.intervals(START, end)
    console.print(f"[bold]twice demo[/bold]: {pipeline.name}, {START} .. {end} (end exclusive), "
                  f"work directory {root}")
    ok = True

    def show(kind: str, data: Any) -> None:
        if kind == "attempt-failed":
            retry = ("transient -> retried with backoff" if data.get("retried")
                     else "transient" if data["transient"] else "permanent")
            console.print(f"    {data['interval'][:10]} {data['task']}: attempt "
                          f"{data['attempt']} failed: {data['error']} ({retry})")
        elif kind == "reconciled":
            console.print(f"    {data['interval'][:10]} {data['task']}: acknowledgement lost; "
                          f"reconciled job {data['job_id']} -> {data['state']}: same job id, "
                          "not resubmitted")

    with Ledger.open(f"sqlite:///{run_dir / 'ledger.db'}") as ledger:
        console.print("\n[bold]1. scheduled run with injected faults[/bold] "
                      "(transient extract errors, lost load ack, slow transform, bad row)")
        first = run_backfill(pipeline, ledger, intervals, concurrency=2, emit=show)
        ok &= first.ok
        for run in first.runs:
            if run.task == "transform":
                estimate = pipeline.get_task("transform").estimated_duration or 0
                if run.interval.start.date() in faults.slow_transform:
                    console.print(f"    {run.interval.start.date()} transform: slow, "
                                  f"{run.duration:.2f} s (estimated {estimate:g} s), finished")
                if run.nonfatal:
                    console.print(f"    {run.interval.start.date()} transform: "
                                  f"{run.nonfatal} bad row rejected; acceptance "
                                  f"{'passed' if run.status == 'succeeded' else 'FAILED'}: "
                                  + "; ".join(run.acceptance))
                    strict = evaluate(AcceptanceCriteria(max_rejected_rows=0),
                                      LoadOutcome(rows=None, rejected_rows=run.nonfatal,
                                                  nonfatal_errors=run.nonfatal))
                    console.print("      (with max_rejected_rows=0 it would fail as designed: "
                                  + "; ".join(strict.reasons) + ")")
            if run.reconciled:
                markers, positions = _load_evidence(run_dir / "warehouse.duckdb", run.interval)
                console.print(f"    {run.interval.start.date()} load: {markers} job marker(s) "
                              f"and {positions} position rows for the day after reconciliation "
                              f"({len(run.attempts)} attempt, no resubmission)")
        console.print(f"  -> {first.counts()} in {first.elapsed:.1f} s")

        day = intervals[min(2, len(intervals) - 1)]
        console.print(f"\n[bold]2. rerun one day[/bold] ({day.start.date()}, all tasks)")
        rerun = run_backfill(pipeline, ledger, [day], force=True)
        ok &= rerun.ok
        for run in rerun.runs:
            console.print("    " + describe_run(run.to_dict()))

        console.print(f"\n[bold]3. backfill the week[/bold] ({len(intervals)} intervals, "
                      "concurrency 3, --force)")
        week = run_backfill(pipeline, ledger, intervals, concurrency=3, force=True)
        ok &= week.ok
        verdicts: dict[str, int] = {}
        for diff in week.diffs:
            verdicts[diff.verdict] = verdicts.get(diff.verdict, 0) + 1
        console.print(f"  -> {week.counts()}; partition diffs vs previous version: {verdicts}")
        resume = run_backfill(pipeline, ledger, intervals, concurrency=3)
        ok &= resume.ok
        console.print(f"  -> same backfill again without --force: {resume.counts()} "
                      "(verified intervals are skipped)")

    console.print("\n[bold]4. clean run[/bold] (no faults, separate warehouse and ledger)")
    clean_pipeline = example.build_pipeline(clean_dir, None)
    with Ledger.open(f"sqlite:///{clean_dir / 'ledger.db'}") as clean_ledger:
        clean = run_backfill(clean_pipeline, clean_ledger, intervals)
    ok &= clean.ok
    console.print(f"  -> {clean.counts()}")

    rows = compare_warehouses(example, run_dir, clean_dir, intervals)
    table = Table(title="fingerprints: after faults, rerun and backfill vs one clean run")
    for column in ("table", "day", "rows", "checksum", "clean checksum", "equal"):
        table.add_column(column)
    equal = 0
    for name, day_text, ran, want in rows:
        same = ran == want
        equal += same
        table.add_row(name, day_text, str(ran.row_count), ran.checksum, want.checksum,
                      "yes" if same else "[red]NO[/red]")
    console.print(table)
    duplicates = duplicate_rows(run_dir / "warehouse.duckdb")
    ok &= equal == len(rows) and duplicates == 0
    console.print(f"fingerprints: {equal}/{len(rows)} equal to a clean run; "
                  f"duplicate rows: {duplicates}")
    _next_steps(console, run_dir)
    finish(ok)


def next_commands(run_dir: Path) -> list[str]:
    """Three commands to try on the demo's ledger, runnable as printed (shell-quoted)."""
    import shlex

    ledger = shlex.quote(str(run_dir / 'ledger.db'))
    return [
        f"twice status --ledger {ledger}",
        f"twice update --ledger {ledger}",
        f"twice report --ledger {ledger} --html {shlex.quote(str(run_dir / 'report.html'))}",
    ]


def _next_steps(console: Any, run_dir: Path) -> None:
    """Where the demo left its ledger and warehouse, and what to run next."""
    console.print(f"\nledger: {run_dir / 'ledger.db'}", highlight=False, soft_wrap=True)
    console.print(f"warehouse: {run_dir / 'warehouse.duckdb'}", highlight=False, soft_wrap=True)
    console.print("next, try:", highlight=False)
    for command in next_commands(run_dir):
        console.print(f"  {command}", highlight=False, soft_wrap=True)
