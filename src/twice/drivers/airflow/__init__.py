"""Run twice pipelines under Apache Airflow 3.3 (its scheduler, workers, pools and retries).

``to_dag(pipeline, ledger=URL)`` builds the DAG; ``describe(pipeline)`` prints the translation
(timetable, per-task retries and the attempt sequence, pools, what Airflow cannot express)
without importing Airflow. Importing this package does not import Airflow either: only building
a DAG (``to_dag``) or the operator does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twice.core.extras import require
from twice.drivers.airflow.runner import (
    IntervalRefused,
    TryOutcome,
    TwiceTransientTry,
    first_try_of_budget,
    interval_from_airflow,
    run_try,
    verdict_for,
)
from twice.drivers.airflow.translation import (
    AIRFLOW_VERSION,
    PoolSpec,
    TaskSettings,
    TimetableSpec,
    describe,
    describe_dict,
    describe_json,
    pool_commands,
    pools,
    task_settings,
    timetable_spec,
)

if TYPE_CHECKING:
    from twice.drivers.airflow.dag import to_dag
    from twice.drivers.airflow.operator import TwiceTaskOperator


def __getattr__(name: str) -> Any:
    """``to_dag`` and ``TwiceTaskOperator`` load Airflow: import them on first use."""
    if name in ("to_dag", "TwiceTaskOperator"):
        require("airflow.sdk", extra="airflow", who="Airflow DAGs and operators")
    if name == "to_dag":
        from twice.drivers.airflow.dag import to_dag

        return to_dag
    if name == "TwiceTaskOperator":
        from twice.drivers.airflow.operator import TwiceTaskOperator

        return TwiceTaskOperator
    raise AttributeError(f"module 'twice.drivers.airflow' has no attribute {name!r}")


__all__ = [
    "AIRFLOW_VERSION",
    "IntervalRefused",
    "PoolSpec",
    "TaskSettings",
    "TimetableSpec",
    "TryOutcome",
    "TwiceTaskOperator",
    "TwiceTransientTry",
    "describe",
    "describe_dict",
    "describe_json",
    "first_try_of_budget",
    "interval_from_airflow",
    "pool_commands",
    "pools",
    "run_try",
    "task_settings",
    "timetable_spec",
    "to_dag",
    "verdict_for",
]
