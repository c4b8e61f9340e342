"""``twice diff``: keys added, removed and changed in one partition between two table versions.

Reads both versions with the table format's time travel (Delta, Iceberg), or, for a SQL
destination opened with ``keep_previous=DAYS``, from the slices its writes kept (versions are
then numbered per slice: twice.destinations.previous); other destinations keep no earlier
versions and are refused with a message saying what would. Bad input
(a destination, a partition, a version the table does not hold, missing key columns) exits 2;
an engine failure while reading exits 1.
"""

from __future__ import annotations

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import exit_on_error
from twice.cli.options import json_option, parse_partition, partition_option
from twice.errors import InputError, UnavailableError


@click.command("diff", epilog="""\b
Examples:
  twice diff 'sqlite:out.db?partition_column=day&key_columns=id&keep_previous=7#positions' \\
      --partition 2026-11-25 --from 1 --to 2
  twice diff 'delta:///data/positions?partition_column=day&key_columns=fund_id' \\
      --partition 2026-11-25/2026-11-27 --from 3 --to 4
  twice diff 'iceberg:///data/wh?partition_column=day#ns.positions' \\
      --partition day=2026-11-25 --from 1 --to 2 --key-columns fund_id,day --json
  (A version the table does not hold is refused, exit 2, listing the ones it
  holds, oldest first, as --from and --to take them; an Iceberg version is
  listed as its ordinal with its snapshot id, and either works.)
""")
@click.argument("destination")
@partition_option()
@click.option("--from", "from_version", required=True, type=click.IntRange(min=0),
              metavar="VERSION", help="The older version, as listed (see below).")
@click.option("--to", "to_version", required=True, type=click.IntRange(min=0),
              metavar="VERSION", help="The newer version, as listed (see below).")
@click.option("--key-columns", "key_columns", default=None, metavar="a,b",
              help="Columns that identify a row (default: the destination's key_columns).")
@click.option("--samples", default=10, show_default=True, type=click.IntRange(min=0),
              metavar="N", help="Keys shown of each kind (added, removed, changed).")
@json_option("Print one JSON object.")
@exit_on_error("twice diff")
def diff(destination: str, partition_text: str, from_version: int, to_version: int,
         key_columns: str | None, samples: int, as_json: bool) -> None:
    """Keys added, removed and changed in one partition of DESTINATION between two versions.

    DESTINATION is a table with time travel: delta:///data/table?partition_column=day or
    iceberg:///warehouse?partition_column=day#ns.table, or a SQL table written with
    ?keep_previous=DAYS. Versions: Delta's table versions (0, 1, ...); Iceberg's numbered
    1, 2, ... in the table's history, oldest first (a snapshot id works too); a SQL table's
    count per partition (1 is the first content written, each write adds one). A version
    the table does not hold is refused with the list of those it holds. Rows are matched by
    their key columns; a key on both sides whose other columns differ in any value
    (compared exactly, floats included) is changed. Counts first, then up to --samples keys
    of each kind.
    """
    from twice.core.secrets import redact, remember
    from twice.destinations import DestinationError, open_destination
    from twice.destinations.diff import DiffError, diff_held_versions
    from twice.destinations.errors import DestinationUnavailableError
    from twice.destinations.slices import PartitionError

    remember(destination)
    keys = [k.strip() for k in key_columns.split(",") if k.strip()] if key_columns else None
    column, partition = parse_partition(partition_text)
    try:
        dest = open_destination(destination, partition_column=column)
        try:
            if not keys and not dest.key_columns:
                raise InputError(
                    "--key-columns: name the columns that identify a row (the destination "
                    "has no key_columns)")
            compared = diff_held_versions(dest, partition, from_version, to_version, keys,
                                          samples=samples)
        finally:
            dest.close()
    except PartitionError as exc:  # the value does not fit the partition column
        raise InputError(redact(f"--partition: {exc}")) from None
    except DiffError as exc:
        raise InputError(redact(str(exc))) from None
    except DestinationUnavailableError as exc:  # a service that failed (exit 1)
        raise UnavailableError(redact(str(exc))) from None
    except DestinationError as exc:
        raise InputError(redact(str(exc))) from None
    except InputError:
        raise
    except Exception as exc:  # engine errors: report, do not dump a traceback on operators
        raise UnavailableError(redact(f"{type(exc).__name__}: {exc}".strip())) from None
    result, old, new = compared.keys, compared.old, compared.new
    shown = redact(dest.spec)
    if as_json:
        # every key on every engine (null where it does not apply): one document shape
        versions: dict[str, int | None] = {
            "from_version": old.name, "to_version": new.name,
            "from_snapshot_id": old.version if old.snapshot else None,
            "to_snapshot_id": new.version if old.snapshot else None}
        echo(jsonkeys.dumps({"destination": shown, "partition": partition_text, **versions,
                             **result.to_dict()}, sort_keys=True, default=str))
        return
    echo(f"{shown}  {partition_text}  v{old} -> v{new}")
    echo(f"  rows       {result.rows_before} -> {result.rows_after}")
    echo(f"  added      {result.added}")
    echo(f"  removed    {result.removed}")
    echo(f"  changed    {result.changed}"
         + (f" ({_columns(result.changed_columns)})" if result.changed_columns else ""))
    echo(f"  unchanged  {result.unchanged}")
    for kind, found, count in (("added", result.added_keys, result.added),
                               ("removed", result.removed_keys, result.removed),
                               ("changed", result.changed_keys, result.changed)):
        if not found:
            continue
        more = f" (first {len(found)} of {count})" if count > len(found) else ""
        echo(f"  {kind} keys{more}:")
        for key in found:
            echo("    " + ", ".join(f"{k}={v}" for k, v in key.items()))


def _columns(counts: dict[str, int]) -> str:
    return ", ".join(f"{name}: {n}" for name, n in counts.items())
