"""``twice fingerprint``: row count + checksum of one partition, computed in the engine.

Heavy modules (PyArrow, DuckDB, psycopg) are imported inside the command, so ``twice --help``
stays fast. Bad input (an unparsable destination, a hostile identifier, a partition value that
does not fit the column) is answered with one line on stderr and exit code 2, never a traceback;
an engine failure while reading exits with 1.
"""

from __future__ import annotations

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, parse_partition, partition_option
from twice.errors import InputError, UnavailableError


@click.command("fingerprint", epilog="""\b
Examples:
  twice fingerprint 'duckdb:twice-demo/run/warehouse.duckdb?partition_column=day#positions' \\
      --partition 2026-11-25
  twice fingerprint 'sqlite:out.db#positions' --partition day=2026-11-25 --json
""")
@click.argument("destination")
@partition_option()
@click.option("--columns", "--key-columns", "key_columns", default=None, metavar="a,b",
              help="Columns to checksum (default: EVERY column, key or not, floats included; "
              "--key-columns is the older spelling).")
@json_option("Print one JSON object.")
@exit_on_error("twice fingerprint")
def fingerprint(destination: str, partition_text: str, key_columns: str | None,
                as_json: bool) -> None:
    """Row count + order-independent checksum of one partition of DESTINATION.

    DESTINATION is e.g. sqlite:///data/out.db?partition_column=day#positions,
    duckdb:///w.duckdb#t, postgresql://user@host/db#schema.table or parquet:///data/dir.
    The checksum (twice-fp-v3) covers every column unless --columns names some; a column of a
    type without a canonical text is refused, never left out. The output lists the columns.
    """
    from twice.core.interval import IntervalError
    from twice.core.secrets import redact, remember
    from twice.destinations import DestinationError, open_destination
    from twice.destinations.errors import DestinationUnavailableError
    from twice.destinations.fingerprint import fingerprint as compute

    remember(destination)  # its password, if any, is used to connect and masked in messages
    column, partition = parse_partition(partition_text)
    try:
        keys = [k.strip() for k in key_columns.split(",")] if key_columns else None
        dest = open_destination(destination, partition_column=column)
        try:
            result = compute(dest, partition, keys)
        finally:
            dest.close()
    except DestinationUnavailableError as exc:  # a service that failed (exit 1)
        raise UnavailableError(redact(str(exc))) from None
    except (DestinationError, IntervalError) as exc:
        raise InputError(redact(str(exc))) from None
    except Exception as exc:  # engine errors: report, do not dump a traceback on operators
        raise UnavailableError(redact(f"{type(exc).__name__}: {exc}".strip())) from None
    shown = redact(dest.spec)  # an engine's spec is public already; belt and braces
    if as_json:
        echo(jsonkeys.dumps({"destination": shown, **result.to_dict()}, sort_keys=True))
        return
    echo(f"{shown}  {result.partition}")
    echo(f"  rows       {result.row_count}")
    echo(f"  checksum   {result.checksum}")
    echo(f"  columns    {', '.join(result.columns)} ({len(result.columns)})")
    echo(f"  algorithm  {result.algorithm} (computed in {result.engine})")

