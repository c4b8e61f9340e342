"""``twice decide``: the retry-window planner on the command line.

Without options it is the lab program: the lab's JSON on stdin, the lab's JSON on stdout, exit 2
and an ``Invalid retry fixture: ...`` line on stderr for invalid input. ``--extended`` accepts the
general format (ISO-8601 times, no task cap) and ``--format table`` prints the reason for each
decision. ``--ledger URL`` decides over the evidence recorded in a ledger.
"""

from __future__ import annotations

import sys

import click

EPILOG = """\b
Examples:
  twice decide < labs/pde-retry-window/case.json
  twice decide --format table < labs/pde-retry-window/case.json
  twice decide --extended --format table < incident.json
  twice decide --ledger twice-ledger.db --as-of 2026-12-01T05:30:00Z

\b
Precedence (first match wins): refresh-observation (evidence older than maxObservationAge),
observe-running, reconcile-remote (unknown outcome), validate-output (succeeded),
repair-cause (terminal), attempts-exhausted (maxAttempts counts the first try),
reconcile-effects (safeRepeat false), deadline-infeasible (earliest start + duration +
validation after the deadline), wait-backoff, retry-eligible.
Backoff before attempt n+1 = min(maxDelay, initialDelay * multiplier^(n-1)).
The output only decides: jobsExecuted, idempotencyProven, completionGuaranteed and
productionApproval are always false.
"""


@click.command(epilog=EPILOG)
@click.option("--extended", is_flag=True,
              help="General format: ISO-8601 instants and durations or integer seconds, "
                   "no 20-task cap, a reason per decision.")
@click.option("--format", "output_format", type=click.Choice(["json", "table"]), default="json",
              show_default=True, help="json is the lab's exact output; table is for people.")
@click.option("--ledger", "ledger_url", default=None, metavar="URL",
              help="Decide over a ledger's recorded evidence instead of stdin.")
@click.option("--as-of", "as_of", default=None, metavar="INSTANT",
              help="With --ledger: the planner's now (ISO-8601); default the current time.")
@click.option("--json", "as_json", is_flag=True, help="With --ledger: JSON output.")
def decide(extended: bool, output_format: str, ledger_url: str | None, as_of: str | None,
           as_json: bool) -> None:
    """Decide what to do next for each task, from its evidence.

    Reads a retry fixture (the pde-retry-window lab's JSON) on stdin and prints one decision per
    task, sorted by id. The default mode is byte-compatible with the lab program.
    """
    if ledger_url is not None:
        from twice.cli.ledger_decide import decide_over_ledger

        sys.exit(decide_over_ledger(ledger_url, as_of, "json" if as_json else output_format))
    if extended:
        from twice.interop.extended import main as extended_main

        sys.exit(extended_main(output_format))
    if output_format == "table":
        from twice.interop.decision_table import lab_table

        sys.exit(lab_table())
    from twice.interop.lab import main as lab_main

    sys.exit(lab_main())
