"""Fixtures for the intermediates tests: real SQLite/DuckDB stores, real ledgers, a hand clock."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.ledger import Ledger

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
DAY = date(2026, 11, 5)
INTERVAL = Interval(datetime(2026, 11, 5, tzinfo=UTC), datetime(2026, 11, 6, tzinfo=UTC))


class HandClock:
    """A clock the test moves by hand, so retention boundaries are exact."""

    def __init__(self, start: datetime = START) -> None:
        self.current = start

    def __call__(self) -> datetime:
        return self.current

    def advance(self, **kwargs: float) -> None:
        self.current += timedelta(**kwargs)


@dataclass
class Store:
    """One real destination plus a way to change its rows behind twice's back."""

    engine: str
    spec: str
    path: Path

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        if self.engine == "sqlite":
            with sqlite3.connect(self.path) as conn:
                return conn.execute(statement).fetchall()
        conn = duckdb.connect(str(self.path))
        try:
            return conn.execute(statement).fetchall()
        finally:
            conn.close()

    def count(self) -> int:
        return int(self.sql("SELECT count(*) FROM enriched")[0][0])


def make_unit(*, transform: str = "t1", input_version: str = "v1") -> UnitOfWork:
    return UnitOfWork(
        pipeline="funds", task="enrich", interval=INTERVAL, destination="warehouse.enriched",
        transform_version=transform, input_partition="2026-11-05", input_version=input_version,
    )


def rows(n: int = 50, tag: str = "x") -> list[dict[str, Any]]:
    return [{"day": DAY, "id": i, "v": f"{tag}{i}"} for i in range(n)]


class Counter:
    """A compute callable that counts its calls (and can be made measurably slow)."""

    def __init__(self, produce: Callable[[], Any] = rows, *, sleep: float = 0.0) -> None:
        self.calls = 0
        self.produce = produce
        self.sleep = sleep

    def __call__(self) -> Any:
        import time

        self.calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        return self.produce()


@pytest.fixture
def clock() -> HandClock:
    return HandClock()


@pytest.fixture
def ledger(tmp_path: Path, clock: HandClock) -> Iterator[Ledger]:
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock) as opened:
        yield opened


@pytest.fixture(params=["sqlite", "duckdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    engine = request.param
    path = tmp_path / f"work.{engine}"
    return Store(engine, f"{engine}:///{path}?partition_column=day&key_columns=id#enriched", path)
