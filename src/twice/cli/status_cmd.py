"""``twice status``: every unit of work, its health, its latest attempt, what to do now.

The health column is the one vocabulary every report uses (``twice.reports.health``), from the
same model as ``twice update``, ``handover`` and ``report`` as of the same instant, and the rows
come in its order: what needs attention first. The first line is the scope's headline
(``done: 28/28 verified`` when every unit is verified).

The decision column is the planner's (``decide_task``) over the ledger's evidence as of now (or
``--as-of``), shown for units that still need an action; a verified or asserted unit needs none
(the engine already ran the lab's validate-output step before recording a verified success, so
its observations need not be fresh). ``--json`` keeps the planner's raw ``decision`` for every
unit and adds ``health`` and ``nextAction``. ``--pipeline NAME`` keeps one pipeline's units.
Policies come from ``--pipeline-file FILE`` when given
(for that pipeline's tasks), else from what each unit's latest run recorded; a unit with neither
shows no decision. A ``--pipeline`` the ledger never recorded is refused (exit 2), naming
the pipelines it did, as ``twice update`` refuses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import (
    json_option,
    ledger_option,
    pipeline_file_option,
    pipeline_name_option,
)
from twice.errors import InputError

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline
    from twice.engine.evidence import PlanSettings
    from twice.ledger import UnitRecord


def _settings_from(pipeline: Pipeline) -> Any:
    from twice.engine.evidence import PlanSettings

    def settings_for(unit: UnitRecord) -> PlanSettings | None:
        if unit.pipeline != pipeline.name or unit.task not in pipeline:
            return None
        return PlanSettings.for_task(pipeline, pipeline.get_task(unit.task), unit.interval)

    return settings_for


EPILOG = """\b
Examples:
  twice status --ledger twice-demo/run/ledger.db
  twice status --ledger twice-demo/run/ledger.db --pipeline funds_positions --json
  twice status --pipeline-file examples/funds_positions/pipeline.py --as-of 2026-11-30T06:00:00Z
"""


@click.command(epilog=EPILOG)
@ledger_option()
@pipeline_name_option()
@pipeline_file_option("Pipeline file whose policies and deadlines to plan with.")
@click.option("--as-of", "as_of", default=None, metavar="INSTANT",
              help="Judge the evidence as of this ISO-8601 instant (default: now).")
@json_option()
@exit_on_error("twice status")
def status(ledger_url: str | None, pipeline: str | None, pipeline_file: str | None,
           as_of: str | None, as_json: bool) -> None:
    """Table of units of work and what the planner would do now."""
    from twice.cli.ledger_decide import open_existing_ledger, parse_as_of, rows_with_health

    settings_for = None
    at = parse_as_of(as_of)
    if pipeline_file is not None:
        from twice.define.load import PipelineFileError, load_pipeline

        try:
            settings_for = _settings_from(load_pipeline(pipeline_file))
        except PipelineFileError as exc:
            raise InputError(str(exc)) from exc
    ledger = open_existing_ledger(ledger_url)
    with ledger:
        if pipeline is not None:
            # a name the ledger never recorded is a typo, refused as update/report/handover do
            from twice.reports.source import describe, require_pipeline

            require_pipeline(ledger, pipeline, describe(ledger_url))
        at, rows, headline = rows_with_health(ledger, at, settings_for, pipeline=pipeline,
                                              live=as_of is None)
        label = ledger.url
    if as_json:
        from twice.engine.evidence import iso

        echo(jsonkeys.dumps({"ledger": label, "asOf": iso(at), "headline": headline.headline,
                         "done": headline.done, "units": rows}, sort_keys=True))
        return
    _print(label, at, rows, headline.headline)


def _print(label: str, at: Any, rows: list[dict[str, Any]], headline: str) -> None:
    from rich import box
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
    from twice.core.interval import Interval
    from twice.engine.evidence import iso
    from twice.ledger import OPERATOR_SOURCE_PREFIX
    from twice.reports import wording

    console = make_console()
    if not rows:
        console.print(f"{shown(label)}: no units of work recorded yet")
        return
    console.print(headline, markup=False, highlight=False)
    wide = console.width >= WIDE
    prefixes = unit_prefixes([row["id"] for row in rows])
    table = Table(title=f"Units of work in {shown(label)} as of {iso(at)}", box=box.SIMPLE_HEAD,
                  title_justify="left", pad_edge=False)
    # a unit's id (a unique prefix: any command taking UOW_ID accepts it) is folded only when
    # longer than its column, the interval never; the other cells wrap between words
    fits = unit_column(table, prefixes.values(), console.width,
                       others=50 + (63 if wide else 0), least=14)
    table.add_column("interval", no_wrap=True)
    for column in ("health", "attempt", "evidence (age)", *(("job id",) if wide else ())):
        table.add_column(column, overflow="fold", no_wrap=column == "job id")
    table.add_column("decision now", overflow="fold",
                     max_width=last_width(prefixes.values(), console.width,
                                          others=50 + (63 if wide else 0), least=14))
    for row in rows:
        attempt = "-" if row["attempt"] is None else f"#{row['attempt']} {row['outcome']}"
        if row["basis"] == "asserted":
            said = wording.resolution_said(row["asserted"], row["outcome"])
            attempt += "\n" + shown(wording.asserted_by(row["assertedBy"], row["assertion"],
                                                       said))
        source = row["source"]
        if source is not None and source.startswith(OPERATOR_SOURCE_PREFIX):
            source = wording.asserted_by(source[len(OPERATOR_SOURCE_PREFIX):])
        evidence = "-" if source is None else f"{shown(source)} ({row['ageText']})"
        decision = row["nextAction"] or "-"
        if row["note"] and (row["nextAction"] or row["needsAttention"]):
            decision += f"\n[dim]{shown(row['note'])}[/]"
        table.add_row(
            unit_cell(prefixes[row["id"]], fits), Interval.parse(row["interval"]).short,
            row["health"] or "-", attempt, evidence,
            *((row["jobId"] or "-",) if wide else ()), decision,
        )
    console.print(table)
    if not wide and any(row["jobId"] for row in rows):
        console.print(f"Job ids: `twice explain UNIT` or --json (the table shows them from "
                      f"{WIDE} columns up).", markup=False, highlight=False)
    console.print("Decisions are the planner's over recorded evidence; nothing was executed.")
    if any(row["health"] == "verified" for row in rows):
        console.print("verified: the engine checked the output (acceptance, then the partition "
                      "fingerprint: the lab's validate-output step) before recording the "
                      "success; nothing to do, and its evidence does not go stale.",
                      markup=False, highlight=False)
    if any(row["basis"] == "asserted" for row in rows):
        console.print(f"Outcomes {wording.ASSERTED_BY_OPERATOR} were resolved by hand (twice "
                      "resolve): a person's word, not observed by twice or a service.")
