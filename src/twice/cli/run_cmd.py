"""``twice run PIPELINE_FILE``: run a pipeline for one interval or a range, recording everything.

Exit status: 0 if every unit succeeded, 1 if any did not (failed, exhausted, deadline-infeasible,
unknown, blocked, leased elsewhere), 2 for bad input (missing or invalid pipeline file, unknown
task, bad interval, unusable ledger, an interval that has not ended without
``--allow-open-intervals``, more than 10,000 units without ``--yes``), always with a message
naming the thing and no traceback.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import click

from twice.cli import options
from twice.cli.exits import exit_on_error

if TYPE_CHECKING:
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


@click.command(epilog=EPILOG)
@click.argument("pipeline_file")
@options.range_options("The interval to run, e.g. 2026-11-30 (on the pipeline's schedule).")
@options.ledger_option()
@click.option("--max-workers", default=4, show_default=True, type=click.IntRange(1, 256),
              help="Concurrent units (pools still bound their dependencies).")
@options.seed_option()
@options.deadline_option(
    "Override the pipeline's delivery deadline for this run (ISO-8601 instant with offset), "
    "e.g. a rerun of a past interval with a newly agreed deadline; 'none' runs without one. "
    "The planner still refuses attempts past it.")
@click.option("--lease-ttl", default=300.0, show_default=True,
              type=click.FloatRange(min=0.1, max=86_400.0), metavar="SECONDS",
              help="How long a unit's lease lasts without renewal: a killed run's units are "
                   "taken over (and settled from their commit records) after it.")
@options.repeat_option(
    "Execute these tasks again even though they are not safe_repeat and already succeeded "
    "(otherwise such units are held, with the reason).")
@options.allow_open_option()
@options.refresh_snapshots_option()
@options.yes_option()
@options.json_option()
@exit_on_error("twice run")
def run(pipeline_file: str, interval: str | None, start: str | None, end: str | None,
        tasks: str | None, ledger_url: str | None, max_workers: int, seed: int | None,
        deadline: str | None, lease_ttl: float, repeat: str | None, allow_open: bool,
        refresh_snapshots: bool, yes: bool, as_json: bool) -> None:
    """Run a pipeline for one interval or a range."""
    from twice.cli.pipeline_run import (
        load_run_inputs,
        open_durable_ledger,
        refuse_open_spans,
        run_failures,
        show_and_finish,
    )
    from twice.engine.executor import Executor
    from twice.errors import Interrupted

    inputs = load_run_inputs(pipeline_file, interval=interval, start=start, end=end,
                             tasks=tasks, deadline=deadline, repeat=repeat, yes=yes)
    with open_durable_ledger(ledger_url) as ledger:
        refuse_open_spans(inputs.spans, ledger.now(), allow_open)
        executor = Executor(
            inputs.pipeline, ledger, max_workers=max_workers,
            rng=None if seed is None else random.Random(seed), repeat=inputs.repeat,
            lease_ttl=lease_ttl, allow_open=allow_open, refresh_snapshots=refresh_snapshots,
        )
        with run_failures():
            try:
                result = executor.run(inputs.spans, inputs.tasks)
            except Interrupted as exc:
                raise Interrupted(f"interrupted: {exc}") from exc
        label = ledger.url
    show_and_finish(result, label, as_json, _summary)


def _summary(result: RunResult, label: str) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from twice.cli.pipeline_run import why

    console = Console(width=240)
    table = Table(title=f"twice run {result.pipeline}  (ledger {label})")
    for column in ("task", "interval", "outcome", "attempts", "job id", "next", "why"):
        table.add_column(column, overflow="fold", no_wrap=column == "job id",
                         ratio=3 if column == "why" else None)
    for unit in result.units:
        style = _STYLE.get(unit.outcome, "white")
        table.add_row(
            unit.task, unit.interval.start.isoformat()[:16], f"[{style}]{unit.outcome}[/]",
            f"{unit.attempts} ({unit.total_attempts})", unit.job_id or "-",
            unit.next_decision or "-", escape(why(unit.reason, unit)),
        )
    console.print(table)
    counts = ", ".join(f"{count} {outcome}" for outcome, count in result.counts().items())
    console.print(
        f"{counts or 'nothing to run'}. attempts: this run (all recorded). Executed and recorded; "
        "before any success: declared acceptance criteria checked, then the destination "
        "partition fingerprinted and recorded (`twice verify` recomputes them). "
        f"`twice status` or `twice explain UOW_ID` for the evidence."
    )
