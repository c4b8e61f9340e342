"""``twice update``: a short English status update for the incident meeting.

Confirmed state (with evidence age), outcomes still unknown, the planner's next action and the
time of the next evidence, in a few lines, stating only what the ledger has evidence for.
"""

from __future__ import annotations

import sys

import click

EXIT_BAD_INPUT = 2


@click.command("update")
@click.option("--ledger", "ledger_url", default=None, metavar="URL",
              help="Ledger URL or SQLite path (default: $TWICE_LEDGER or twice-ledger.db).")
@click.option("--pipeline", default=None, metavar="NAME", help="Only this pipeline's units.")
@click.option("--as-of", "as_of", default=None, metavar="INSTANT",
              help="Update as of this ISO-8601 instant (default: now).")
def update(ledger_url: str | None, pipeline: str | None, as_of: str | None) -> None:
    """Print a short status update: confirmed, unknown, next action, next evidence."""
    from twice.reports import ReportError, load_evidence, render_update
    from twice.reports.source import parse_instant_option

    try:
        evidence = load_evidence(
            ledger_url, as_of=parse_instant_option(as_of, "--as-of"), pipeline=pipeline
        )
    except ReportError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(render_update(evidence), nl=False)
