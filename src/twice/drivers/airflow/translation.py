"""A twice pipeline in Airflow's terms: timetable, operator retry settings, pools, and the gaps.

Pure: no Airflow import, so ``twice airflow describe`` and the tests run without Airflow. The
retry numbers come from ``twice.interop.translations.to_airflow`` (one translation of the policy,
not two); this module spells them the way Airflow 3.3 takes them and adds what changes when twice
runs *inside* an Airflow task: Airflow owns the retry loop (one twice attempt per Airflow try) while
twice keeps the ledger, the transient-error list, the deadline and reconciliation.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from twice.interop.translations import Translation, seconds, to_airflow

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline, Task
    from twice.define.schedule import Schedule

AIRFLOW_VERSION = "3.3.2"
"""The Airflow release this translation was checked against (source and ``airflow dags test``)."""

TIMEOUT_GRACE = 30.0
"""Seconds added to twice's attempt timeout for Airflow's ``execution_timeout``: twice times the
attempt out first and records the outcome as unknown; Airflow only kills a try that hangs in
twice's own bookkeeping (its ledger writes), which would leave the attempt ``running``."""

_OBSOLETE = "retry_delay_multiplier exists only"
"""A caveat of the generic translation that Airflow 3.3 no longer needs: there the multiplier is
the value of ``retry_exponential_backoff`` itself (a float, 0 = constant delay)."""


@dataclass(frozen=True)
class TimetableSpec:
    """The Airflow data-interval timetable that reproduces a twice schedule's grid."""

    kind: str  # "cron" (CronDataIntervalTimetable) or "delta" (DeltaDataIntervalTimetable)
    cron: str | None
    delta: timedelta | None
    timezone: str
    start_date: str | None  # ISO instant the DAG must start at (the grid anchor), if any

    @property
    def code(self) -> str:
        if self.kind == "cron":
            return f"CronDataIntervalTimetable({self.cron!r}, timezone={self.timezone!r})"
        assert self.delta is not None
        step = seconds(self.delta.total_seconds())
        return f"DeltaDataIntervalTimetable(timedelta(seconds={step}))"


def timetable_spec(schedule: Schedule) -> TimetableSpec:
    """Pin a *data-interval* timetable: Airflow 3's default for a bare cron or preset is a
    trigger timetable whose data interval has zero width."""
    if schedule.kind == "daily":
        return TimetableSpec("cron", "0 0 * * *", None, schedule.tz, None)
    if schedule.kind == "hourly":
        return TimetableSpec("cron", "0 * * * *", None, schedule.tz, None)
    assert schedule.step is not None and schedule.anchor is not None
    # A fixed delta steps from the DAG's start_date: start it on twice's anchor so the grids agree.
    return TimetableSpec("delta", None, schedule.step, schedule.tz, schedule.anchor.isoformat())


@dataclass(frozen=True)
class TaskSettings:
    """Airflow operator arguments for one twice task, and what Airflow cannot express."""

    task: str
    retries: int
    retry_delay: float
    retry_exponential_backoff: float  # Airflow 3.3: the multiplier, 0 = constant delay
    max_retry_delay: float | None
    execution_timeout: float | None
    pool: str | None
    pool_slots: int
    translation: Translation

    def operator_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for an Airflow 3.3 operator (durations as timedelta)."""
        kwargs: dict[str, Any] = {
            "retries": self.retries,
            "retry_delay": timedelta(seconds=self.retry_delay),
            "retry_exponential_backoff": self.retry_exponential_backoff,
            "pool_slots": self.pool_slots,
        }
        if self.max_retry_delay is not None:
            kwargs["max_retry_delay"] = timedelta(seconds=self.max_retry_delay)
        if self.execution_timeout is not None:
            kwargs["execution_timeout"] = timedelta(seconds=self.execution_timeout)
        if self.pool is not None:
            kwargs["pool"] = self.pool
        return kwargs

    @property
    def snippet(self) -> str:
        parts = [f"task_id={self.task!r}", f"retries={self.retries}",
                 f"retry_delay=timedelta(seconds={seconds(self.retry_delay)})",
                 f"retry_exponential_backoff={self.retry_exponential_backoff:g}"]
        if self.max_retry_delay is not None:
            parts.append(f"max_retry_delay=timedelta(seconds={seconds(self.max_retry_delay)})")
        if self.execution_timeout is not None:
            parts.append(
                f"execution_timeout=timedelta(seconds={seconds(self.execution_timeout)})"
            )
        if self.pool is not None:
            parts.append(f"pool={self.pool!r}")
        parts.append(f"pool_slots={self.pool_slots}")
        body = "".join(f"    {part},\n" for part in parts)
        return f"TwiceTaskOperator(\n{body})"

    def render(self) -> str:
        """Operator arguments, attempt sequence and differences (the task's Airflow doc)."""
        return replace(self.translation, snippet=self.snippet).render()

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "retries": self.retries,
            "retry_delay": self.retry_delay,
            "retry_exponential_backoff": self.retry_exponential_backoff,
            "max_retry_delay": self.max_retry_delay,
            "execution_timeout": self.execution_timeout,
            "pool": self.pool,
            "pool_slots": self.pool_slots,
            "executions": self.translation.executions,
            "counting": self.translation.counting,
            "attempts": [row.to_dict() for row in self.translation.rows()],
            "differences": list(self.translation.differences),
        }


def _inside_task(pipeline: Pipeline, task: Task) -> list[str]:
    """What twice enforces inside each Airflow try because Airflow cannot."""
    policy = task.retry
    notes = [
        "each Airflow try runs exactly one twice attempt (Executor attempts_per_call=1) and "
        "records it in the twice ledger with its outcome and error class; Airflow's try_number "
        "and twice's attempt number both keep growing",
        "a non-transient error fails the Airflow task with AirflowFailException, so Airflow does "
        "not retry it; a transient one fails the try normally and Airflow retries it",
    ]
    if policy.max_attempts > 1 and not task.repeat_is_safe:
        notes.append(
            "safe_repeat is not asserted: after a failed attempt twice's planner answers "
            "reconcile-effects and the Airflow task fails (AirflowFailException) instead of "
            "retrying; assert safe_repeat=True to let Airflow's retries run"
        )
    due = "the pipeline's delivery deadline" if pipeline.deadline is not None else "no deadline"
    notes.append(
        f"deadline ({due}): before each try twice's planner checks that the attempt "
        "(estimated_duration + validation_duration) can still finish in time, and after a "
        "failure that the next one can, backoff included; if not, it records deadline-infeasible "
        "(attempt not started) and fails the Airflow task instead of letting Airflow retry"
    )
    if task.reconcile is not None:
        notes.append(
            "an unknown outcome (timeout, lost acknowledgement) is reconciled with the same job id "
            "before anything is resubmitted, in this try or the next one"
        )
    else:
        notes.append(
            "an unknown outcome (timeout, lost acknowledgement) fails the Airflow task: the task "
            "has no reconcile function, so nobody can tell whether a resubmission would duplicate"
        )
    if policy.attempt_timeout is not None:
        notes.append(
            f"execution_timeout is twice's attempt timeout + {seconds(TIMEOUT_GRACE)} s: twice "
            "times the attempt out first and records an unknown outcome; Airflow's timeout only "
            "catches a try stuck in twice's bookkeeping"
        )
    if pipeline.workflow_timeout is not None:
        notes.append(
            "workflow_timeout becomes dagrun_timeout; inside a try twice's own workflow deadline "
            "starts with that try, so the DAG run timeout is the binding one"
        )
    notes += [
        "clearing the task in Airflow starts a new twice run (a fresh budget, as in Airflow); "
        "twice's ledger keeps the earlier attempts, so the history stays complete",
        "ctx.upstream is empty: return values do not cross Airflow workers; read the upstream "
        "task's destination for the interval instead",
        "a unit whose latest attempt already succeeded is not run again on an Airflow rerun; a "
        "new input or transform version is a new unit of work and does run",
    ]
    return notes


def task_settings(pipeline: Pipeline, task: Task) -> TaskSettings:
    """Airflow 3.3 settings for ``task``; the retry numbers are ``to_airflow``'s."""
    translation = to_airflow(task.retry)
    config = translation.config
    multiplier = (
        float(config.get("retry_delay_multiplier", 2.0))
        if config.get("retry_exponential_backoff") else 0.0
    )
    timeout = task.timeout
    execution_timeout = None if timeout is None else timeout + TIMEOUT_GRACE
    kept = [d for d in translation.differences if not d.startswith(_OBSOLETE)]
    if multiplier:
        kept.append(
            f"Airflow {AIRFLOW_VERSION} takes the multiplier as retry_exponential_backoff="
            f"{multiplier:g} (a float; 0 means a constant delay)"
        )
    if task.pool is not None:
        kept.append(
            f"pool {task.pool!r}: Airflow's scheduler holds pool_slots={task.slots} while the try "
            "runs; twice also holds the slots in its ledger, so twice workers outside Airflow "
            "sharing the ledger count against the same capacity (airflow dags test ignores "
            "Airflow pools; the ledger pool still applies)"
        )
    translation = replace(translation, differences=(*kept, *_inside_task(pipeline, task)))
    return TaskSettings(
        task=task.name,
        retries=int(config["retries"]),
        retry_delay=float(config["retry_delay"]),
        retry_exponential_backoff=multiplier,
        max_retry_delay=(
            float(config["max_retry_delay"]) if multiplier and "max_retry_delay" in config
            else None
        ),
        execution_timeout=execution_timeout,
        pool=task.pool,
        pool_slots=task.slots,
        translation=translation,
    )


@dataclass(frozen=True)
class PoolSpec:
    """An Airflow pool standing for a twice pool around a real dependency.

    Created with ``--include-deferred``: by default an Airflow pool does not count a deferred
    task's slots, but a twice pool stands for a real dependency's capacity (a warehouse's
    concurrent queries), which a deferred task whose remote job still runs keeps using. twice
    holds its own slots for as long as the work really continues; so must the Airflow pool."""

    name: str
    slots: int
    description: str

    @property
    def command(self) -> str:
        return shlex.join(["airflow", "pools", "set", self.name, str(self.slots),
                           self.description, "--include-deferred"])


def pools(pipeline: Pipeline) -> list[PoolSpec]:
    """The Airflow pools the pipeline's tasks need, with the twice tasks using each."""
    specs = []
    for name, slots in sorted(pipeline.pools.items()):
        users = [
            f"{task.name} ({task.slots})" for task in pipeline.tasks.values() if task.pool == name
        ]
        description = f"twice pool of pipeline {pipeline.name}; slots used by: " + (
            ", ".join(users) or "no task"
        )
        specs.append(PoolSpec(name, slots, description))
    return specs


def pool_commands(pipeline: Pipeline) -> list[str]:
    """``airflow pools set NAME SLOTS DESCRIPTION`` for every pool (run once per Airflow)."""
    return [spec.command for spec in pools(pipeline)]


def describe(pipeline: Pipeline, *, dag_id: str | None = None) -> str:
    """The whole translation, as printed by ``twice airflow describe``."""
    spec = timetable_spec(pipeline.schedule)
    lines = [
        f"DAG {dag_id or pipeline.name} from twice pipeline {pipeline.name!r} "
        f"(checked against Apache Airflow {AIRFLOW_VERSION})",
        "",
        f"schedule: twice {pipeline.schedule} -> timetable={spec.code}",
    ]
    if spec.start_date is not None:
        lines.append(f"start_date: {spec.start_date} (twice's grid anchor, so the grids agree)")
    lines += [
        "data interval: Airflow's data_interval_start/end become the twice Interval; a "
        "zero-width interval (Airflow 3's default for a bare cron or preset schedule) or one off "
        "twice's grid is refused, never guessed",
        "manual runs (airflow dags test DAG DATE, a triggered run): Airflow gives the last "
        "complete interval before DATE, e.g. 2026-11-05 -> [2026-11-04, 2026-11-05) daily",
    ]
    if pipeline.workflow_timeout is not None:
        lines.append(f"dagrun_timeout: {seconds(pipeline.workflow_timeout)} s")
    lines.append("ledger: every attempt goes to the twice ledger named by TWICE_LEDGER "
                 "(or ledger=...); use PostgreSQL when workers run on several hosts")
    specs = pools(pipeline)
    if specs:
        lines += ["", "Pools (create once per Airflow installation):"]
        lines += [f"  {spec.command}" for spec in specs]
        lines.append("  --include-deferred: a deferred task keeps its pool slots while its "
                     "remote job runs (Airflow's default frees them); twice's pools stand for "
                     "a dependency's capacity, which a running job still uses")
    for name in pipeline.topological_order():
        task = pipeline.get_task(name)
        settings = task_settings(pipeline, task)
        upstream = ", ".join(task.depends_on) or "none"
        lines += ["", "=" * 72, f"Task {name} (upstream: {upstream})", "", settings.render()]
    return "\n".join(lines)


def describe_dict(pipeline: Pipeline, *, dag_id: str | None = None) -> dict[str, Any]:
    """``describe`` as JSON-friendly data."""
    spec = timetable_spec(pipeline.schedule)
    return {
        "dag_id": dag_id or pipeline.name,
        "pipeline": pipeline.name,
        "airflow_version": AIRFLOW_VERSION,
        "timetable": {
            "code": spec.code, "kind": spec.kind, "cron": spec.cron, "timezone": spec.timezone,
            "delta_seconds": None if spec.delta is None else spec.delta.total_seconds(),
            "start_date": spec.start_date,
        },
        "dagrun_timeout": pipeline.workflow_timeout,
        "pools": [
            {"name": s.name, "slots": s.slots, "command": s.command} for s in pools(pipeline)
        ],
        "tasks": [
            {**task_settings(pipeline, pipeline.get_task(name)).to_dict(),
             "depends_on": list(pipeline.get_task(name).depends_on)}
            for name in pipeline.topological_order()
        ],
    }


def describe_json(pipeline: Pipeline, *, dag_id: str | None = None) -> str:
    return json.dumps(describe_dict(pipeline, dag_id=dag_id), indent=2, sort_keys=True)
