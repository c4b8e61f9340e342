"""One owned write opens its destination once (issue 38: the check after the write opened it
a second time only to read the schema; on DuckDB each open is a database start).

The schema the ledger records with the partition's fingerprint now comes from inside the
write's transaction; it must be what the destination shows afterwards, including a column the
write added.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twice.destinations as destinations
from twice import Pipeline, Schedule, TaskContext
from twice.engine.executor import Executor
from twice.engine.verification import partition_key, schema_signature
from twice.ledger import Ledger

DAY = date(2026, 3, 2)


def counting_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real: Callable[..., Any] = destinations.open_destination

    def open_destination(spec: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(spec)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(destinations, "open_destination", open_destination)
    return opened


def pipeline_writing(spec: str, columns: dict[str, pa.Array]) -> Pipeline:
    pipeline = Pipeline("opens", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=spec, write="replace", safe_repeat=True)
    def load(ctx: TaskContext) -> pa.Table:
        day = ctx.interval.start.date()
        return pa.table({"day": pa.array([day] * 3, pa.date32()), **columns})

    return pipeline


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", "postgresql"])
def test_an_owned_write_opens_its_destination_once_and_records_its_schema(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if engine == "postgresql":
        spec = f"{request.getfixturevalue('postgres_url')}?partition_column=day#public.out"
    else:
        suffix = "db" if engine == "sqlite" else "duckdb"
        spec = f"{engine}://{tmp_path}/w.{suffix}?partition_column=day#out"
    interval = Schedule.daily("UTC").interval_for(DAY)
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        first = pipeline_writing(spec, {"v": pa.array([1, 2, 3], pa.int64())})
        assert Executor(first, ledger).run(interval).ok
        # the next day adds a column: the recorded schema must show it
        second = pipeline_writing(spec, {"v": pa.array([1, 2, 3], pa.int64()),
                                         "note": pa.array(["a", "b", "c"])})
        opened = counting_opens(monkeypatch)
        next_day = Schedule.daily("UTC").interval_for(DAY + timedelta(days=1))
        result = Executor(second, ledger, accept_schema_change=True).run(next_day)
        assert result.ok, result.counts()
        assert len(opened) == 1, opened
        monkeypatch.undo()
        with destinations.open_destination(spec) as dest:
            shown = schema_signature(dest.schema())
        assert "note" in shown
        for span in (interval, next_day):
            recorded = ledger.latest_fingerprint(first.get_task("load").destination,
                                                 partition_key(span))
            assert recorded is not None
        assert recorded.schema == shown
