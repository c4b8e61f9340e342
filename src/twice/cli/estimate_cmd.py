"""``twice estimate``: bytes a query would read, per column, and whether the limit allows it.

Two forms: ``--parquet DIR --sql "..." [--limit-bytes N]`` for an ad-hoc query over a Parquet
dataset (the table name in the SQL is the directory's name, or ``NAME=DIR``), and
``PIPELINE_FILE --task T --interval D`` for a task's own ``cost_estimate`` and
``maximum_bytes_billed``. Exit 0 when allowed, 1 when over the limit, 2 on bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.cli.exits import finish
from twice.cli.options import json_option


def _datasets(values: tuple[str, ...]) -> dict[str, Any]:
    from twice.remote.dry_run import ParquetDataset

    found: dict[str, Any] = {}
    for value in values:
        name, sep, root = value.partition("=")
        if not sep:
            root, name = value, Path(value).resolve().name
        if not name or not root:
            raise click.UsageError(f"--parquet: expected DIR or NAME=DIR, got {value!r}")
        found[name] = ParquetDataset(name, Path(root))
    return found


def _show(check: Any, as_json: bool) -> None:
    estimate = check.estimate
    if as_json:
        echo(jsonkeys.dumps(check.to_detail(), indent=2, sort_keys=True))
        return
    bound = " (upper bound)" if estimate.upper_bound else ""
    echo(f"task:      {check.task}")
    echo(f"estimate:  {estimate.bytes} bytes{bound}  [{estimate.method}]")
    if estimate.columns:
        echo("columns:")
        for column, size in estimate.columns.items():
            echo(f"  {column:<24} {size:>14} bytes")
    if estimate.partitions_total is not None:
        echo(f"partitions: {len(estimate.partitions)} of {estimate.partitions_total}")
    for note in estimate.notes:
        echo(f"note:      {note}")
    limit = "none" if check.limit is None else str(check.limit)
    echo(f"limit:     {limit} (maximum_bytes_billed)")
    echo(f"decision:  {'allow' if check.allowed else 'refuse'}: {check.reason}")


@click.command("estimate", epilog="""\b
Examples:
  twice estimate --parquet movements=examples/movements/data \\
      --sql "SELECT fund_id, amount FROM movements WHERE business_date = '2026-11-30'"
  twice estimate pipelines/orders.py --task load --interval 2026-11-30 --json
""")
@click.argument("pipeline_file", required=False)
@click.option("--parquet", "parquet", multiple=True, metavar="[NAME=]DIR",
              help="A Parquet dataset directory (hive partitions); repeatable.")
@click.option("--sql", help="The query to estimate (with --parquet).")
@click.option("--limit-bytes", type=int, default=None,
              help="maximum_bytes_billed to check against (default: the task's own).")
@click.option("--task", "task_name", help="Task of PIPELINE_FILE whose cost_estimate to use.")
@click.option("--interval", "interval_text", metavar="DATE",
              help="The interval, by its start date (with --task).")
@json_option("Print the estimate as JSON.")
def estimate(
    pipeline_file: str | None, parquet: tuple[str, ...], sql: str | None,
    limit_bytes: int | None, task_name: str | None, interval_text: str | None, as_json: bool,
) -> None:
    """Estimate bytes read before running; refuse (exit 1) over maximum_bytes_billed."""
    from twice.engine.cost import check_limit
    from twice.remote.dry_run import CostError, estimate_parquet

    if limit_bytes is not None and limit_bytes < 1:
        raise click.UsageError("--limit-bytes: must be a positive integer")
    try:
        if pipeline_file is not None:
            check = _task_check(pipeline_file, task_name, interval_text, limit_bytes)
        else:
            if not parquet or not sql:
                raise click.UsageError("give --parquet DIR and --sql, or PIPELINE_FILE --task")
            result = estimate_parquet(sql, _datasets(parquet))
            check = check_limit("(ad hoc)", result, limit_bytes)
    except CostError as exc:
        raise click.UsageError(str(exc)) from None
    _show(check, as_json)
    finish(check.allowed)


def _task_check(
    path: str, task_name: str | None, interval_text: str | None, limit: int | None
) -> Any:
    from twice.define.load import PipelineFileError, load_pipeline
    from twice.define.pipeline import PipelineError
    from twice.engine.cost import check_limit

    if not task_name or not interval_text:
        raise click.UsageError("PIPELINE_FILE needs --task and --interval")
    try:
        pipeline = load_pipeline(path)
    except (PipelineFileError, PipelineError) as exc:
        raise click.UsageError(str(exc)) from None
    task = pipeline.tasks.get(task_name)
    if task is None:
        raise click.UsageError(f"--task: no task {task_name!r} (tasks: {sorted(pipeline.tasks)})")
    if task.cost_estimate is None:
        raise click.UsageError(f"--task: task {task_name!r} declares no cost_estimate")
    try:
        interval = _interval(pipeline, interval_text)
    except ValueError as exc:
        raise click.UsageError(f"--interval: {exc}") from None
    return check_limit(task.name, task.cost_estimate(interval),
                       limit if limit is not None else task.maximum_bytes_billed)


def _interval(pipeline: Any, text: str) -> Any:
    """The schedule's interval named by ``text`` (e.g. an ISO date for a daily schedule)."""
    return pipeline.schedule.parse_interval_arg(text)
