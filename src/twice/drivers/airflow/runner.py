"""One Airflow try of one twice task: the interval, the executor call and the verdict.

No Airflow import here: the operator (``twice.drivers.airflow.operator``) turns the verdict into
Airflow's terms (return, raise so Airflow retries, or ``AirflowFailException``), so this logic
is tested on real ledgers without Airflow.

Why each try makes exactly one attempt: Airflow owns the retry loop (its scheduler and workers),
twice owns the record. ``Executor(attempts_per_call=1, continue_run=True)`` continues the twice
run Airflow's earlier tries started, so twice's budget, backoff and safe-repeat rules span the
tries; the first try of an Airflow budget (a new DAG run, or the task cleared) opens a new twice
run, which is Airflow's own rule for a cleared task.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from twice.core.extras import require
from twice.core.interval import Interval, IntervalError
from twice.core.outcomes import AirflowVerdict
from twice.define.schedule import OpenIntervalError
from twice.errors import InputError, TwiceError

if TYPE_CHECKING:
    from twice.define.pipeline import Pipeline
    from twice.engine.events import Listener
    from twice.engine.executor import UnitResult
    from twice.engine.lineage import ParentRun
    from twice.ledger import Ledger


RETRYABLE_DECISIONS = frozenset({"wait-backoff", "retry-eligible"})
"""Planner answers after a try that mean "another attempt is due": Airflow's retry runs it."""

OBSERVE_DECISIONS = frozenset({"observe-running", "reconcile-remote", "refresh-observation"})
"""Planner answers that a later try can settle by looking again (only with a reconcile fn)."""


class IntervalRefused(InputError):
    """Airflow's data interval cannot be a twice interval (zero width, naive, off the grid)."""


class TwiceTransientTry(TwiceError, RuntimeError):
    """This Airflow try's twice attempt failed transiently: Airflow should retry the task."""


@dataclass(frozen=True)
class TryOutcome:
    """What one Airflow try did, and what Airflow should do next."""

    verdict: AirflowVerdict
    message: str
    unit: UnitResult
    continued_run: bool
    holder: str
    partition: dict[str, Any] | None = None  # the fingerprint diff recorded after success

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "message": self.message, "continued_run": self.continued_run,
            "holder": self.holder, "unit": self.unit.to_dict(), "partition": self.partition,
        }


def interval_from_airflow(
    pipeline: Pipeline, start: datetime | None, end: datetime | None
) -> Interval:
    """Airflow's ``data_interval_start/end`` as the pipeline's twice interval, or refused.

    Never guessed: a zero-width interval is what Airflow 3 gives a bare cron or preset
    schedule (its default trigger timetable), and partitioning on its start would silently
    mislabel or empty the data.
    """
    if start is None or end is None:
        raise IntervalRefused(
            "data_interval_start/data_interval_end: the DAG run has no data interval (a run "
            "without a logical date, or an asset-triggered run); twice runs only for a data "
            "interval: give the DAG a data-interval timetable (twice.drivers.airflow.to_dag does)"
        )
    if start == end:
        raise IntervalRefused(
            f"data_interval_start == data_interval_end == {start.isoformat()}: a zero-width "
            "interval selects no data. This is Airflow 3's default for a bare cron or preset "
            "schedule (a trigger timetable); pin a data-interval timetable such as "
            "CronDataIntervalTimetable (twice.drivers.airflow.to_dag does) instead of running it"
        )
    try:
        span = Interval(_plain(start), _plain(end))
        return pipeline.schedule.canonical(span)
    except (IntervalError, ValueError) as exc:
        raise IntervalRefused(
            f"data_interval_start/data_interval_end [{start.isoformat()}, {end.isoformat()}): "
            f"{exc}"
        ) from None


def _plain(value: datetime) -> datetime:
    """A stdlib datetime for Airflow's pendulum one (same instant and offset)."""
    return datetime.fromisoformat(value.isoformat())


#: The ledger keeps holder ids of up to 400 characters (PostgreSQL enforces it).
MAX_HOLDER = 400


def try_holder(dag_id: str, task_id: str, run_id: str, try_number: int) -> str:
    """The lease holder of one Airflow try: ``host:pid:airflow:DAG.TASK:RUN:try-N``. This
    process first, so a try killed on this host frees its unit at once for the next try
    (``twice.ledger.lease_holders``) instead of holding it for the lease's whole life. Airflow
    ids may be 250 characters each: a longer id is cut and ends with a digest of the whole."""
    from twice.ledger.lease_holders import process_holder

    holder = f"{process_holder()}:airflow:{dag_id}.{task_id}:{run_id}:try-{try_number}"
    if len(holder) <= MAX_HOLDER:
        return holder
    digest = hashlib.sha256(holder.encode()).hexdigest()[:16]
    return f"{holder[:MAX_HOLDER - 17]}:{digest}"


def first_try_of_budget(try_number: int, max_tries: int, retries: int) -> bool:
    """Whether this Airflow try opens a fresh retry budget.

    Airflow keeps ``try_number`` growing when a task is cleared and raises ``max_tries`` to
    ``try_number + retries``, so the budget's first try is ``max_tries - retries + 1``.
    """
    return try_number <= max_tries - retries + 1


def run_try(
    pipeline: Pipeline,
    task_name: str,
    ledger: Ledger,
    interval: Interval,
    *,
    holder: str,
    continue_run: bool,
    listeners: Iterable[Listener] = (),
    **executor_options: Any,
) -> TryOutcome:
    """Run one twice attempt of ``task_name`` for ``interval`` and say what Airflow does next.

    ``listeners`` receive the engine's events as well (the operator's OpenLineage listener)."""
    from twice.engine.events import Event, OutputVerified
    from twice.engine.executor import Executor

    verified: list[OutputVerified] = []

    def listen(event: Event) -> None:
        if isinstance(event, OutputVerified) and event.diff is not None:
            verified.append(event)

    executor = Executor(
        pipeline, ledger, holder=holder, max_workers=1, attempts_per_call=1,
        continue_run=continue_run, listeners=[listen, *listeners], **executor_options,
    )
    try:
        unit = executor.run(interval, tasks=[task_name]).unit(task_name)
    except OpenIntervalError as exc:  # a DAG run for an interval that has not ended
        raise IntervalRefused(
            f"data interval {interval.label} has not ended: it ends "
            f"{exc.first.end.isoformat()}, now is {exc.as_of.isoformat()}; twice runs an "
            "interval once it has ended, so this try is refused, not retried"
        ) from None
    verdict, message = verdict_for(pipeline, unit)
    partition = None
    if verdict == "succeeded" and verified:
        # the engine verified the output before recording success (one rule on every path)
        partition = verified[-1].diff.to_dict()
        message += (
            f"; partition {partition['partition']} fingerprint v{partition['version']}: "
            f"{partition['verdict']} ({partition['rows_after']} rows)"
        )
    return TryOutcome(verdict, message, unit, continue_run, holder, partition)


def airflow_lineage_parent(context: Mapping[str, Any]) -> ParentRun | None:
    """The OpenLineage run of the Airflow task instance running this try, the parent of the
    twice attempt's run (its root: the DAG run). None if the context cannot say.

    With ``apache-airflow-providers-openlineage`` installed, its macros give the very ids the
    provider emits for the task (``lineage_job_namespace``, ``lineage_job_name``,
    ``lineage_run_id``, ``lineage_root_job_name``, ``lineage_root_run_id``). Without it, the
    same conventions are derived here: job ``<dag_id>.<task_id>`` (root ``<dag_id>``) in the
    namespace ``OPENLINEAGE_NAMESPACE`` (default ``default``), run ids from the client's
    ``generate_static_uuid`` over the logical date and
    ``<namespace>.<dag_id>.<task_id>.<try_number>.<map_index>`` (root:
    ``<namespace>.<dag_id>.<clear_number>``), the provider's formulas. Needs openlineage.
    """
    ti = context.get("ti") or context.get("task_instance")
    if ti is None:
        return None
    from twice.engine.lineage import ParentRun

    try:
        from airflow.providers.openlineage.plugins import macros

        namespace = macros.lineage_job_namespace()
        return ParentRun(
            namespace, macros.lineage_job_name(ti), str(macros.lineage_run_id(ti)),
            root=ParentRun(namespace, macros.lineage_root_job_name(ti),
                           str(macros.lineage_root_run_id(ti))),
        )
    except Exception:  # no provider (or an older one): derive the same ids
        pass
    generate_static_uuid = require("openlineage.client.uuid", extra="lineage",
                                   who="Airflow lineage parents").generate_static_uuid

    dag_run = context.get("dag_run")
    logical = (context.get("logical_date") or getattr(dag_run, "logical_date", None)
               or getattr(dag_run, "run_after", None))
    if logical is None:
        return None
    instant = _plain(logical)
    namespace = os.environ.get("OPENLINEAGE_NAMESPACE") or "default"
    dag_id, task_id = ti.dag_id, ti.task_id
    map_index = getattr(ti, "map_index", -1)
    run_id = generate_static_uuid(
        instant, f"{namespace}.{dag_id}.{task_id}.{ti.try_number}.{map_index}".encode())
    clear_number = getattr(dag_run, "clear_number", 0) or 0
    root_id = generate_static_uuid(instant, f"{namespace}.{dag_id}.{clear_number}".encode())
    return ParentRun(namespace, f"{dag_id}.{task_id}", str(run_id),
                     root=ParentRun(namespace, dag_id, str(root_id)))


def verdict_for(pipeline: Pipeline, unit: UnitResult) -> tuple[AirflowVerdict, str]:
    """Map a unit's result to succeed / let Airflow retry / fail without retry."""
    where = f"twice task {unit.task} for {unit.interval}"
    ledger_note = f"(unit {unit.uow_id}, attempt {unit.total_attempts} in the ledger)"
    if unit.outcome == "succeeded":
        how = "succeeded" if unit.attempts else "already succeeded earlier: not run again"
        return "succeeded", f"{where}: {how} {ledger_note}"
    if unit.outcome == "attempts-exhausted" and unit.next_decision in RETRYABLE_DECISIONS:
        return "retry", (
            f"{where}: attempt {unit.total_attempts} failed transiently ({unit.error}); the "
            f"planner says {unit.next_decision}: Airflow's retry runs the next attempt "
            "(twice waits out any remaining backoff first)"
        )
    if unit.outcome == "leased-elsewhere":
        return "retry", f"{where}: {unit.reason}; a later Airflow try looks again"
    task = pipeline.get_task(unit.task)
    if (
        unit.outcome == "unknown-needs-reconcile" and task.reconcile is not None
        and unit.next_decision in OBSERVE_DECISIONS
    ):
        return "retry", f"{where}: {unit.reason}; a later Airflow try reconciles again"
    detail = f"{unit.outcome}: {unit.reason}"
    if unit.error:
        detail += f" (last error: {unit.error})"
    return "fail", (
        f"{where}: {detail}; next step per twice's planner: {unit.next_decision}. Not retried "
        f"by Airflow {ledger_note}"
    )
