"""A backfill of a dbt project: its units in stages, each stage one twice backfill.

It composes two drivers (``twice.drivers.dbt`` builds each stage's pipeline,
``twice.drivers.backfill`` runs it), which never import each other, so it lives here.

A project mixes units of two scopes (``twice.drivers.dbt.scope_of``): incremental models with
``event_time`` own one slice per day; tables, views, seeds and snapshots are built over the
whole relation. :func:`twice.drivers.dbt.plan_stages` orders the selection one node at a time
in dependency order, and :func:`backfill_project` runs them in order through
``twice.drivers.backfill`` (one plan, ledger and verification for every unit): an incremental
model over the range's days, a whole relation once, under
:data:`~twice.drivers.dbt.WHOLE_RELATION`. So a table over
an incremental model is built once per backfill, after every day of the model, and recorded
as one whole-relation fingerprint, not as per-day slices.

A unit whose upstream unit did not succeed in an earlier stage (failed, blocked, held) is not
run: it is reported ``blocked`` for each of its intervals, as the engine does within a stage.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from twice.core.interval import Interval
from twice.drivers.backfill import (
    BackfillPlan,
    BackfillResult,
    EventSink,
    PlanItem,
    TaskRun,
    iter_plan,
)
from twice.drivers.dbt import (
    WHOLE,
    WHOLE_RELATION,
    DbtManifest,
    Evidence,
    Stage,
    build_stage,
    pipeline_name,
    plan_stages,
    upstream_units,
)

__all__ = ["backfill_project", "plan_project"]

#: A unit's status that lets the units reading it run in a later stage.
SETTLED = ("succeeded", "skipped")


def _name(resolved: DbtManifest, uid: str) -> str:
    return str(resolved.node(uid)["name"])


def _spans(stage: Stage, intervals: Sequence[Interval]) -> list[Interval]:
    return [WHOLE_RELATION] if stage.scope == WHOLE else list(intervals)


def plan_project(resolved: DbtManifest, ledger: Any, intervals: Sequence[Interval], *,
                 force: bool = False) -> list[PlanItem]:
    """Every stage's plan, each read from the ledger and the warehouse as they are now (a
    later stage's plan does not foresee what an earlier one will change: a unit that follows
    changed upstream output runs, which the plan shows as ``run`` only when it can tell)."""
    items: list[PlanItem] = []
    for stage in plan_stages(resolved):
        pipeline = build_stage(resolved, stage)
        items.extend(iter_plan(pipeline, ledger, _spans(stage, intervals), force=force))
    return items


def backfill_project(resolved: DbtManifest, ledger: Any, intervals: Sequence[Interval], *,
                     evidence: Evidence | None = None, force: bool = False,
                     emit: EventSink | None = None, **options: Any) -> BackfillResult:
    """Backfill the selection over ``intervals`` (days), stage by stage (see the module
    docstring); ``options`` go to :func:`twice.drivers.backfill.run_backfill`. One result:
    every stage's runs and plan items in stage order, ``plan.intervals`` the days."""
    from twice.drivers.backfill import run_backfill
    from twice.engine.lineage import lineage_listeners, lineage_run

    started = time.monotonic()
    units = set(resolved.units())
    unsettled: dict[str, str] = {}  # unique id -> why the units reading it cannot run
    runs: list[TaskRun] = []
    items: list[PlanItem] = []
    refusal: str | None = None
    stages = plan_stages(resolved)
    for stage in stages:
        runnable, blocked = [], {}
        waiting = list(stage.units)
        while waiting:  # to a fixed point: a unit reading a blocked one of its stage is too
            more = False
            for uid in list(waiting):
                upstream = upstream_units(resolved, uid, units)
                stuck = sorted(_name(resolved, p) for p in upstream
                               if p in unsettled or p in blocked)
                if stuck or refusal is not None:
                    why = (f"upstream {', '.join(stuck)} did not succeed in this run" if stuck
                           else f"backfill stopped: {refusal}")
                    blocked[uid] = f"blocked: {why}"
                    waiting.remove(uid)
                    more = True
            if not more:
                break
        runnable = [uid for uid in stage.units if uid not in blocked]
        stage_runs: list[TaskRun] = []
        if runnable:
            pipeline = build_stage(resolved, Stage(stage.scope, tuple(runnable)),
                                   evidence=evidence)
            listeners = lineage_listeners(pipeline)  # each stage is one OpenLineage run
            with lineage_run(listeners):
                result = run_backfill(pipeline, ledger, _spans(stage, intervals), force=force,
                                      emit=emit, listeners=listeners, **options)
            stage_runs.extend(result.runs)
            items.extend(result.plan.items)
            refusal = refusal or result.refusal
        by_name = {_name(resolved, uid): uid for uid in stage.units}
        for run in stage_runs:
            if run.status not in SETTLED:
                unsettled.setdefault(by_name[run.task], run.status)
        for uid, why in blocked.items():
            unsettled[uid] = "blocked"
            for interval in _spans(stage, intervals):
                run = TaskRun(_name(resolved, uid), interval, "", "", "blocked", why)
                stage_runs.append(run)
                if emit is not None:
                    emit("task-finished", run.to_dict())
        runs.extend(stage_runs)
    names = tuple(_name(resolved, uid) for stage in stages for uid in stage.units)
    plan = BackfillPlan(pipeline_name(resolved), tuple(intervals), names, (), tuple(items),
                        force)
    return BackfillResult(plan, runs, time.monotonic() - started, refusal)
