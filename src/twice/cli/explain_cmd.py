"""``twice explain UOW_ID``: the full recorded timeline of one unit of work, in order.

Each line is one ledger event at its own time (attempts at their start and finish, observations
at their observation time), so an operator can retell what happened without the author. The
first line after the identity is the unit's health, in the vocabulary every report uses
(``twice.reports.health``).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

import click

from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, ledger_option
from twice.errors import InputError


@click.command()
@click.argument("uow_id")
@ledger_option()
@json_option()
@exit_on_error("twice explain")
def explain(uow_id: str, ledger_url: str | None, as_json: bool) -> None:
    """Full recorded timeline of one unit of work."""
    from twice.cli.ledger_decide import open_existing_ledger
    from twice.engine.evidence import iso

    with open_existing_ledger(ledger_url) as ledger:
        unit = ledger.unit(uow_id)
        if unit is None:
            known = [record.uow_id for record in ledger.units()]
            starting = [name for name in known if name.startswith(uow_id)]
            if len(starting) == 1:
                unit = ledger.unit(starting[0])
            else:
                close = starting or difflib.get_close_matches(uow_id, known, n=3, cutoff=0.5)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise InputError(f"unknown unit of work {uow_id!r}{hint}")
        assert unit is not None
        events = ledger.timeline(unit.uow_id)
        from twice.reports import gather

        status = gather(ledger, pipeline=unit.pipeline).unit(unit.uow_id).status
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
        click.echo(redact(json.dumps({"uow_id": unit.uow_id, "identity": unit.to_unit_of_work()
                                      .identity(), "health": str(status.state),
                                      "healthBasis": status.basis, "healthReason": status.text,
                                      "events": rows}, sort_keys=True, default=str)))
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console(width=240)
    console.print(f"[bold]{unit.uow_id}[/]  {unit.pipeline}.{unit.task}  {unit.interval}")
    console.print(
        f"  input {unit.input_partition or '-'} version {unit.input_version or '-'}, "
        f"transform {unit.transform_version}, destination {redact(unit.destination) or '-'}"
    )
    from twice.reports.health import BASIS_LABEL

    basis = "" if status.basis == status.state else f" ({BASIS_LABEL[status.basis]})"
    console.print(f"  health: [bold]{status.state}[/]{escape(basis)}: {escape(status.text)}")
    for row in rows:
        attempt = f" #{row['attempt']}" if row["attempt"] is not None else ""
        tag = "" if row["assertedBy"] is None else "[magenta]\\[asserted][/] "
        console.print(
            f"{row['at']}  [cyan]{row['kind']:<17}[/]{attempt:<4} {tag}"
            f"{escape(redact(row['summary']))}"
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
