"""Under Airflow, an attempt's OpenLineage run nests under the Airflow task instance's run.

No Airflow here (it lives in its own environment): the operator's helpers are called with the
context values Airflow passes (``ti``, ``dag_run``, ``logical_date``), the way
``tests/on_airflow/test_airflow_runner.py`` drives the runner without Airflow. Without the
Airflow OpenLineage provider the parent ids are derived with the provider's own formulas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.openlineage.helpers import day, table, write_rows
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.ledger import Ledger

pytest.importorskip("openlineage.client")

@dataclass
class FakeTaskInstance:
    dag_id: str = "daily_positions"
    task_id: str = "load"
    try_number: int = 1
    map_index: int = -1


@dataclass
class FakeDagRun:
    logical_date: datetime = datetime(2026, 12, 1, tzinfo=UTC)
    clear_number: int = 0


def test_the_parent_is_the_task_instance_run_and_the_root_the_dag_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from openlineage.client.uuid import generate_static_uuid

    from twice.drivers.airflow.runner import airflow_lineage_parent

    monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "airflow-prod")
    run = FakeDagRun()
    parent = airflow_lineage_parent({"ti": FakeTaskInstance(try_number=2), "dag_run": run})
    assert parent is not None and parent.root is not None
    assert (parent.namespace, parent.name) == ("airflow-prod", "daily_positions.load")
    assert parent.run_id == str(generate_static_uuid(
        run.logical_date, b"airflow-prod.daily_positions.load.2.-1"))
    assert (parent.root.namespace, parent.root.name) == ("airflow-prod", "daily_positions")
    assert parent.root.run_id == str(generate_static_uuid(
        run.logical_date, b"airflow-prod.daily_positions.0"))
    assert airflow_lineage_parent({}) is None


def test_an_airflow_try_emits_its_attempt_under_the_task_run(
    tmp_path: Path, ledger: Ledger, lineage_file: Path
) -> None:
    from twice.drivers.airflow.runner import airflow_lineage_parent, run_try
    from twice.engine.lineage import lineage_listeners

    pipeline = Pipeline("positions", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=table(tmp_path, "positions"), timeout=30)
    def load(ctx: TaskContext) -> object:
        return write_rows(ctx, 4)

    parent = airflow_lineage_parent({"ti": FakeTaskInstance(), "dag_run": FakeDagRun()})
    assert parent is not None
    outcome = run_try(pipeline, "load", ledger, day(), holder="airflow:test",
                      continue_run=False, listeners=lineage_listeners(pipeline, parent=parent),
                      clock=ledger.now)
    assert outcome.verdict == "succeeded"
    events = [json.loads(line) for line in lineage_file.read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        facet = event["run"]["facets"]["parent"]
        assert facet["run"]["runId"] == parent.run_id
        assert facet["job"]["name"] == "daily_positions.load"
        assert facet["root"]["job"]["name"] == "daily_positions"
        assert facet["root"]["run"]["runId"] == parent.root.run_id  # type: ignore[union-attr]
    [output] = events[-1]["outputs"]
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 4
