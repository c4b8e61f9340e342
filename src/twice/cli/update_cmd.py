"""``twice update``: a short English status update for the incident meeting.

The scope's headline first (``done: 28/28 verified`` when every unit is verified), then what
needs attention, what is confirmed, what is in progress, the planner's next action and the time
of the next evidence, in a few lines, stating only what the ledger has evidence for. ``--json``
prints the health document every report shares (``twice.reports.health.health_document``).
"""

from __future__ import annotations

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, ledger_option, pipeline_name_option
from twice.errors import InputError


@click.command("update", epilog="""\b
Examples:
  twice update --ledger twice-demo/run/ledger.db
  twice update --ledger twice-demo/run/ledger.db --pipeline funds_positions --json
""")
@ledger_option()
@pipeline_name_option()
@click.option("--as-of", "as_of", default=None, metavar="INSTANT",
              help="Update as of this ISO-8601 instant (default: now).")
@json_option("JSON output: the headline and every unit's health.")
@exit_on_error("twice update")
def update(ledger_url: str | None, pipeline: str | None, as_of: str | None,
           as_json: bool) -> None:
    """Print a short status update: headline, attention, next action, next evidence."""
    from twice.cli.ledger_decide import parse_instant_arg
    from twice.cli.ledger_open import check_ledger_url
    from twice.reports import ReportError, health_document, load_evidence, render_update

    check_ledger_url(ledger_url)  # a URL no ledger can have is refused naming --ledger
    try:
        evidence = load_evidence(
            ledger_url, as_of=parse_instant_arg(as_of, "--as-of"), pipeline=pipeline
        )
    except ReportError as exc:
        raise InputError(str(exc)) from exc
    if as_json:
        echo(jsonkeys.dumps(health_document(evidence, "update"), sort_keys=True))
        return
    echo(render_update(evidence), nl=False)
