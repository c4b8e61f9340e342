"""``twice worker PIPELINE_FILE``: one of several processes sharing a ledger (see
``twice.drivers.worker``).

Start as many as you like, on one host or many, with the same pipeline, range and ledger
(PostgreSQL for several hosts): each unit of work runs in one of them, pools bind them all, and
a worker killed mid-attempt leaves a lease that expires and an attempt the next one reconciles.

Exit status: 0 if every unit this worker ran succeeded (units done or ended in other workers do
not count against it), 1 if one did not or it was stopped by a signal with work left, 2 for bad
input (pipeline file, interval, task, option, unusable ledger, an interval that has not ended
without ``--allow-open-intervals``, more than 10,000 units without ``--yes``), with a message and
no traceback.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import click

from twice.cli import options
from twice.cli.exits import exit_on_error
from twice.errors import InputError

if TYPE_CHECKING:
    from datetime import datetime

    from twice.drivers.worker import WorkerReport

EPILOG = """\b
Examples:
  twice worker pipelines/funds.py --ledger postgresql://twice@db/twice \\
      --start 2026-11-01 --end 2026-12-01
  twice worker pipelines/funds.py --ledger postgresql://twice@db/twice --interval 2026-11-30 \\
      --name etl-3 --lease-ttl 120 --poll 5 --json
"""

_STYLE = {
    "ran": "white",
    "done-elsewhere": "green",
    "ended-elsewhere": "yellow",
    "left": "cyan",
}


def _since(text: str | None) -> datetime | None:
    if text is None:
        return None
    from twice.core.timescale import TimeValueError, parse_instant

    try:
        return parse_instant(text)
    except TimeValueError as exc:
        raise InputError(f"--since: {exc}") from exc


@click.command(epilog=EPILOG)
@click.argument("pipeline_file")
@options.ledger_option(
    "Shared ledger URL (default: $TWICE_LEDGER or twice-ledger.db); PostgreSQL for workers on "
    "several hosts.")
@options.range_options("The interval(s) to work on, e.g. 2026-11-30.")
@click.option("--name", default=None, metavar="NAME",
              help="Lease holder name, unique per live process (default: host:pid).")
@options.lease_ttl_option(
    "How long a dead worker's unit stays blocked (renewed every third of it).", default=60.0)
@click.option("--pool-ttl", default=60.0, show_default=True, type=options.LEASE_TTL,
              metavar="SECONDS", help="The same for pool slots held in the ledger.")
@click.option("--poll", default=1.0, show_default=True,
              type=options.FiniteRange(min=0, min_open=True, max=3600), metavar="SECONDS",
              help="Longest wait between passes when every open unit is leased elsewhere "
              "or waiting (the wait starts at 0.05 s and doubles while nothing changes; on "
              "PostgreSQL it ends as soon as another worker gives a unit back).")
@click.option("--once", is_flag=True, help="One pass: leave units leased elsewhere to others.")
@click.option("--max-units", default=None, type=click.IntRange(min=1), metavar="N",
              help="Stop after running N units.")
@click.option("--since", default=None, metavar="INSTANT",
              help="Runs of other workers that ended without success after this instant are "
                   "theirs to report, not retried here (default: when this worker starts).")
@options.seed_option()
@options.deadline_option(
    "Override the pipeline's delivery deadline (ISO-8601 instant with offset, or 'none'), as "
    "`twice run --deadline` does.")
@options.repeat_option(
    "Execute these tasks again although they are not safe_repeat and already succeeded "
    "(otherwise such units are held, with the reason).")
@options.allow_open_option()
@options.yes_option()
@options.json_option()
@exit_on_error("twice worker")
def worker(pipeline_file: str, ledger_url: str | None, interval: str | None, start: str | None,
           end: str | None, tasks: str | None, name: str | None, lease_ttl: float,
           pool_ttl: float, poll: float, once: bool, max_units: int | None, since: str | None,
           seed: int | None, deadline: str | None, repeat: str | None, allow_open: bool,
           yes: bool, as_json: bool) -> None:
    """Work on a pipeline's units alongside other workers sharing the ledger."""
    from twice.cli.pipeline_run import (
        load_run_inputs,
        open_durable_ledger,
        refuse_open_spans,
        run_failures,
        show_and_finish,
    )
    from twice.cli.progress import unit_progress
    from twice.define.pipeline import PipelineError
    from twice.define.schedule import ScheduleError
    from twice.drivers.worker import Worker
    from twice.engine.lineage import lineage_listeners, lineage_run

    if name is not None and not name.strip():
        raise InputError("--name must not be empty")
    since_at = _since(since)
    inputs = load_run_inputs(pipeline_file, interval=interval, start=start, end=end,
                             tasks=tasks, deadline=deadline, repeat=repeat, yes=yes)
    listeners = lineage_listeners(inputs.pipeline)  # before the ledger opens: bad input first
    total = len(inputs.spans) * len(inputs.tasks or inputs.pipeline.tasks)
    with open_durable_ledger(ledger_url) as ledger, \
            unit_progress(total, verb="worker", enabled=not as_json) as progress:
        refuse_open_spans(inputs.spans, ledger.now(), allow_open)
        try:
            runner = Worker(
                inputs.pipeline, ledger, inputs.spans, tasks=inputs.tasks, name=name,
                lease_ttl=lease_ttl, pool_ttl=pool_ttl, poll=poll, once=once,
                max_units=max_units, since=since_at,
                rng=None if seed is None else random.Random(seed), repeat=inputs.repeat,
                allow_open=allow_open,
                listeners=[*listeners, progress],
            )
        except (ValueError, PipelineError, ScheduleError) as exc:
            raise InputError(str(exc)) from exc
        with run_failures(), runner.stop_on_signals(), lineage_run(listeners):
            report = runner.run()
            progress.rest(unit.result for unit in report.units
                          if unit.settlement == "ran" and unit.result is not None)
            progress.elsewhere(sum(unit.settlement in ("done-elsewhere", "ended-elsewhere")
                                   for unit in report.units))
        label = ledger.url
    show_and_finish(report, label, as_json, _summary)


def _summary(report: WorkerReport, label: str) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from twice.cli.console import (
        last_width,
        make_console,
        shown,
        unit_cell,
        unit_column,
        unit_prefixes,
    )
    from twice.cli.pipeline_run import why

    console = make_console()
    prefixes = unit_prefixes([unit.uow_id for unit in report.units if unit.uow_id])
    table = Table(title=f"twice worker {shown(report.worker)}: {report.pipeline}  "
                        f"(ledger {shown(label)})", box=box.SIMPLE_HEAD, title_justify="left",
                  pad_edge=False)
    # a unit's id (a unique prefix: any command taking UOW_ID accepts it) is folded only when
    # longer than its column; labels are never broken; "why" wraps between words
    fits = unit_column(table, prefixes.values(), console.width, others=46, least=20)
    for column in ("settled", "outcome", "attempts"):
        table.add_column(column, no_wrap=True)
    table.add_column("why", overflow="fold",
                     max_width=last_width(prefixes.values(), console.width, others=46))
    for unit in report.units:
        style = _STYLE[unit.settlement]
        result = unit.result
        attempts = "-" if result is None else f"{result.attempts} ({result.total_attempts})"
        table.add_row(
            unit_cell(prefixes.get(unit.uow_id or "", f"{unit.task} {unit.interval.short}"),
                      fits),
            f"[{style}]{unit.settlement}[/]", unit.outcome or "-", attempts,
            escape(why(unit.reason, result)),
        )
    console.print(table)
    counts = ", ".join(f"{count} {what}" for what, count in report.counts().items())
    console.print(
        f"{counts or 'nothing to do'}; {report.passes} pass(es), stopped: {report.stopped}. "
        "Executed and recorded; before any success: declared acceptance criteria checked, then "
        "the destination partition fingerprinted and recorded (`twice verify` recomputes them). "
        "`twice explain UOW_ID` for the evidence."
    )
    for note in report.notes:
        console.print(f"note: {shown(note)}")
