"""``twice explain UOW_ID``: the full recorded timeline of one unit of work, in order.

Each line is one ledger event at its own time (attempts at their start and finish, observations
at their observation time), so an operator can retell what happened without the author. The
first line after the identity is the unit's health, in the vocabulary every report uses
(``twice.reports.health``).
"""

from __future__ import annotations

from typing import Any

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, ledger_option


@click.command(epilog="""\b
UOW_ID may be any unique prefix of a unit of work id (as status shows it).
\b
Examples:
  twice explain funds_positions.load.20261125 --ledger twice-demo/run/ledger.db
  twice explain funds_positions.load.20261125T0000.df0a5bd71308 --json
""")
@click.argument("uow_id")
@ledger_option()
@json_option()
@exit_on_error("twice explain")
def explain(uow_id: str, ledger_url: str | None, as_json: bool) -> None:
    """Full recorded timeline of one unit of work."""
    from twice.cli.ledger_decide import open_existing_ledger, unit_id
    from twice.engine.evidence import iso

    with open_existing_ledger(ledger_url) as ledger:
        unit = ledger.unit(unit_id(ledger, uow_id))
        assert unit is not None
        events = ledger.timeline(unit.uow_id)
        from twice.reports import gather

        status = gather(ledger, pipeline=unit.pipeline, task=unit.task,
                        starting=unit.interval_start).unit(unit.uow_id).status
    rows: list[dict[str, Any]] = [
        {
            "seq": event.seq,
            "at": iso(event.at),
            "kind": event.kind,
            "attempt": event.attempt,
            "summary": event.summary,
            "detail": dict(event.detail),
            "assertedBy": _asserted_by(event),
        }
        for event in events
    ]
    # A ledger written before twice kept only public destination identities may still hold a
    # password (issue 19): whatever explain prints is masked (twice.core.secrets.redact).
    from twice.core.secrets import redact

    if as_json:
        echo(redact(jsonkeys.dumps({"uow_id": unit.uow_id, "identity": unit.to_unit_of_work()
                                .identity(), "health": str(status.state),
                                "healthBasis": status.basis, "healthReason": status.text,
                                "events": rows}, sort_keys=True, default=str)))
        return
    from rich.markup import escape

    from twice.cli.console import make_console, shown

    console = make_console()
    console.print(f"[bold]{unit.uow_id}[/]  {unit.pipeline}.{unit.task}  {unit.interval}")
    console.print(
        f"  input {unit.input_partition or '-'} version {unit.input_version or '-'}, "
        f"transform {unit.transform_version}, destination {redact(unit.destination) or '-'}"
    )
    from twice.reports.health import BASIS_LABEL

    basis = "" if status.basis == status.state else f" ({BASIS_LABEL[status.basis]})"
    console.print(f"  health: [bold]{status.state}[/]{escape(basis)}: "
                  f"{shown(status.text)}")
    for row in rows:
        attempt = f" #{row['attempt']}" if row["attempt"] is not None else ""
        tag = "" if row["assertedBy"] is None else "[magenta]\\[asserted][/] "
        console.print(
            f"{row['at']}  [cyan]{row['kind']:<17}[/]{attempt:<4} {tag}"
            f"{shown(redact(row['summary']))}"  # one line: no forged entry
        )
    if any(row["assertedBy"] is not None for row in rows):
        console.print("[asserted]: an operator's resolution (twice resolve), a person's word; "
                      "neither twice nor a service observed it.", markup=False)


def _asserted_by(event: Any) -> str | None:
    """The operator whose resolution (``twice resolve``) this event records, if any."""
    from twice.ledger import OPERATOR_SOURCE_PREFIX, resolution_outcome

    detail = event.detail
    source = detail.get("resolved_by")
    if event.kind == "observation":
        source = detail.get("source")
        if not isinstance(source, str) or resolution_outcome(str(detail.get("state")),
                                                             source) is None:
            return None
    if not isinstance(source, str) or not source.startswith(OPERATOR_SOURCE_PREFIX):
        return None
    return source[len(OPERATOR_SOURCE_PREFIX):]
