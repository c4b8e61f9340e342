"""``to_dag``: a twice pipeline as an Airflow 3.3 DAG (one operator per twice task).

Airflow is imported inside ``to_dag`` only, so ``import twice.drivers.airflow`` stays light. The DAG
gets a pinned *data-interval* timetable (never Airflow 3's zero-width default), each task the
retry settings, pool and doc that ``twice.drivers.airflow.translation`` derives from its policy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twice.drivers.airflow.translation import describe, task_settings, timetable_spec

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from twice.define.pipeline import Pipeline

DEFAULT_START = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
"""start_date for cron timetables when none is given (catchup is off by default)."""


KEEP_DEADLINE: Any = object()
"""``to_dag``'s default ``deadline``: keep the pipeline's own."""


def load(pipeline: Pipeline | str | os.PathLike[str]) -> Pipeline:
    """A Pipeline object as is; a path through ``load_pipeline`` (validated)."""
    from twice.define.pipeline import Pipeline

    if isinstance(pipeline, Pipeline):
        pipeline.validate()
        return pipeline
    if isinstance(pipeline, str | os.PathLike):
        from twice.define.load import load_pipeline

        return load_pipeline(Path(pipeline))
    raise TypeError(
        "pipeline: expected a twice Pipeline or a pipeline file path, got "
        f"{type(pipeline).__name__}"
    )


def to_dag(
    pipeline: Pipeline | str | os.PathLike[str],
    *,
    ledger: str | None = None,
    dag_id: str | None = None,
    start_date: datetime | None = None,
    catchup: bool = False,
    tags: Iterable[str] = ("twice",),
    executor_options: Mapping[str, Any] | None = None,
    deadline: Any = KEEP_DEADLINE,
    **dag_kwargs: Any,
) -> DAG:
    """Build the Airflow DAG for ``pipeline`` (a Pipeline or the path of a pipeline file).

    ``ledger`` is the twice ledger URL every try records into (PostgreSQL when workers run on
    several hosts); without it the workers read ``TWICE_LEDGER``. ``executor_options`` go to
    ``twice.engine.executor.Executor`` (e.g. ``lease_ttl``). ``deadline`` replaces the
    pipeline's delivery deadline (``None``: none, e.g. to run past intervals with ``airflow dags
    test``; the default keeps the pipeline's). Other keyword arguments go to ``DAG``.
    """
    from airflow.sdk import DAG, CronDataIntervalTimetable, DeltaDataIntervalTimetable

    from twice.drivers.airflow.operator import TwiceTaskOperator

    pipe = load(pipeline)
    if deadline is not KEEP_DEADLINE:
        pipe = pipe.with_deadline(deadline)
    spec = timetable_spec(pipe.schedule)
    if spec.kind == "cron":
        timetable: Any = CronDataIntervalTimetable(spec.cron or "", timezone=spec.timezone)
        start = start_date or DEFAULT_START
    else:
        assert spec.delta is not None and spec.start_date is not None
        timetable = DeltaDataIntervalTimetable(spec.delta)
        start = start_date or datetime.fromisoformat(spec.start_date)
    name = dag_id or pipe.name
    if pipe.workflow_timeout is not None:
        dag_kwargs.setdefault("dagrun_timeout", timedelta(seconds=pipe.workflow_timeout))
    dag = DAG(
        name, schedule=timetable, start_date=start, catchup=catchup, tags=set(tags),
        doc_md=f"```\n{describe(pipe, dag_id=name)}\n```", **dag_kwargs,
    )
    operators: dict[str, Any] = {}
    for task_name in pipe.topological_order():
        task = pipe.get_task(task_name)
        settings = task_settings(pipe, task)
        operators[task_name] = TwiceTaskOperator(
            task_id=task_name, dag=dag, pipeline=pipe, twice_task=task_name, ledger=ledger,
            executor_options=executor_options, doc_md=f"```\n{settings.render()}\n```",
            **settings.operator_kwargs(),
        )
    for task_name, operator in operators.items():
        for upstream in pipe.get_task(task_name).depends_on:
            if upstream in operators:  # external dependencies are checked in the ledger
                operators[upstream] >> operator
    return dag
