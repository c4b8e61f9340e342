"""``TwiceTaskOperator``: an Airflow 3.3 operator running one twice task for the DAG run's interval.

Imports Airflow at module level: only ``twice.drivers.airflow.to_dag`` (or a DAG file) imports it.
Each execute is one Airflow try and exactly one twice attempt on the shared ledger; see
``twice.drivers.airflow.runner`` for why, and for the verdict this operator turns into Airflow
terms.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from twice.define.pipeline import Pipeline
from twice.drivers.airflow.runner import (
    IntervalRefused,
    TwiceTransientTry,
    airflow_lineage_parent,
    first_try_of_budget,
    interval_from_airflow,
    run_try,
    try_holder,
)

LEDGER_ENV = "TWICE_LEDGER"


class TwiceTaskOperator(BaseOperator):
    """Runs twice task ``twice_task`` of ``pipeline``: one twice attempt per Airflow try.

    Succeeds (returning the try's record for XCom), raises ``TwiceTransientTry`` so Airflow
    retries, or raises ``AirflowFailException`` so it does not: a permanent error, an exhausted
    twice budget, a deadline that cannot be met, an effect that needs reconciling, a refused
    interval.
    """

    ui_color = "#d7ecd9"

    def __init__(
        self,
        *,
        pipeline: Pipeline,
        twice_task: str,
        ledger: str | None = None,
        executor_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.twice_task = twice_task
        self.ledger_url = ledger
        self.executor_options = dict(executor_options or {})

    def execute(self, context: Any) -> dict[str, Any]:
        from twice.ledger import Ledger

        try:
            interval = interval_from_airflow(
                self.pipeline, context.get("data_interval_start"), context.get("data_interval_end")
            )
        except IntervalRefused as exc:
            raise AirflowFailException(f"twice task {self.twice_task}: {exc}") from None
        url = self.ledger_url or os.environ.get(LEDGER_ENV)
        if not url:
            raise AirflowFailException(
                f"ledger: twice task {self.twice_task} has no ledger; pass ledger=URL to "
                f"twice.drivers.airflow.to_dag or set {LEDGER_ENV} on the workers"
            )
        ti = context["ti"]
        try_number = int(ti.try_number)
        continue_run = not first_try_of_budget(try_number, int(ti.max_tries), self.retries or 0)
        holder = try_holder(ti.dag_id, ti.task_id, ti.run_id, try_number)
        with Ledger.open(url, durable=True) as ledger:
            outcome = run_try(
                self.pipeline, self.twice_task, ledger, interval, holder=holder,
                continue_run=continue_run, listeners=self._lineage(context),
                **self.executor_options,
            )
        self.log.info("%s", outcome.message)
        if outcome.verdict == "succeeded":
            return outcome.to_dict()
        if outcome.verdict == "retry":
            raise TwiceTransientTry(outcome.message)
        raise AirflowFailException(outcome.message)

    def _lineage(self, context: Any) -> list[Any]:
        """OpenLineage for this try's attempt, nested under this task instance's run, when
        OpenLineage is configured on the worker (``twice.engine.lineage``); never fails it."""
        from twice.engine.lineage import lineage_listeners, openlineage_configured

        if not openlineage_configured():
            return []
        try:
            parent = airflow_lineage_parent(context)
        except Exception as exc:  # the attempt runs without a parent rather than not at all
            self.log.warning("OpenLineage parent of this task instance unknown: %s", exc)
            parent = None
        return lineage_listeners(self.pipeline, parent=parent)
