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
  twice run examples/funds_positions/pipeline.py --interval 2026-11-23 --deadline none
  twice run examples/funds_positions/pipeline.py --start 2026-11-23 --end 2026-11-26 --deadline none
  twice run examples/funds_positions/pipeline.py --interval 2026-11-24 --tasks load --force \
      --deadline none --json
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
@options.range_options(options.interval_help("run"))
@options.ledger_option()
@options.concurrency_option("Units of work in flight at once (default 4; pools still bound "
                            "them, and a unit waits for its dependencies).")
@options.force_option("Run units that already succeeded again (a new job generation each): "
                      "the named --tasks, or all; their dependents follow when their input "
                      "changed. Without it a succeeded unit is not run again.")
@click.option("--accept-schema-change", is_flag=True,
              help="Let this run's writes change their destination's schema: new nullable "
              "columns in a task's output are added to its SQLite, DuckDB or PostgreSQL table "
              "(ALTER TABLE ... ADD COLUMN, in the write's transaction; rows already there "
              "hold NULL) and the new schema is recorded with the partition's fingerprint; "
              "other changes (a type, a dropped or renamed column) are refused with the "
              "statement to run. Units that already succeeded run again only with --force; "
              "to rewrite a whole range in the new schema, use twice backfill "
              "--accept-schema-change.")
@options.seed_option()
@options.deadline_option(
    "Override the pipeline's delivery deadline for this run (ISO-8601 instant with offset), "
    "e.g. a rerun of a past interval with a newly agreed deadline; 'none' runs without one. "
    "The planner still refuses attempts past it.")
@options.lease_ttl_option("How long a unit's lease lasts without renewal: a killed run's units "
                         "are taken over (and settled from their commit records) after it.")
@options.repeat_option(
    "Execute these tasks again even though they are not safe_repeat and already succeeded "
    "(otherwise such units are held, with the reason).")
@options.allow_open_option()
@options.refresh_snapshots_option()
@options.yes_option()
@options.json_option()
@exit_on_error("twice run")
def run(pipeline_file: str, interval: str | None, start: str | None, end: str | None,
        tasks: str | None, ledger_url: str | None, concurrency: int | None,
        max_workers: int | None, force: bool, accept_schema_change: bool, seed: int | None,
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
    from twice.cli.progress import unit_progress
    from twice.engine.executor import Executor
    from twice.engine.lineage import lineage_listeners, lineage_run
    from twice.errors import Interrupted

    inputs = load_run_inputs(pipeline_file, interval=interval, start=start, end=end,
                             tasks=tasks, deadline=deadline, repeat=repeat, yes=yes)
    listeners = lineage_listeners(inputs.pipeline)  # before the ledger opens: bad input first
    total = len(inputs.spans) * len(inputs.tasks or inputs.pipeline.tasks)
    with open_durable_ledger(ledger_url) as ledger, \
            unit_progress(total, verb="run", enabled=not as_json) as progress:
        refuse_open_spans(inputs.spans, ledger.now(), allow_open)
        executor = Executor(
            inputs.pipeline, ledger, max_workers=concurrency or max_workers or 4,
            rng=None if seed is None else random.Random(seed), repeat=inputs.repeat,
            lease_ttl=lease_ttl, allow_open=allow_open, refresh_snapshots=refresh_snapshots,
            force=(inputs.named or list(inputs.pipeline.tasks)) if force else (),
            accept_schema_change=accept_schema_change, listeners=[*listeners, progress],
        )
        with run_failures(), lineage_run(listeners):
            try:
                result = executor.run(inputs.spans, inputs.tasks)
                progress.rest(result.units)
            except Interrupted as exc:
                raise Interrupted(f"interrupted: {exc}") from exc
        label = ledger.url
    unseen = tuple(task.name for task in inputs.pipeline if not task.owns_output)
    show_and_finish(result, label, as_json,
                    lambda shown_result, shown_label: _summary(shown_result, shown_label, unseen))


def _summary(result: RunResult, label: str, unseen: tuple[str, ...] = ()) -> None:
    """The run's table and what it established; ``unseen``: the tasks without a destination
    twice can read (their successes are executed, not verified)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from twice.cli.console import (
        WIDE,
        last_width,
        make_console,
        shown,
        unit_cell,
        unit_column,
        unit_prefixes,
    )
    from twice.cli.pipeline_run import why

    console = make_console()
    wide = console.width >= WIDE
    prefixes = unit_prefixes([unit.uow_id for unit in result.units if unit.uow_id])
    table = Table(title=f"twice run {result.pipeline}  (ledger {shown(label)})",
                  box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    # a unique prefix of the unit's id (`twice explain` takes it), folded only when longer than
    # its column; outcome names are never broken; "next, why" wraps between words
    fits = unit_column(table, prefixes.values(), console.width,
                       others=40 + (63 if wide else 0), least=24)
    for column in ("outcome", "attempts", *(("job id",) if wide else ())):
        table.add_column(column, no_wrap=True)
    table.add_column("next, why", overflow="fold",
                     max_width=last_width(prefixes.values(), console.width,
                                          others=40 + (63 if wide else 0), least=24))
    for unit in result.units:
        style = _STYLE.get(unit.outcome, "white")
        # a success is verified before it is recorded: nothing to do (--json keeps the
        # planner's raw decision, validate-output, which the engine already carried out)
        # a held unit runs again only when named with --repeat (its reason says so)
        after = None if unit.ok or unit.outcome == "held" else unit.next_decision
        table.add_row(
            unit_cell(prefixes.get(unit.uow_id or "", f"{unit.task} {unit.interval.short}"),
                      fits),
            f"[{style}]{unit.outcome}[/]",
            "?" if unit.ledger_failed else f"{unit.attempts} ({unit.total_attempts})",
            *((unit.job_id or "-",) if wide else ()),
            (f"next: [bold]{after}[/]\n" if after else "") + escape(why(unit.reason, unit)),
        )
    console.print(table)
    if not wide and any(unit.job_id for unit in result.units):
        console.print(f"Job ids: --json, or `twice explain UNIT` (the table shows them from "
                      f"{WIDE} columns up).", markup=False, highlight=False)
    skipped = sum(1 for unit in result.units if unit.skipped)
    if skipped:
        console.print(f"{skipped} unit(s) had already succeeded and were not run again; "
                      "--force runs them again (a new job generation each).")
    counts = _counts(result)
    ran = {unit.task for unit in result.units if unit.ok and not unit.skipped}
    blind = sorted(ran & set(unseen))
    caveat = (f" {', '.join(blind)} {'has' if len(blind) == 1 else 'have'} no destination "
              "twice can read: executed and recorded, not verified." if blind else "")
    lost = sum(1 for unit in result.units if unit.ledger_failed)
    recorded = ("all recorded" if not lost else
                f"not all recorded: the ledger failed under {lost} unit(s), shown '?'")
    if not any(unit.attempts for unit in result.units) and not lost:
        # nothing executed: saying "succeeded ... executed and recorded" would claim a run
        console.print(f"{counts or 'nothing to run'}: no attempt was made in this run. "
                      "`twice status` or `twice explain UOW_ID` for the evidence.")
        return
    console.print(
        f"{counts}. attempts: this run ({recorded}). Executed and recorded; "
        "before any success: declared acceptance criteria checked, then the destination "
        "partition fingerprinted and recorded (`twice verify` recomputes them)."
        f"{caveat} `twice status` or `twice explain UOW_ID` for the evidence."
    )


def _counts(result: RunResult) -> str:
    """Outcomes of this run, a unit that had already succeeded counted apart: it was not run."""
    counts: dict[str, int] = {}
    for unit in result.units:
        label = "already succeeded (not run again)" if unit.skipped else unit.outcome
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{count} {label}" for label, count in sorted(counts.items()))
