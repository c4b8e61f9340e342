"""When the ledger refuses a unit's claim (a full disk), the
claim's transaction rolls back: no attempt began, nothing ran, nothing about the unit was
recorded. The unit is reported ``blocked`` with the ledger's error, not as an unknown outcome
to reconcile; once the ledger can be written, the same run executes it once."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import event
from tests.executor.helpers import day

from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger


def _pipeline(runs: list[str]) -> Pipeline:
    pipeline = Pipeline("refusal", schedule=Schedule.daily("UTC"))

    @pipeline.task(safe_repeat=True)
    def load(ctx: TaskContext) -> None:
        runs.append(ctx.interval.label)

    return pipeline


def _disk_full_on_claim(ledger: Ledger) -> None:
    """Recording a unit fails as SQLite fails when its volume is full (SQLITE_FULL)."""

    @event.listens_for(ledger._session.engine, "before_cursor_execute")
    def _full(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO twice_units_of_work"):
            raise sqlite3.OperationalError("database or disk is full")


def test_a_refused_claim_is_blocked_not_unknown_and_runs_once_later(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    runs: list[str] = []
    pipeline = _pipeline(runs)
    with Ledger.open(url, retry_seconds=0.5) as ledger:
        _disk_full_on_claim(ledger)
        [result] = Executor(pipeline, ledger).run([day(0)]).units
        assert result.outcome == "blocked", result
        assert "could not record the claim" in result.reason
        assert "LedgerStorageError" in (result.error or "")
        assert runs == []
    with Ledger.open(url) as ledger:
        assert ledger.units() == []  # the claim rolled back whole
        [result] = Executor(pipeline, ledger).run([day(0)]).units
        assert result.outcome == "succeeded", result
        assert runs == [day(0).label]
        [unit] = ledger.units()
        assert [a.outcome for a in ledger.attempts(unit.uow_id)] == ["succeeded"]
