"""``twice run PIPELINE_FILE``: run a pipeline for one interval or a range, recording everything.

Exit status: 0 if every unit succeeded, 1 if any did not (failed, exhausted, deadline-infeasible,
unknown, blocked, leased elsewhere), 2 for bad input (missing or invalid pipeline file, unknown
task, bad interval, unusable ledger), always with a message naming the thing and no traceback.
"""

from __future__ import annotations

import json
import random
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from twice.core.interval import Interval
    from twice.define.pipeline import Pipeline
    from twice.engine.executor import RunResult

EPILOG = """\b
Examples:
  twice run pipelines/funds.py --interval 2026-11-30
  twice run pipelines/funds.py --start 2026-11-01 --end 2026-12-01 --tasks load,report
  twice run pipelines/funds.py --interval 2026-11-30 --ledger postgresql://twice@db/twice --json
"""

_STYLE = {
    "succeeded": "green",
    "failed-permanent": "bold red",
    "attempts-exhausted": "red",
    "deadline-infeasible": "bold red",
    "unknown-needs-reconcile": "yellow",
    "reconcile-effects": "yellow",
    "blocked": "magenta",
    "leased-elsewhere": "cyan",
}


class _BadInput(Exception):
    pass


def _fail(message: str) -> None:
    click.echo(f"twice run: {message}", err=True)
    sys.exit(2)


def _intervals(pipeline: Pipeline, interval: str | None, start: str | None,
               end: str | None) -> list[Interval]:
    from twice.define.schedule import ScheduleError

    if interval is not None and (start is not None or end is not None):
        raise _BadInput("give either --interval or --start/--end, not both")
    if interval is None:
        if start is None or end is None:
            raise _BadInput("give --interval DATE, or both --start and --end")
        interval = f"{start}/{end}"
    try:
        return pipeline.schedule.parse_intervals_arg(interval)
    except ScheduleError as exc:
        raise _BadInput(str(exc)) from None


def _task_names(pipeline: Pipeline, tasks: str | None, option: str = "--tasks"
                ) -> list[str] | None:
    from twice.define.pipeline import PipelineError

    if tasks is None:
        return None
    names = [name.strip() for name in tasks.split(",") if name.strip()]
    if not names:
        raise _BadInput(f"{option}: no task names given")
    for name in names:
        try:
            pipeline.get_task(name)
        except PipelineError as exc:
            raise _BadInput(f"{option}: {exc}") from None
    return names


@click.command(epilog=EPILOG)
@click.argument("pipeline_file")
@click.option("--interval", default=None, metavar="DATE|START/END",
              help="The interval to run, e.g. 2026-11-30 (on the pipeline's schedule).")
@click.option("--start", default=None, metavar="DATE", help="First interval start (with --end).")
@click.option("--end", default=None, metavar="DATE", help="End of the range, exclusive.")
@click.option("--tasks", default=None, metavar="A,B",
              help="Only these tasks; dependencies outside them must have succeeded already.")
@click.option("--ledger", "ledger_url", default=None, metavar="URL",
              help="Ledger URL or SQLite path (default: $TWICE_LEDGER or twice-ledger.db).")
@click.option("--max-workers", default=4, show_default=True, type=click.IntRange(1, 256),
              help="Concurrent units (pools still bound their dependencies).")
@click.option("--seed", default=None, type=int, help="Seed the retry jitter (reproducible).")
@click.option("--deadline", "deadline", default=None, metavar="INSTANT|none",
              help="Override the pipeline's delivery deadline for this run (ISO-8601 instant "
                   "with offset), e.g. a rerun of a past interval with a newly agreed deadline; "
                   "'none' runs without one. The planner still refuses attempts past it.")
@click.option("--lease-ttl", default=300.0, show_default=True,
              type=click.FloatRange(min=0.1, max=86_400.0), metavar="SECONDS",
              help="How long a unit's lease lasts without renewal: a killed run's units are "
                   "taken over (and settled from their commit records) after it.")
@click.option("--repeat", default=None, metavar="A,B",
              help="Execute these tasks again even though they are not safe_repeat and already "
                   "succeeded (otherwise such units are held, with the reason).")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
def run(pipeline_file: str, interval: str | None, start: str | None, end: str | None,
        tasks: str | None, ledger_url: str | None, max_workers: int, seed: int | None,
        deadline: str | None, lease_ttl: float, repeat: str | None, as_json: bool) -> None:
    """Run a pipeline for one interval or a range."""
    from twice.define.load import PipelineFileError, load_pipeline
    from twice.define.pipeline import PipelineError
    from twice.define.schedule import ScheduleError
    from twice.engine.executor import Executor
    from twice.errors import Interrupted
    from twice.ledger import Ledger, LedgerError

    try:
        pipeline = load_pipeline(pipeline_file)
    except PipelineFileError as exc:
        _fail(str(exc))
    if deadline is not None:
        pipeline.deadline = _deadline_override(deadline)
    try:
        spans = _intervals(pipeline, interval, start, end)
        names = _task_names(pipeline, tasks)
        repeated = _task_names(pipeline, repeat, option="--repeat") or []
    except _BadInput as exc:
        _fail(str(exc))
    try:
        ledger = Ledger.open(ledger_url, durable=True)
    except LedgerError as exc:
        _fail(str(exc))
    with ledger:
        executor = Executor(
            pipeline, ledger, max_workers=max_workers,
            rng=None if seed is None else random.Random(seed), repeat=repeated,
            lease_ttl=lease_ttl,
        )
        try:
            result = executor.run(spans, names)
        except Interrupted as exc:
            click.echo(f"twice run: interrupted: {exc}", err=True)
            sys.exit(130)
        except LedgerError as exc:
            click.echo(f"twice run: the ledger failed during the run: {exc}", err=True)
            sys.exit(1)
        except (PipelineError, ScheduleError) as exc:  # a definition problem found late
            _fail(str(exc))
        label = ledger.url
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "ledger": label}, sort_keys=True))
    else:
        _summary(result, label)
    sys.exit(0 if result.ok else 1)


def _deadline_override(text: str) -> object:
    """``--deadline``: None for 'none', else a function giving that instant for every interval."""
    if text.strip().lower() == "none":
        return None
    from twice.core.timescale import TimeValueError, parse_instant

    try:
        due = parse_instant(text)
    except TimeValueError as exc:
        _fail(f"--deadline: {exc}")
    return lambda _interval: due


def _summary(result: RunResult, label: str) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=240)
    table = Table(title=f"twice run {result.pipeline}  (ledger {label})")
    for column in ("task", "interval", "outcome", "attempts", "job id", "next", "why"):
        table.add_column(column, overflow="fold", no_wrap=column == "job id",
                         ratio=3 if column == "why" else None)
    for unit in result.units:
        style = _STYLE.get(unit.outcome, "white")
        why = unit.reason
        if unit.error and unit.outcome != "succeeded":
            why += f"\nlast error: {unit.error}"
        for note in unit.notes:
            why += f"\nnote: {note}"
        table.add_row(
            unit.task, unit.interval.start.isoformat()[:16], f"[{style}]{unit.outcome}[/]",
            f"{unit.attempts} ({unit.total_attempts})", unit.job_id or "-",
            unit.next_decision or "-", escape(why),
        )
    console.print(table)
    counts = ", ".join(f"{count} {outcome}" for outcome, count in result.counts().items())
    console.print(
        f"{counts or 'nothing to run'}. attempts: this run (all recorded). Executed and recorded; "
        "before any success: declared acceptance criteria checked, then the destination "
        "partition fingerprinted and recorded (`twice verify` recomputes them). "
        f"`twice status` or `twice explain UOW_ID` for the evidence."
    )
