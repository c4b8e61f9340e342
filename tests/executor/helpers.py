"""Shared helpers for the executor tests: a manual clock, ledger readers, planner answers."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from datetime import UTC, date, datetime, timedelta
from typing import Any

from twice import testing
from twice.cli.ledger_decide import decide_over_ledger
from twice.core.interval import Interval
from twice.define.schedule import Schedule
from twice.ledger import Ledger
from twice.testing import no_sleep as no_sleep

DAY = date(2026, 11, 30)
# 2026-12-01T05:00Z: the morning after the interval 2026-11-30, before a 06:00 deadline.
MORNING = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)


def day(offset: int = 0) -> Interval:
    return Schedule.daily("UTC").interval_for(DAY + timedelta(days=offset))


class ManualClock(testing.ManualClock):
    """twice's manual clock, starting on the test morning unless told otherwise."""

    def __init__(self, start: datetime = MORNING) -> None:
        super().__init__(start)


def planner_decisions(url: str, as_of: datetime | None = None) -> dict[str, dict[str, Any]]:
    """``twice decide --ledger URL --json`` output, keyed by task name."""
    out = io.StringIO()
    text = None if as_of is None else as_of.isoformat()
    with redirect_stdout(out):
        assert decide_over_ledger(url, text, "json") == 0
    report = json.loads(out.getvalue())
    return {row["task"]: row for row in report["tasks"]}


def outcomes(ledger: Ledger, uow_id: str) -> list[str]:
    return [attempt.outcome for attempt in ledger.attempts(uow_id)]


def decisions(ledger: Ledger, uow_id: str) -> list[str]:
    return [record.decision for record in ledger.decisions(uow_id)]


def observed(ledger: Ledger, uow_id: str, source: str | None = None) -> list[str]:
    return [o.state for o in ledger.observations(uow_id) if source in (None, o.source)]
