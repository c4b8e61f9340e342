"""``twice intermediates``: the catalog of materialized intermediates and what keeping them costs.

Lists every stored version with its owner, status, size, expiry and reuse count, and the
storage-vs-recompute trade-off priced from the measurements the ledger recorded (prices are
options with documented defaults, see ``twice.CostModel``). ``--expire`` first
deletes the slices of active versions past their retention and records each expiry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error, finish
from twice.cli.options import FiniteRange, json_option, ledger_option
from twice.errors import InputError

if TYPE_CHECKING:
    from twice.engine.intermediates import CostModel, Expiry
    from twice.ledger import IntermediateRecord, Ledger


@click.command("intermediates", epilog="""\b
Examples:
  twice intermediates --ledger twice-demo/run/ledger.db
  twice intermediates --ledger "$TWICE_LEDGER" --status active --expire --json
""")
@ledger_option()
@click.option("--name", default=None, help="Only this intermediate.")
@click.option("--status", default=None, type=click.Choice(["active", "superseded", "expired"]),
              help="Only versions in this status.")
@click.option("--expire", "do_expire", is_flag=True,
              help="Delete the data of active versions past retention and record it, first.")
@click.option("--storage-price", type=FiniteRange(min=0), default=None, metavar="USD",
              help="Storage price per GB-month (default 0.023).")
@click.option("--compute-price", type=FiniteRange(min=0), default=None, metavar="USD",
              help="Compute price per hour (default 0.20).")
@click.option("--scan-price", type=FiniteRange(min=0), default=None, metavar="USD",
              help="Price per TB scanned (default 6.25).")
@click.option("--expected-reuses", type=FiniteRange(min=0), default=None, metavar="N",
              help="Reuses expected within the retention before any happened (default 1).")
@json_option("Print one JSON object.")
@exit_on_error("twice intermediates")
def intermediates(ledger_url: str | None, name: str | None, status: str | None,
                  do_expire: bool, storage_price: float | None, compute_price: float | None,
                  scan_price: float | None, expected_reuses: float | None,
                  as_json: bool) -> None:
    """Materialized intermediates: owner, version, status, size, expiry, reuses, trade-off."""
    from twice.cli.ledger_decide import open_existing_ledger
    from twice.engine.intermediates import CostModel, IntermediateError

    prices = {"storage_usd_per_gb_month": storage_price, "compute_usd_per_hour": compute_price,
              "scan_usd_per_tb": scan_price, "expected_reuses": expected_reuses}
    try:
        cost = CostModel(**{k: v for k, v in prices.items() if v is not None})
    except IntermediateError as exc:
        raise InputError(_option_names(str(exc))) from exc
    with open_existing_ledger(ledger_url, writes=do_expire) as ledger:
        expired = _expire(ledger, name) if do_expire else []
        entries = ledger.intermediates(name=name, status=status)  # type: ignore[arg-type]
        rows = [_row(ledger, entry, cost) for entry in entries]
        label, now = ledger.url, ledger.now()
    if as_json:
        echo(jsonkeys.dumps({
            "ledger": label, "asOf": now.isoformat(), "intermediates": rows,
            "expired": [_expiry_dict(e) for e in expired],
        }, sort_keys=True))
    else:
        _print(label, rows, expired)
    finish(not any(e.error for e in expired))


def _option_names(message: str) -> str:
    """Name the CLI option rather than the CostModel field in a bad-price message."""
    for field, option in (("storage_usd_per_gb_month", "--storage-price"),
                          ("compute_usd_per_hour", "--compute-price"),
                          ("scan_usd_per_tb", "--scan-price"),
                          ("expected_reuses", "--expected-reuses")):
        message = message.replace(f"cost {field}", option)
    return message


def _expire(ledger: Ledger, name: str | None) -> list[Expiry]:
    from twice.engine.intermediates import expire

    return expire(ledger, name=name)


def _row(ledger: Ledger, entry: IntermediateRecord, cost: CostModel) -> dict[str, Any]:
    from twice.engine.intermediates import tradeoff

    events = ledger.intermediate_events(entry.name, entry.version)
    trade = tradeoff(entry, events, cost) if entry.status == "active" else None
    return {
        "name": entry.name, "version": entry.version, "owner": entry.owner,
        "status": entry.status, "statusReason": entry.status_reason,
        "location": entry.location, "partition": entry.partition,
        "rows": entry.row_count, "checksum": entry.checksum, "bytesStored": entry.bytes_stored,
        "createdAt": entry.created_at.isoformat(), "expiresAt": entry.expires_at.isoformat(),
        "reuseCount": entry.reuse_count, "materializations": entry.materializations,
        "refusals": sum(1 for e in events if e.action == "refused"),
        "uowId": entry.uow_id, "tradeoff": None if trade is None else trade.to_dict(),
        "summary": f"not stored any more ({entry.status})" if trade is None else trade.line(),
    }


def _expiry_dict(expiry: Expiry) -> dict[str, Any]:
    return {"name": expiry.name, "version": expiry.version, "location": expiry.location,
            "partition": expiry.partition, "rowsDeleted": expiry.rows_deleted,
            "error": expiry.error}


def _print(label: str, rows: list[dict[str, Any]], expired: list[Expiry]) -> None:
    from twice.engine.intermediates import format_bytes

    for item in expired:
        if item.error:
            echo(f"NOT expired {item.name} {item.version}: {item.error}")
        else:
            echo(f"expired {item.name} {item.version}: deleted {item.rows_deleted} rows "
                 f"from {item.location} [{item.partition}]")
    if not rows:
        echo(f"{label}: no materialized intermediates recorded")
        return
    echo(f"{label}: {len(rows)} intermediate version(s)")
    for row in rows:
        echo(f"{row['name']}  version {row['version']}  [{row['status']}]  "
             f"owner {row['owner']}")
        echo(f"  stored   {row['location']} [{row['partition']}]: {row['rows']} rows, "
             f"{format_bytes(row['bytesStored'])}, checksum {row['checksum']}")
        echo(f"  kept     until {row['expiresAt']} ({row['statusReason']})")
        echo(f"  used     {row['reuseCount']} reuse(s), {row['refusals']} refusal(s), "
             f"{row['materializations']} materialization(s)")
        echo(f"  cost     {row['summary']}")
