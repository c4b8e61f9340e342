"""A definition is validated wherever it runs: the CLI (load_pipeline) and the Python API."""

from __future__ import annotations

from pathlib import Path

import pytest

from twice.define.pipeline import Pipeline, PipelineError, TaskContext
from twice.define.schedule import Schedule


def test_the_executor_refuses_an_invalid_definition_before_anything_runs(tmp_path: Path) -> None:
    """Found by issue 39: a task asking for more slots than its pool has was accepted by the
    Python API, and the run crashed from inside the pool with a PoolError traceback after it
    had begun. The executor validates the definition as ``load_pipeline`` does: every problem
    listed, nothing recorded."""
    from twice.engine.executor import Executor
    from twice.ledger import Ledger

    pipeline = Pipeline("pooled", schedule=Schedule.daily("UTC"), pools={"db": 2})

    @pipeline.task(pool="db", slots=3)
    def heavy(ctx: TaskContext) -> None:
        raise AssertionError("never runs")

    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    with pytest.raises(PipelineError, match="slots=3 exceeds pool 'db' capacity 2"):
        Executor(pipeline, ledger)
    assert ledger.units() == []
