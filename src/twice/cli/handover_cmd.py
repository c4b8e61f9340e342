"""``twice handover``: a Markdown runbook for the operator taking over (RUN handover).

With ``--pipeline-file`` the runbook also lists what only the definition knows: escalation
owners, retry policies, acceptance criteria and deadlines. Without it those sections say they are
not known rather than guessing. ``--json`` writes the health document every report shares
(``twice.reports.health.health_document``) instead of the Markdown.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, ledger_option, pipeline_file_option, pipeline_name_option
from twice.errors import InputError

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline
    from twice.ledger.records import UnitRecord


def _deadlines(pipeline: Pipeline) -> Callable[[UnitRecord], datetime | None]:
    """The pipeline's deadline per unit; None where the definition cannot say."""
    from twice.define.pipeline import PipelineError

    def deadline_for(unit: UnitRecord) -> datetime | None:
        try:
            return pipeline.deadline_for(unit.interval)
        except PipelineError:
            return None

    return deadline_for


@click.command("handover", epilog="""\b
Examples:
  twice handover --ledger twice-demo/run/ledger.db -o runbook.md
  twice handover --ledger twice-demo/run/ledger.db --pipeline funds_positions --json
""")
@ledger_option()
@pipeline_file_option("The pipeline's .py file: adds owners, policies and acceptance criteria "
                      "(and, without --pipeline, keeps its pipeline's units).")
@pipeline_name_option()
@click.option("--as-of", "as_of", default=None, metavar="INSTANT",
              help="Evidence as of this ISO-8601 instant (default: now).")
@click.option("-o", "--output", default=None, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Write the runbook here instead of standard output.")
@json_option("JSON instead of Markdown: the headline and every unit's health.")
@exit_on_error("twice handover")
def handover(ledger_url: str | None, pipeline_file: str | None, pipeline: str | None,
             as_of: str | None, output: Path | None, as_json: bool) -> None:
    """Write a Markdown runbook: identifiers, jobs, sources, errors, limits, owners, examples."""
    from twice.cli.ledger_decide import parse_instant_arg
    from twice.cli.ledger_open import check_ledger_url, check_report_output
    from twice.reports import ReportError, health_document, load_evidence, render_handover

    definition = None
    if pipeline_file is not None:
        from twice.define.load import PipelineFileError, load_pipeline

        try:
            definition = load_pipeline(pipeline_file)
        except PipelineFileError as exc:
            raise InputError(str(exc)) from exc
    name = pipeline if pipeline is not None else (definition.name if definition else None)
    resolved = check_ledger_url(ledger_url)  # a URL no ledger can have: refused, --ledger
    if output is not None:
        check_report_output(output, resolved, "--output")
    try:
        evidence = load_evidence(
            ledger_url,
            as_of=parse_instant_arg(as_of, "--as-of"),
            pipeline=name,
            deadline=_deadlines(definition) if definition is not None else None,
        )
    except ReportError as exc:
        raise InputError(str(exc)) from exc
    if as_json:
        text = jsonkeys.dumps(health_document(evidence, "handover"), sort_keys=True) + "\n"
    else:
        text = render_handover(evidence, definition)
    if output is None:
        echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {output}: {exc.strerror or exc}") from exc
    what = "health document" if as_json else "runbook"
    echo(f"wrote {output}: {what} for {len(evidence.units)} units of work", err=as_json)
