"""A dbt attempt is settled only from its own folder.

Found by a probe: the folder of an attempt is keyed by the job id and the attempt number, which
an earlier ledger over the same project (or an attempt killed before it cleared the folder)
shares. A killed attempt was reconciled from such a folder's ``run_results.json`` as succeeded,
and a slice that never ran read as verified. Each folder now names the attempt it belongs to
(unit, number, when it began by the ledger's clock), and the reconciler reads only its own.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.define.pipeline import RemoteState, TaskContext
from twice.destinations.commits import WriteStamp
from twice.drivers.dbt import ATTEMPT_FILE, _attempt_mark, attempt_dir, reconciler

DAY = Interval(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))


def context(began_at: str) -> TaskContext:
    unit = UnitOfWork("p", "stg_events", DAY, "", "1")
    stamp = WriteStamp(uow_id=unit.uow_id, fence_key="p/stg_events/x", generation=1,
                       attempt=1, token=7, began_at=began_at)
    return TaskContext(unit=unit, attempt=1, generation=1, stamp=stamp)


def finished_folder(project: SimpleNamespace, ctx: TaskContext, mark: str | None) -> None:
    """A folder as a finished dbt run leaves it: a dead pid, a successful result."""
    folder = attempt_dir(project, "job_g1", ctx.attempt)  # type: ignore[arg-type]
    folder.mkdir(parents=True)
    if mark is not None:
        (folder / ATTEMPT_FILE).write_text(mark, encoding="utf-8")
    (folder / "pid").write_text("999999999\n", encoding="utf-8")
    (folder / "run_results.json").write_text(json.dumps({"results": [
        {"unique_id": "model.p.stg_events", "status": "success"}]}), encoding="utf-8")


def test_only_the_attempts_own_folder_settles_it(tmp_path: Path) -> None:
    project = SimpleNamespace(state=tmp_path / "state")
    now = context("2026-12-05T10:00:00.000001+00:00")
    reconcile = reconciler(project)  # type: ignore[arg-type]
    finished_folder(project, now, _attempt_mark(context("2026-12-01T09:00:00+00:00")))
    assert reconcile("job_g1", now) is RemoteState.NOT_FOUND  # another attempt's results
    folder = attempt_dir(project, "job_g1", 1)  # type: ignore[arg-type]
    (folder / ATTEMPT_FILE).unlink()
    assert reconcile("job_g1", now) is RemoteState.NOT_FOUND  # a folder naming no attempt
    (folder / ATTEMPT_FILE).write_text(_attempt_mark(now), encoding="utf-8")
    assert reconcile("job_g1", now) is RemoteState.SUCCEEDED  # its own
