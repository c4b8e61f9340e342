"""``twice adopt DESTINATION --ledger URL --note TEXT``: make a destination belong to a ledger.

A destination belongs to one ledger: the one that first wrote it with twice, or the one that
adopted it last (``twice.destinations.commits.check_ledger``); writes stamped by any other
ledger are refused (exit 3), whatever their fencing tokens. When the other ledger is the one
that should own it from now on (a ledger restored from a backup, a move to a new ledger), an
operator adopts it, in two records: the destination commits an ``adopt`` record carrying this
ledger's identity under a fencing token from this ledger's sequence, moved above every token
the destination holds (so this ledger's later writes are never fenced by the earlier one's);
the ledger keeps who adopted it, why, and from which ledger (``Ledger.adoptions``). From then
on the earlier ledger's writes are refused. Adopting again is harmless: nothing new is
written to a destination that already belongs to this ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, ledger_option, operator_name
from twice.errors import InputError, UnavailableError

if TYPE_CHECKING:
    from twice.destinations import Destination
    from twice.destinations.commits import CommitRecord
    from twice.ledger import Ledger

EPILOG = """\b
Examples:
  twice adopt "sqlite:///data/warehouse.db?partition_column=day#positions" \\
      --ledger /data/ledger.db --note "ledger restored from the 2026-12-01 backup"
  twice adopt "parquet:///lake/positions?partition_column=day" --ledger "$TWICE_LEDGER" \\
      --note "moved to the shared ledger" --operator alice
"""

#: ``uow_id`` of an adoption's stamp and record: it is no unit of work's write.
ADOPT_UOW = "twice-adopt"
_TRIES = 3  # a write that lands between reading the tokens and adopting: read them again


@click.command("adopt", epilog=EPILOG)
@click.argument("destination")
@click.option("--note", default=None, metavar="TEXT",
              help="Why this ledger is to own the destination (required; kept on both sides).")
@click.option("--operator", default=None, metavar="NAME",
              help="Who adopts it (default: $USER, else 'operator').")
@ledger_option()
@json_option()
@exit_on_error("twice adopt")
def adopt(destination: str, note: str | None, operator: str | None, ledger_url: str | None,
          as_json: bool) -> None:
    """Make DESTINATION belong to this ledger; the ledger that owned it is refused from then on
    (recorded in the destination and in the ledger)."""
    from twice.cli.ledger_decide import open_existing_ledger
    from twice.core.secrets import redact, remember
    from twice.destinations import DestinationError, open_destination
    from twice.destinations.commits import FencedWriteError
    from twice.destinations.errors import DestinationUnavailableError

    if note is None or not note.strip():
        raise InputError("--note: say why this ledger is to own the destination (e.g. \"ledger "
                         "restored from the 2026-12-01 backup\"); it is kept with the adoption")
    name = operator_name(operator, recorded_with="the adoption")
    remember(destination)
    try:
        ledger = open_existing_ledger(ledger_url, writes=True)
    except InputError as exc:
        raise InputError(f"--ledger: {exc}") from exc
    with ledger:
        try:
            dest = open_destination(destination)
        except DestinationUnavailableError as exc:  # a service that failed (exit 1)
            raise UnavailableError(redact(str(exc))) from None
        except DestinationError as exc:
            raise InputError(f"DESTINATION: {redact(str(exc))}") from None
        try:
            result = _adopt(dest, ledger, note.strip(), name)
        except FencedWriteError:
            raise  # writes kept landing above the token taken: a conflict (exit 3)
        except DestinationError as exc:
            raise UnavailableError(redact(str(exc))) from None
        finally:
            dest.close()
    record, previous, new = result
    if as_json:
        echo(jsonkeys.dumps({
            "destination": dest.spec, "ledger": ledger.identity, "ledgerUrl": ledger.url,
            "previousLedger": previous.ledger if previous else None,
            "previousLedgerUrl": (previous.ledger_at or None) if previous else None,
            "token": record.token, "adopted": new, "operator": name, "note": note.strip(),
        }, sort_keys=True))
        return
    if not new:
        echo(f"{dest.spec} already belongs to ledger {ledger.identity} ({ledger.url}); "
             "nothing new written.")
        return
    before = "no ledger" if previous is None else (
        f"ledger {previous.ledger}" + (f" ({previous.ledger_at})" if previous.ledger_at else ""))
    echo(f"Adopted {dest.spec} into ledger {ledger.identity} ({ledger.url}) from {before}, "
         f"under fencing token {record.token}; writes stamped by any other ledger are refused "
         "from now on.")


def _adopt(dest: Destination, ledger: Ledger, note: str, operator: str
           ) -> tuple[CommitRecord, CommitRecord | None, bool]:
    """(the adoption record, the record that made the destination belong to its earlier
    ledger or None, whether anything new was written)."""
    from twice.destinations.commits import FencedWriteError, WriteStamp, ledger_owner

    if not ledger.identity:
        raise InputError(f"--ledger: ledger {ledger.url} has no identity (opened read-only?)")
    for tries in range(1, _TRIES + 1):
        records = dest.commit_records()
        if not records and dest.schema() is None:
            raise InputError(f"DESTINATION: {dest.spec} has no table and no commit records: "
                             "there is nothing to adopt (a typo?); its first write claims it")
        previous = ledger_owner(records)
        if previous is not None and previous.ledger == ledger.identity:
            _remember(ledger, dest, previous, None)  # a crash after the destination's record
            return previous, None, False
        top = max((r.token for r in records), default=0)
        stamp = WriteStamp(
            uow_id=ADOPT_UOW, fence_key="", generation=0, attempt=0,
            token=ledger.fencing_token_above(top), ledger=ledger.identity,
            ledger_at=ledger.url,
        )
        try:
            record = dest.adopt(stamp, note=note, operator=operator)
        except FencedWriteError:
            if tries == _TRIES:
                raise
            continue  # a write landed since the tokens were read
        _remember(ledger, dest, record, previous)
        return record, previous, True
    raise AssertionError("unreachable")  # pragma: no cover


def _remember(ledger: Ledger, dest: Destination, record: CommitRecord,
              previous: CommitRecord | None) -> None:
    """Record the adoption in the ledger, unless it already holds this one (by token)."""
    from twice.destinations.commits import ADOPT_MODE

    if record.mode != ADOPT_MODE:
        return  # the destination belongs to this ledger by its first write, not an adoption
    if any(a.token == record.token for a in ledger.adoptions(dest.spec)):
        return
    ledger.record_adoption(
        dest.spec, previous="" if previous is None else previous.ledger,
        previous_at="" if previous is None else previous.ledger_at, token=record.token,
        operator=str(record.extra.get("operator") or ""), note=str(record.extra.get("note") or ""),
    )
