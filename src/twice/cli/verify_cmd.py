"""``twice verify``: recompute every recorded partition's fingerprint and compare with the ledger.

The ledger's latest fingerprint version of each partition is what a run or backfill last wrote;
if the destination no longer matches (rows deleted, duplicated, or any value edited behind
twice's back: fingerprints cover every column, floats included), this says which partition and
how, and exits 1. Each line shows the algorithm and the columns the fingerprint covers. Bad
input exits 2; exit 0 means all matched.
"""

from __future__ import annotations

from typing import Any

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error, finish
from twice.cli.options import json_option, ledger_option
from twice.errors import InputError


def _partition(text: str) -> Any:
    """The ledger's partition key back into a partition spec (an interval, else the value)."""
    from twice.core.interval import Interval, IntervalError

    try:
        return Interval.parse(text) if "/" in text else text
    except IntervalError:
        return text


@click.command("verify", epilog="""\b
Examples:
  twice verify --ledger twice-demo/run/ledger.db
  twice verify --ledger twice-demo/run/ledger.db --json
  twice verify --pipeline-file pipelines/orders.py --destination 'postgresql://etl@db/wh#orders'
""")
@ledger_option()
@click.option("--destination", default=None, metavar="SPEC",
              help="Only partitions of this destination (as recorded; a password in SPEC is "
              "used to connect, never shown).")
@click.option("--pipeline-file", "pipeline_file", default=None, metavar="FILE",
              type=click.Path(dir_okay=False),
              help="Pipeline file whose destinations' credentials to connect with (the ledger "
              "records destinations without passwords).")
@json_option("Print one JSON object.")
@exit_on_error("twice verify")
def verify(ledger_url: str | None, destination: str | None, pipeline_file: str | None,
           as_json: bool) -> None:
    """Recompute fingerprints of recorded partitions and compare with the ledger's latest.

    Each fingerprint is recomputed with the algorithm and over the columns it was recorded
    with (shown); a partition whose values, rows or row count changed since (behind twice's
    back) is a MISMATCH, and any mismatch exits 1. A column added since a partition was
    recorded (--accept-schema-change) is not covered by its fingerprint: it must hold NULL in
    every row of that partition (noted), else it is a MISMATCH. A fingerprint recorded by the older
    twice-fp-v1 still verifies, over its own columns only, and is reported as older.
    Destinations are recorded without passwords: give --pipeline-file (or the engine's own
    sources, e.g. PGPASSWORD or ~/.pgpass) for the credentials.
    """
    from twice.cli.ledger_decide import open_existing_ledger
    from twice.core.secrets import redact, remember
    from twice.destinations import DestinationError, open_destination
    from twice.destinations.fingerprint import verify as check
    from twice.engine.verification import as_fingerprint

    if pipeline_file is not None:
        from twice.define.load import load_pipeline

        load_pipeline(pipeline_file)  # its tasks register their destinations' credentials
    if destination is not None:
        destination = remember(destination)  # recorded under its public identity
    with open_existing_ledger(ledger_url) as ledger:  # a typo'd path is not created
        records = ledger.latest_fingerprints(destination)
    if not records:
        raise InputError("the ledger has no recorded fingerprints"
                         + (f" for {destination}" if destination else ""))
    results = []
    for record in records:
        recorded = as_fingerprint(record)
        entry: dict[str, Any] = {"destination": record.destination,
                                 "partition": record.partition, "version": record.version,
                                 "recorded_rows": record.row_count,
                                 "recorded_checksum": record.checksum,
                                 "algorithm": recorded.algorithm,
                                 "columns": list(recorded.columns), "older": recorded.older,
                                 "note": ""}
        try:
            with open_destination(record.destination) as dest:
                result = check(dest, _partition(record.partition), recorded, every_column=True)
            entry.update(matches=result.matches, rows=result.current.row_count,
                         checksum=result.current.checksum, reasons=list(result.reasons),
                         note=result.note)
        except DestinationError as exc:
            entry.update(matches=False, rows=None, checksum=None, reasons=[redact(str(exc))])
        results.append(entry)
    mismatches = [r for r in results if not r["matches"]]
    older = [r for r in results if r["older"] and r["matches"]]
    if as_json:
        echo(jsonkeys.dumps({"ok": not mismatches, "partitions": results}, sort_keys=True))
    else:
        for r in results:
            covers = f"[{r['algorithm']} over {', '.join(r['columns']) or 'no listed columns'}]"
            if r["matches"]:
                state = "ok"
            elif r["rows"] is None:
                state = "CANNOT VERIFY: " + "; ".join(r["reasons"])
            else:
                state = ("MISMATCH: " + "; ".join(r["reasons"])
                         + f" (changed behind twice's back since v{r['version']} was recorded)")
            echo(f"{r['destination']}  {r['partition']}  v{r['version']}  {state}  {covers}")
            if r["note"]:
                echo(f"    note: {r['note']}")
        summary = (f"verified {len(results) - len(mismatches)}/{len(results)} partitions "
                   "match the ledger")
        if older:
            summary += (f"; {len(older)} recorded with an older algorithm, verified over their "
                        "recorded columns only")
        echo(summary)
    finish(not mismatches)
