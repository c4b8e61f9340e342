"""``twice dbt backfill``: dbt models under twice, one unit of work per model x day.

The project is read with ``dbt ls`` (``twice.drivers.dbt``), turned into a twice pipeline and
handed to the backfill driver: the same plan, guarantees, output and exit codes as
``twice backfill`` (its JSON adds a ``dbt`` key). Bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from twice.cli.console import echo
from twice.cli.exits import exit_on_error, finish
from twice.cli.options import (
    allow_open_option,
    json_option,
    lease_ttl_option,
    ledger_option,
    seed_option,
)
from twice.errors import InputError, UnavailableError

if TYPE_CHECKING:
    from twice.drivers.dbt import DbtManifest, DbtProject
    from twice.ledger import Ledger

GROUP_EPILOG = """\b
Examples:
  twice dbt backfill --project-dir examples/dbt_project --duckdb wh.duckdb --select stg_events+ \\
      --start 2026-11-01 --end 2026-11-05
"""

EPILOG = """\b
Examples:
  twice dbt backfill --project-dir examples/dbt_project --duckdb wh.duckdb --select stg_events+ \\
      --start 2026-11-01 --end 2026-11-05
  twice dbt backfill --project-dir examples/dbt_project --duckdb wh.duckdb --select stg_events \\
      --interval 2026-11-02 --force --json
  twice dbt backfill --project-dir . --duckdb wh.duckdb --select tag:daily --start 2026-11-01 \\
      --end 2026-12-01 --errors dbt-errors.toml --dry-run
"""


@click.group("dbt", epilog=GROUP_EPILOG)
def dbt() -> None:
    """Run dbt models under twice: one unit of work per model x day (dbt-duckdb)."""


@dbt.command("backfill", epilog=EPILOG)
@click.option("--project-dir", "project_dir", required=True, metavar="DIR",
              help="The dbt project (the folder holding dbt_project.yml).")
@click.option("--duckdb", "database", required=True, metavar="FILE",
              help="The DuckDB file the profile writes; passed to dbt as $TWICE_DBT_DUCKDB "
              "(point the profile's path at it) and fingerprinted by twice.")
@click.option("--select", "select", required=True, metavar="SELECTOR",
              help="dbt selection (model, model+, tag:x, path:...), resolved by `dbt ls`. "
              "Dependents of the selected models follow for the same days (they execute when "
              "the slice they read changed).")
@click.option("--exclude", default=None, metavar="SELECTOR", help="dbt exclusion.")
@click.option("--interval", "interval_text", default=None, metavar="DATE|START/END",
              help="The interval to backfill, e.g. 2026-11-02, or START/END; or give --start "
              "and --end.")
@click.option("--start", "start_text", default=None, metavar="DATE",
              help="First day (inclusive), e.g. 2026-11-01 (with --end).")
@click.option("--end", "end_text", default=None, metavar="DATE",
              help="Range end (exclusive), e.g. 2026-11-05.")
@ledger_option()
@click.option("--force", is_flag=True,
              help="Rerun the selected models' days even when already verified (a new job "
              "generation each).")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (days x models, what would be skipped and why); run no model.")
@click.option("--dbt", "dbt_executable", default=None, metavar="PATH",
              help="The dbt executable (default: $TWICE_DBT or `dbt` on PATH).")
@click.option("--profiles-dir", default=None, metavar="DIR",
              help="dbt profiles folder (default: the project's, if it has profiles.yml).")
@click.option("--target", default=None, metavar="NAME", help="dbt target.")
@click.option("--vars", "vars_text", default=None, metavar="JSON",
              help="More dbt variables, as a JSON object (twice adds twice_start, twice_end "
              "and twice_job_id).")
@click.option("--errors", "errors_file", default=None, metavar="FILE",
              help="TOML file of error patterns (transient = [...], permanent = [...]) added "
              "to the default table (docs/guides/dbt.md).")
@click.option("--maximum-bytes-billed", "maximum_bytes_billed", default=None,
              type=click.IntRange(min=1), metavar="BYTES",
              help="Passed to dbt as $TWICE_DBT_MAXIMUM_BYTES_BILLED and the variable "
              "twice_maximum_bytes_billed (for profiles that bill by bytes, e.g. BigQuery).")
@click.option("--max-attempts", default=3, show_default=True, type=click.IntRange(1, 20),
              help="Attempts per model x day within one backfill (transient errors only).")
@click.option("--deadline", "deadline_text", default="none", show_default=True,
              metavar="INSTANT|none",
              help="The backfill's own deadline: no attempt starts that cannot finish before it.")
@lease_ttl_option("How long a unit's lease lasts without renewal: a killed backfill's units "
                  "are taken over (and reconciled from dbt's run results) after it.")
@seed_option()
@allow_open_option()
@json_option("Print one JSON object: `twice backfill --json`'s keys plus `dbt`.")
@exit_on_error("error")
def backfill(project_dir: str, database: str, select: str, exclude: str | None,
             interval_text: str | None, start_text: str | None, end_text: str | None,
             ledger_url: str | None, force: bool, dry_run: bool, dbt_executable: str | None,
             profiles_dir: str | None, target: str | None, vars_text: str | None,
             errors_file: str | None, maximum_bytes_billed: int | None, max_attempts: int,
             deadline_text: str, lease_ttl: float, seed: int | None, allow_open: bool,
             as_json: bool) -> None:
    """Backfill the selected dbt models for the days in [--start, --end) (or --interval).

    One unit of work per model x day, run as `dbt run --select MODEL` with
    --event-time-start/--event-time-end (microbatch models) and the variables
    twice_start/twice_end (every model). Each day's slice is fingerprinted and recorded in the
    ledger with dbt's run results; a day already verified with the same inputs and model is
    skipped; a killed run is settled from dbt's run results on the next one.
    """
    from twice.cli.backfill_cmd import (
        _print_plan_json,
        _print_plan_stream,
        parse_deadline,
        print_summary,
        run_with_progress,
    )
    from twice.cli.pipeline_run import open_durable_ledger, parse_span
    from twice.define.pipeline import PipelineError
    from twice.define.schedule import OpenIntervalError, ScheduleError
    from twice.destinations import DestinationError
    from twice.drivers.backfill import BackfillError, iter_plan, run_backfill, selected_tasks
    from twice.drivers.dbt import DbtError, build_pipeline, resolve
    from twice.engine.lineage import lineage_listeners, lineage_run

    project = _project(project_dir, database, dbt_executable, profiles_dir, target, vars_text,
                       errors_file, maximum_bytes_billed, max_attempts)
    deadline = parse_deadline(deadline_text)
    ledger = open_durable_ledger(ledger_url)
    try:
        try:
            resolved = resolve(project, select, exclude)
            pipeline = build_pipeline(resolved, evidence=_evidence(ledger))
            span = parse_span(pipeline, interval_text, start_text, end_text)
            pipeline.schedule.refuse_open(span.start, span.end, ledger.now(),
                                          allow_open=allow_open, allow="--allow-open-intervals")
            tasks = [str(resolved.node(uid)["name"]) for uid in resolved.selected]
            names, dependents = selected_tasks(pipeline, tasks)
            intervals = pipeline.schedule.iter_intervals(span.start, span.end)
        except (PipelineError, ScheduleError, OpenIntervalError, BackfillError) as exc:
            raise InputError(str(exc)) from exc
        except DbtError as exc:
            if isinstance(exc, InputError):
                raise
            raise UnavailableError(str(exc)) from exc
        if dry_run:
            items = iter_plan(pipeline, ledger, intervals, tasks=tasks, force=force)
            header = {"pipeline": pipeline.name, "tasks": names, "dependents": dependents,
                      "force": force}
            if as_json:
                labels = [i.label for i in pipeline.schedule.iter_intervals(span.start, span.end)]
                _print_plan_json(header, labels, items)
            else:
                count = pipeline.schedule.count_intervals(span.start, span.end)
                _print_plan_stream(header, count, items)
            return
        options: dict[str, Any] = {
            "tasks": tasks, "concurrency": 1, "force": force, "deadline": deadline,
            "lease_ttl": lease_ttl, "allow_open": allow_open,
            "rng": None if seed is None else random.Random(seed),
            "listeners": lineage_listeners(pipeline),
        }
        try:
            with lineage_run(options["listeners"]):
                if as_json:
                    result = run_backfill(pipeline, ledger, intervals, **options)
                else:
                    count = pipeline.schedule.count_intervals(span.start, span.end)
                    result = run_with_progress(pipeline, ledger, intervals, total=count,
                                               **options)
            if as_json:
                echo(json.dumps({**result.to_dict(), "dbt": _describe(resolved)},
                                sort_keys=True))
            else:
                print_summary(result)
        except (PipelineError, BackfillError) as exc:
            raise InputError(str(exc)) from exc
        except DestinationError as exc:
            raise UnavailableError(str(exc)) from exc
    finally:
        ledger.close()
    finish(result.ok)


def _project(project_dir: str, database: str, dbt_executable: str | None,
             profiles_dir: str | None, target: str | None, vars_text: str | None,
             errors_file: str | None, maximum_bytes_billed: int | None,
             max_attempts: int) -> DbtProject:
    import os

    from twice.drivers.dbt import DbtProject, ErrorTable

    variables: dict[str, Any] = {}
    if vars_text is not None:
        try:
            variables = json.loads(vars_text)
        except ValueError as exc:
            raise InputError(f"--vars: not JSON: {exc}") from None
        if not isinstance(variables, dict):
            raise InputError("--vars: must be a JSON object")
    if not Path(database).expanduser().absolute().parent.is_dir():
        raise InputError(f"--duckdb: folder {Path(database).parent} does not exist")
    errors = ErrorTable() if errors_file is None else ErrorTable.from_file(errors_file)
    return DbtProject(
        Path(project_dir), Path(database),
        profiles_dir=None if profiles_dir is None else Path(profiles_dir),
        dbt=dbt_executable or os.environ.get("TWICE_DBT") or "dbt", target=target,
        vars=variables, maximum_bytes_billed=maximum_bytes_billed, errors=errors,
        max_attempts=max_attempts,
    )


def _evidence(ledger: Ledger) -> Any:
    """Record each dbt run's result in the ledger (an observation with source ``dbt``)."""
    from twice.drivers.dbt import EVIDENCE_SOURCE

    def record(ctx: Any, state: str, detail: Any) -> None:
        ledger.record_observation(ctx.unit.uow_id, state, source=EVIDENCE_SOURCE,
                                  attempt=ctx.attempt, detail=dict(detail))

    return record


def _describe(resolved: DbtManifest) -> dict[str, Any]:
    project = resolved.project
    return {"project_dir": str(project.project_dir), "duckdb": str(project.database),
            "selected": [str(resolved.node(uid)["name"]) for uid in resolved.selected],
            "state_dir": str(project.state)}
