"""``twice report``: one self-contained HTML page of what the ledger recorded.

The page needs no network (inline CSS and SVG, no fonts or scripts), so it can be mailed or
opened on an isolated operations host. It opens with what needs attention and a per-interval
grid of every unit's health. ``--json`` prints the health document every report shares
(``twice.reports.health.health_document``), with or without ``--html``. A missing or foreign
ledger is refused with exit 2, never silently created: an empty report would look like "nothing
happened".
"""

from __future__ import annotations

from pathlib import Path

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, ledger_option, pipeline_name_option
from twice.errors import InputError

EPILOG = """\b
Examples:
  twice report --html report.html
  twice report --html incident.html --ledger sqlite:///runs/ledger.db --pipeline funds_positions
  twice report --html at-0530.html --as-of 2026-12-02T05:30:00Z
  twice report --json > health.json

\b
--as-of shows what was known then: later evidence is left out and every age is measured from it.
Each unit's state is one health word (verified, unknown, held, refused, failed, ...); each fact
is marked decided, executed, observed, verified, assumed by the caller (e.g. safe_repeat) or
asserted by an operator.
"""


@click.command("report", epilog=EPILOG)
@click.option("--html", "html_path", default=None, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path), help="Where to write the page.")
@ledger_option()
@pipeline_name_option()
@click.option("--as-of", "as_of", default=None, metavar="INSTANT",
              help="Report as of this ISO-8601 instant (default: now).")
@click.option("--deadline", default=None, metavar="INSTANT",
              help="Deadline for units whose decisions recorded none (marked as given).")
@json_option("Print the headline and every unit's health as JSON (standard output).")
@exit_on_error("twice report")
def report(html_path: Path | None, ledger_url: str | None, pipeline: str | None,
           as_of: str | None, deadline: str | None, as_json: bool) -> None:
    """Write a self-contained HTML report of the runs and backfills in the ledger."""
    from twice.cli.ledger_decide import parse_instant_arg
    from twice.cli.ledger_open import check_ledger_url, check_report_output
    from twice.reports import ReportError, health_document, load_evidence, render_html

    if html_path is None and not as_json:
        raise InputError("give --html FILE (the page) and/or --json (the health document)")

    resolved = check_ledger_url(ledger_url)  # a URL no ledger can have: refused, --ledger
    if html_path is not None:
        check_report_output(html_path, resolved, "--html")
    try:
        evidence = load_evidence(
            ledger_url,
            as_of=parse_instant_arg(as_of, "--as-of"),
            pipeline=pipeline,
            deadline=parse_instant_arg(deadline, "--deadline"),
        )
    except ReportError as exc:
        raise InputError(str(exc)) from exc
    if html_path is not None:
        page = render_html(evidence)
        try:
            html_path.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write {html_path}: {exc.strerror or exc}") from exc
        echo(f"wrote {html_path}: {len(evidence.units)} units of work, "
             f"{len(evidence.partitions)} fingerprinted partitions, as of "
             f"{evidence.as_of.isoformat()}", err=as_json)
    if as_json:
        document = health_document(evidence, "report")
        document["html"] = None if html_path is None else str(html_path)
        echo(jsonkeys.dumps(document, sort_keys=True))
