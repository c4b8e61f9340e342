"""``twice resolve UOW_ID --as succeeded|failed|failed-after-acting --note TEXT``: an operator
settles an outcome.

When twice cannot see a task's effects (no owned destination, no ``reconcile=``, not
``safe_repeat``), an attempt cut off by a crash or a timeout stays ``unknown`` until a person
checks by hand. This command records what they found, in one ledger transaction: the attempt
(default: the latest, which must be ``unknown`` or ``running``) is closed as ``succeeded``, or
as ``failed-transient`` for either failure, and an observation ``resolved-<as>`` from
``operator:<name>`` keeps the assertion and the note. What the assertion means for the next
run is one rule (``twice.core.resolution``): ``succeeded`` is done, ``failed`` (the effect did
not happen) is executed by the next run with no other step, ``failed-after-acting`` (a partial
effect) is held until ``--repeat``. Every report shows it as "asserted by an operator", with
the name and the note, never as verified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, ledger_option, operator_name
from twice.core.resolution import NEXT_RUN_DOES, RESOLUTION_OUTCOMES, next_run_after
from twice.errors import InputError

if TYPE_CHECKING:
    from twice.ledger import ResolutionOutcome

EPILOG = """\b
What the next run does:
  --as succeeded            the effect happened: not run again (unless --force, and
                            --repeat for a task that is not safe_repeat)
  --as failed               the effect did not happen: the next run executes it, no
                            --repeat or other step needed
  --as failed-after-acting  it acted, then failed (e.g. half the mails went out): the
                            next run holds it until you name it with --repeat TASK

\b
Examples:
  twice resolve funds.load.20261201T0000.3c6a --as succeeded \\
      --note "checked warehouse.positions: 2026-12-01 has the expected 18,204 rows"
  twice resolve funds.load.20261201T0000.3c6a --as failed --attempt 2 \\
      --note "no load job in the BigQuery history for that id" --operator alice
  twice resolve desk.notify.20261201T0000.9f2e --as failed-after-acting \\
      --note "gateway log: 40 of 90 mails sent, then 503s" --operator alice
"""


@click.command("resolve", epilog=EPILOG)
@click.argument("uow_id")
@click.option("--as", "outcome", required=True, type=click.Choice(RESOLUTION_OUTCOMES),
              help="What you found: the attempt's effect happened (succeeded), did not happen "
                   "(failed: the next run executes it), or happened in part before it failed "
                   "(failed-after-acting: the next run holds it until --repeat).")
@click.option("--note", default=None, metavar="TEXT",
              help="What you checked and what it showed (required; kept with the resolution).")
@click.option("--attempt", type=int, default=None, metavar="N",
              help="Attempt to resolve (default: the latest, which must be unknown or running).")
@click.option("--operator", default=None, metavar="NAME",
              help="Who resolves it (default: $USER, else 'operator').")
@ledger_option()
@json_option()
@exit_on_error("twice resolve")
def resolve(uow_id: str, outcome: str, note: str | None, attempt: int | None,
            operator: str | None, ledger_url: str | None, as_json: bool) -> None:
    """Record an operator's resolution of an attempt twice could not settle (asserted, not
    observed)."""
    from twice.cli.ledger_decide import open_existing_ledger, unit_id
    from twice.ledger import LedgerError, LedgerStorageError, LedgerUnavailableError

    if note is None or not note.strip():
        raise InputError("--note: say what you checked and what it showed (e.g. \"row count of "
              "warehouse.positions 2026-12-01 matches the source\"); it is kept with the "
              "resolution")
    if attempt is not None and attempt < 1:
        raise InputError(f"--attempt: attempts are numbered from 1, got {attempt}")
    name = operator_name(operator, recorded_with="the resolution")
    try:
        ledger = open_existing_ledger(ledger_url, writes=True)
    except InputError as exc:
        raise InputError(f"--ledger: {exc}") from exc
    with ledger:
        try:
            uow_id = unit_id(ledger, uow_id)
            record = ledger.record_resolution(
                uow_id, attempt=attempt, outcome=cast("ResolutionOutcome", outcome),
                note=note, operator=name,
            )
        except (LedgerUnavailableError, LedgerStorageError):
            raise  # the storage failed, not the input: exit code of its type
        except LedgerError as exc:
            field = f"--attempt {attempt}" if attempt is not None else "UOW_ID (latest attempt)"
            if exc.field == "operator":
                field = "--operator"
            raise InputError(f"{field}: {exc}") from exc
    observation = record.observation
    previous = observation.detail.get("previous_outcome")
    if as_json:
        echo(jsonkeys.dumps({
            "uow_id": record.uow_id,
            "attempt": record.attempt.number,
            "asserted": record.outcome,
            "attemptOutcome": record.attempt.outcome,
            "previousOutcome": previous,
            "operator": record.operator,
            "note": record.note,
            "source": observation.source,
            "state": observation.state,
            "seq": observation.seq,
            "resolvedAt": record.resolved_at.isoformat(),
            "repeated": record.repeated,
            "basis": "asserted",
        }, sort_keys=True))
        return
    from twice.reports import wording

    if record.repeated:
        echo(f"Attempt {record.attempt.number} of {record.uow_id} was already resolved as "
             f"{record.outcome} at {wording.instant(record.resolved_at)}; nothing new "
             "recorded.")
        return
    said = wording.resolution_said(record.outcome, record.attempt.outcome)
    echo(
        f"Resolved attempt {record.attempt.number} of {record.uow_id}: {previous} -> "
        f"{record.attempt.outcome}, {wording.asserted_by(record.operator, record.note, said)}.\n"
        f"Recorded as observation {observation.state} from {observation.source} "
        f"(seq {observation.seq}). Reports show it as asserted by an operator, not verified.\n"
        f"Next run: {NEXT_RUN_DOES[next_run_after(record.outcome)]}."
    )
