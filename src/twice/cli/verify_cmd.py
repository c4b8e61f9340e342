"""``twice verify``: recompute every recorded partition's fingerprint and compare with the ledger.

The ledger's latest fingerprint version of each partition is what a run or backfill last wrote;
if the destination no longer matches (rows deleted, duplicated or edited behind twice's back),
this says which partition and how, and exits 1. Bad input exits 2; exit 0 means all matched.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2


def _partition(text: str) -> Any:
    """The ledger's partition key back into a partition spec (an interval, else the value)."""
    from twice.interval import Interval, IntervalError

    try:
        return Interval.parse(text) if "/" in text else text
    except IntervalError:
        return text


@click.command("verify")
@click.option("--ledger", "ledger_url", default=None, metavar="URL",
              help="Ledger URL (default: $TWICE_LEDGER or ./twice-ledger.db).")
@click.option("--destination", default=None, metavar="SPEC",
              help="Only partitions of this destination (as recorded).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def verify(ledger_url: str | None, destination: str | None, as_json: bool) -> None:
    """Recompute fingerprints of recorded partitions and compare with the ledger's latest."""
    from twice.destinations import DestinationError, open_destination
    from twice.fingerprint import Fingerprint
    from twice.fingerprint import verify as check
    from twice.ledger import Ledger, LedgerError

    try:
        ledger = Ledger.open(ledger_url)
    except (LedgerError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    with ledger:
        records = ledger.latest_fingerprints(destination)
    if not records:
        click.echo("error: the ledger has no recorded fingerprints"
                   + (f" for {destination}" if destination else ""), err=True)
        sys.exit(EXIT_BAD_INPUT)
    results = []
    for record in records:
        entry: dict[str, Any] = {"destination": record.destination,
                                 "partition": record.partition, "version": record.version,
                                 "recorded_rows": record.row_count,
                                 "recorded_checksum": record.checksum}
        try:
            recorded = Fingerprint(record.row_count, record.checksum, tuple(record.columns or ()),
                                   record.algorithm or "twice-fp-v1")
            with open_destination(record.destination) as dest:
                result = check(dest, _partition(record.partition), recorded)
            entry.update(matches=result.matches, rows=result.current.row_count,
                         checksum=result.current.checksum, reasons=list(result.reasons))
        except DestinationError as exc:
            entry.update(matches=False, rows=None, checksum=None, reasons=[str(exc)])
        results.append(entry)
    mismatches = [r for r in results if not r["matches"]]
    if as_json:
        click.echo(json.dumps({"ok": not mismatches, "partitions": results}, sort_keys=True))
    else:
        for r in results:
            state = "ok" if r["matches"] else "MISMATCH: " + "; ".join(r["reasons"])
            click.echo(f"{r['destination']}  {r['partition']}  v{r['version']}  {state}")
        click.echo(f"verified {len(results) - len(mismatches)}/{len(results)} partitions "
                   "match the ledger")
    sys.exit(EXIT_MISMATCH if mismatches else 0)
