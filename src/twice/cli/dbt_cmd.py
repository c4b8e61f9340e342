"""``twice dbt backfill``: a dbt project under twice, each node's unit of work decided by its
materialization.

The project is read with ``dbt ls`` (``twice.drivers.dbt``) and run in stages
(``twice.cli.dbt_backfill``), each through the backfill driver: the same plan, guarantees
and exit codes as ``twice backfill``. Incremental models with ``event_time`` (microbatch ones
included) run once per day; tables, views, seeds and snapshots once over the whole relation.
Bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
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
    from twice.drivers.backfill import BackfillPlan, BackfillResult, TaskRun
    from twice.drivers.dbt import DbtManifest, DbtProject
    from twice.ledger import Ledger

GROUP_EPILOG = """\b
Examples:
  twice dbt backfill --project-dir examples/dbt_project --duckdb wh.duckdb \\
      --start 2026-11-01 --end 2026-11-05
"""

EPILOG = """\b
Examples:
  twice dbt backfill --project-dir examples/dbt_project --duckdb wh.duckdb \\
      --start 2026-11-01 --end 2026-11-05
  twice dbt backfill --project-dir examples/dbt_project --duckdb wh.duckdb --select stg_events+ \\
      --interval 2026-11-02 --force --json
  twice dbt backfill --project-dir . --duckdb wh.duckdb --select tag:daily --start 2026-11-01 \\
      --end 2026-12-01 --errors dbt-errors.toml --tests --dry-run
"""


@click.group("dbt", epilog=GROUP_EPILOG)
def dbt() -> None:
    """Run a dbt project under twice: one unit of work per model x day or per build of a
    whole relation, as its materialization decides (dbt-duckdb)."""


@dbt.command("backfill", epilog=EPILOG)
@click.option("--project-dir", "project_dir", required=True, metavar="DIR",
              help="The dbt project (the folder holding dbt_project.yml).")
@click.option("--duckdb", "database", required=True, metavar="FILE",
              help="The DuckDB file the profile writes; passed to dbt as $TWICE_DBT_DUCKDB "
              "(point the profile's path at it) and fingerprinted by twice.")
@click.option("--select", "select", default=None, metavar="SELECTOR",
              help="dbt selection (model, model+, tag:x, path:...), resolved by `dbt ls` "
              "(default: every model, seed and snapshot, as `dbt build` runs them).")
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
              help="The dbt executable (default: $TWICE_DBT, else `dbt` on PATH).")
@click.option("--tests", "run_tests", is_flag=True,
              help="Each unit runs its node's dbt tests after it builds: a failing test "
              "rejects the unit's output (a model opts in alone with meta: {twice: {tests: "
              "true}}).")
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
              help="Attempts per unit within one backfill (transient errors only).")
@click.option("--deadline", "deadline_text", default="none", show_default=True,
              metavar="INSTANT|none",
              help="The backfill's own deadline: no attempt starts that cannot finish before it.")
@lease_ttl_option("How long a unit's lease lasts without renewal: a killed backfill's units "
                  "are taken over (and reconciled from dbt's run results) after it.")
@seed_option()
@allow_open_option()
@json_option("Print one JSON object: `twice backfill --json`'s keys plus `dbt`.")
@exit_on_error("error")
def backfill(project_dir: str, database: str, select: str | None, exclude: str | None,
             interval_text: str | None, start_text: str | None, end_text: str | None,
             ledger_url: str | None, force: bool, dry_run: bool, dbt_executable: str | None,
             run_tests: bool, profiles_dir: str | None, target: str | None, vars_text: str | None,
             errors_file: str | None, maximum_bytes_billed: int | None, max_attempts: int,
             deadline_text: str, lease_ttl: float, seed: int | None, allow_open: bool,
             as_json: bool) -> None:
    """Backfill a dbt project (or the --select'ed nodes) for the days in [--start, --end).

    Incremental models with event_time (microbatch ones included) run once per day, as
    `dbt run --select MODEL` with --event-time-start/--event-time-end (microbatch) and the
    variables twice_start/twice_end. Tables, views, seeds and snapshots are built once over the
    whole relation, after every day of what they read. Each unit's output is fingerprinted and
    recorded in the ledger with dbt's run results; a unit already verified with the same inputs
    and node is skipped; a killed run is settled from dbt's run results on the next one.
    """
    from twice.cli.backfill_cmd import parse_deadline
    from twice.cli.dbt_backfill import backfill_project, plan_project
    from twice.cli.pipeline_run import open_durable_ledger
    from twice.define.pipeline import PipelineError
    from twice.define.schedule import OpenIntervalError, Schedule, ScheduleError
    from twice.destinations import DestinationError
    from twice.drivers.backfill import BackfillError, BackfillPlan
    from twice.drivers.dbt import DbtError, pipeline_name, resolve

    project = _project(project_dir, database, dbt_executable, profiles_dir, target, vars_text,
                       errors_file, maximum_bytes_billed, max_attempts, run_tests)
    deadline = parse_deadline(deadline_text)
    days = Schedule.daily("UTC")
    ledger = open_durable_ledger(ledger_url)
    try:
        try:
            intervals = _days(days, interval_text, start_text, end_text)
            days.refuse_open(intervals[0].start, intervals[-1].end, ledger.now(),
                             allow_open=allow_open, allow="--allow-open-intervals")
            resolved = resolve(project, select, exclude)
            if dry_run:
                items = plan_project(resolved, ledger, intervals, force=force)
        except (PipelineError, ScheduleError, OpenIntervalError, BackfillError) as exc:
            raise InputError(str(exc)) from exc
        except DbtError as exc:
            if isinstance(exc, InputError):
                raise
            raise UnavailableError(str(exc)) from exc
        names = [str(resolved.node(uid)["name"]) for uid in resolved.units()]
        if dry_run:
            plan = BackfillPlan(pipeline_name(resolved), tuple(intervals), tuple(names), (),
                                tuple(items), force)
            if as_json:
                shown = _whole_shown({"dry_run": True, "runs": [], "plan": plan.to_dict()})
                echo(json.dumps({"dry_run": True, **shown["plan"]}, sort_keys=True))
            else:
                _print_plan(plan)
            return
        options: dict[str, Any] = {
            "concurrency": 1, "deadline": deadline, "lease_ttl": lease_ttl,
            "allow_open": allow_open, "rng": None if seed is None else random.Random(seed),
        }
        if not as_json:
            options["emit"] = _print_finished
        try:
            result = backfill_project(resolved, ledger, intervals, force=force,
                                      evidence=_evidence(ledger), **options)
        except (PipelineError, BackfillError) as exc:
            raise InputError(str(exc)) from exc
        except DbtError as exc:
            if isinstance(exc, InputError):
                raise
            raise UnavailableError(str(exc)) from exc
        except DestinationError as exc:
            raise UnavailableError(str(exc)) from exc
        if as_json:
            echo(json.dumps({**_whole_shown(result.to_dict()), "dbt": _describe(resolved)},
                            sort_keys=True))
        else:
            _print_totals(result)
    finally:
        ledger.close()
    finish(result.ok)


def _days(days: Any, interval_text: str | None, start_text: str | None,
          end_text: str | None) -> list[Any]:
    """The backfill's days: --interval DATE|START/END, or --start and --end (as
    ``twice backfill`` reads them)."""
    from twice.cli.pipeline_run import parse_span
    from twice.define.pipeline import Pipeline

    span = parse_span(Pipeline("dbt", schedule=days), interval_text, start_text, end_text)
    return list(days.iter_intervals(span.start, span.end))


def _scope(run: TaskRun) -> str:
    from twice.drivers.dbt import is_whole

    return "whole relation" if is_whole(run.interval) else run.interval.short


def _whole_shown(data: dict[str, Any]) -> dict[str, Any]:
    """``--json`` with a whole-relation unit's interval shown as null and every run and plan
    item's ``scope`` (``whole`` or ``interval``)."""
    from twice.drivers.dbt import WHOLE_RELATION

    label = WHOLE_RELATION.label
    for entry in [*data["runs"], *data["plan"]["items"]]:
        whole = entry.get("interval") == label
        entry["scope"] = "whole" if whole else "interval"
        if whole:
            entry["interval"] = None
    return data


def _print_plan(plan: BackfillPlan) -> None:
    """The dry run: one line per unit (node, day or whole relation, action, why), the totals."""
    from twice.drivers.dbt import is_whole

    echo(f"backfill plan for {plan.pipeline} (dry run: nothing changed)")
    for item in plan.items:
        scope = "whole relation" if is_whole(item.interval) else item.interval.short
        echo(f"{item.task}  {scope}  {item.action}  {item.reason}")
    runs = sum(item.action == "run" for item in plan.items)
    echo(f"{len(plan.intervals)} days, {len(plan.items)} units: {runs} would run, "
         f"{len(plan.items) - runs} would be skipped (a later stage's plan reads the warehouse "
         "as it is now)")


def _print_finished(kind: str, data: Mapping[str, Any]) -> None:
    """One line per unit as it settles: node, day or whole relation, status, rows."""
    from twice.drivers.dbt import WHOLE_RELATION

    if kind != "task-finished":
        return
    interval = data.get("interval") or ""
    scope = "whole relation" if interval == WHOLE_RELATION.label else interval[:10]
    diff = data.get("diff") or {}
    before = "" if diff.get("rows_before") is None else f"{diff['rows_before']} -> "
    rows = "" if not diff else f"  rows {before}{diff.get('rows_after')} ({diff.get('verdict')})"
    reason = "" if data.get("status") in ("succeeded",) else f"  {data.get('reason') or ''}"
    echo(f"{data.get('task')}  {scope}  {data.get('status')}{rows}{reason}".rstrip())


def _print_totals(result: BackfillResult) -> None:
    counts = result.counts()
    echo(f"backfill {result.plan.pipeline}: {len(result.plan.intervals)} days, "
         f"{len(result.runs)} units: "
         + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
         + f" in {result.elapsed:.1f} s")
    for run in result.runs:
        if run.status in ("failed", "refused"):
            echo(f"{run.status}: {run.task} {_scope(run)}: {run.reason}", err=True)
    if result.refusal:
        echo(f"refused: {result.refusal}", err=True)


def _project(project_dir: str, database: str, dbt_executable: str | None,
             profiles_dir: str | None, target: str | None, vars_text: str | None,
             errors_file: str | None, maximum_bytes_billed: int | None,
             max_attempts: int, run_tests: bool = False) -> DbtProject:
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
        dbt=dbt_executable, target=target, vars=variables,
        maximum_bytes_billed=maximum_bytes_billed, errors=errors, max_attempts=max_attempts,
        tests=run_tests,
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
    from twice.drivers.dbt import scope_of

    return {"project_dir": str(project.project_dir), "duckdb": str(project.database),
            "selected": [str(resolved.node(uid)["name"]) for uid in resolved.selected],
            "units": [{"name": str(node["name"]), "resource_type": node.get("resource_type"),
                       "materialized": (node.get("config") or {}).get("materialized"),
                       "scope": scope_of(node)}
                      for node in map(resolved.node, resolved.units())],
            "state_dir": str(project.state)}
