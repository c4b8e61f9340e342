"""Derived aggregates are recomputed from the replaced slice, never updated by deltas.

An aggregate maintained by adding increments (``UPDATE totals SET amount = amount + :delta``)
counts a reprocessed partition twice: the rerun adds its delta again on top of the first run's.
The idempotent pattern replaces the aggregate's slice with a summary of the detail table's slice,
so running it once or ten times gives the same table::

    detail = open_destination("duckdb:///w.duckdb?partition_column=day#trades")
    totals = open_destination("duckdb:///w.duckdb?partition_column=day#daily_totals")

    detail.replace_partition(trades, interval)                  # 1. replace the detail slice
    recompute_from_slice(                                       # 2. rebuild the aggregate slice
        detail, totals, interval,
        group_by=["day", "fund"],
        aggregations={"amount": ("amount", "sum"), "trades": ("id", "count")},
    )

``group_by`` must include the target's partition column so every summary row lands inside the
slice being replaced. A slice whose detail is now empty empties the aggregate's slice too. Run
step 2 for the same intervals after every backfill of step 1 (dependents must be rerun).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from twice.core.identifiers import validate_identifier, validate_identifiers
from twice.destinations.base import Destination, WriteResult
from twice.destinations.errors import DestinationError
from twice.destinations.slices import PartitionSpec

FUNCTIONS = ("sum", "count", "min", "max", "mean", "count_distinct")
Aggregations = Mapping[str, tuple[str, str]]  # output column -> (input column, function)


def summarize(table: pa.Table, group_by: Sequence[str], aggregations: Aggregations) -> pa.Table:
    """Group ``table`` by ``group_by`` and compute ``aggregations`` (Arrow, pure)."""
    keys = list(validate_identifiers(group_by, "group_by column"))
    if not keys:
        raise DestinationError("group_by needs at least one column (the partition column)")
    specs = []
    for output, (column, function) in aggregations.items():
        validate_identifier(output, "aggregate output column")
        validate_identifier(column, "aggregate input column")
        if function not in FUNCTIONS:
            raise DestinationError(
                f"aggregate {output!r}: function {function!r} is not one of {FUNCTIONS}"
            )
        if output in keys:
            raise DestinationError(f"aggregate {output!r} clashes with a group_by column")
        specs.append((column, function))
    result = table.group_by(keys, use_threads=False).aggregate(specs)
    outputs = {f"{c}_{f}": o for o, (c, f) in aggregations.items()}
    result = result.rename_columns([outputs.get(n, n) for n in result.column_names])
    return result.select([*keys, *aggregations])


def recompute_from_slice(
    source: Destination,
    target: Destination,
    partition: PartitionSpec,
    *,
    group_by: Sequence[str],
    aggregations: Aggregations,
) -> WriteResult:
    """Replace ``target``'s slice with a summary of ``source``'s slice (same ``partition``)."""
    if target.partition_column not in group_by:
        raise DestinationError(
            f"group_by {list(group_by)} must include the target's partition column "
            f"{target.partition_column!r}, or summary rows could fall outside the slice"
        )
    needed = list(dict.fromkeys([*group_by, *(c for c, _ in aggregations.values())]))
    detail = source.read_partition(partition, needed)
    return target.replace_partition(summarize(detail, group_by, aggregations), partition)
