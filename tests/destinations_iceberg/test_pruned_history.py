"""An unknown outcome settled after routine maintenance pruned the table's history (Iceberg
snapshot expiry, Delta log retention): the commit record is gone, the unit's marker in the
table's metadata is not, so the executor records the attempt as succeeded instead of "never
committed", and does not run the task again."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twice import OutcomeUnknownError
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.engine.executor import Executor
from twice.ledger import Ledger

DAY, OTHER = date(2026, 11, 30), date(2026, 12, 1)


def _rows(day: date, tag: str) -> pa.Table:
    return pa.table({"day": pa.array([day] * 3, pa.date32()), "id": [1, 2, 3],
                     "tag": [tag] * 3})


def _prune(dest: Any) -> None:
    """What maintenance does between the write and the settle: another commit, then the
    history holding the write's record is pruned."""
    dest.replace_partition(_rows(OTHER, "other"), OTHER, stamp=None)
    if dest.engine == "iceberg":
        table = dest._require()
        current = table.current_snapshot().snapshot_id
        old = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != current]
        table.maintenance.expire_snapshots().by_ids(old).commit()
    else:
        from deltalake import DeltaTable

        table = DeltaTable(dest.uri)
        table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
        table = DeltaTable(dest.uri)
        table.create_checkpoint()
        table.cleanup_metadata()


@pytest.mark.parametrize("engine", ["iceberg", "delta"])
def test_unknown_append_after_pruning_is_settled_from_the_marker(engine: str,
                                                                 tmp_path: Path) -> None:
    spec = (f"iceberg://{tmp_path}/wh?partition_column=day#ns.loaded" if engine == "iceberg"
            else f"delta://{tmp_path}/loaded?partition_column=day")
    pipeline = Pipeline("pruned", schedule=Schedule.daily("UTC"))
    calls: list[int] = []

    @pipeline.task(destination=spec, safe_repeat=True)
    def load(ctx: TaskContext) -> None:
        calls.append(ctx.attempt)
        with open_destination(ctx.destination) as dest:
            dest.append(_rows(DAY, "loaded"), partition=ctx.interval)  # stamped: the active one
            if len(calls) == 1:
                _prune(dest)
                raise OutcomeUnknownError("acknowledgement lost after the write (injected)")

    interval = pipeline.schedule.interval_for(DAY)
    with Ledger.open(f"sqlite:///{tmp_path}/ledger.db") as ledger:
        result = Executor(pipeline, ledger).run(interval)
        unit = result.unit("load")
        assert unit.outcome == "succeeded", unit
        assert calls == [1]  # settled from the marker, not run again
        settled = [o for o in ledger.observations(unit.uow_id or "")
                   if o.source.startswith("destination:")]
        assert [o.state for o in settled] == ["succeeded"]
        assert "pruned" in settled[0].detail["basis"]
        assert "commit" not in settled[0].detail
    with open_destination(spec) as dest:
        assert dest.commit_records(unit.uow_id) == []
        assert dest.row_count(interval) == 3
