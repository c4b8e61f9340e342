"""Helpers shared by the ledger tests and the worker processes they spawn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


class FakeClock:
    """A clock the test moves by hand, so expiry and staleness are exact."""

    def __init__(self, start: datetime = START) -> None:
        self.current = start

    def __call__(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> datetime:
        self.current += timedelta(seconds=seconds)
        return self.current


def make_uow(day: int = 5, *, task: str = "load", pipeline: str = "funds") -> UnitOfWork:
    start = datetime(2026, 11, day, tzinfo=UTC)
    return UnitOfWork(
        pipeline=pipeline,
        task=task,
        interval=Interval(start, start + timedelta(days=1)),
        destination="warehouse.positions",
        transform_version="t1",
        input_partition=f"2026-11-{day:02d}",
        input_version="v1",
    )
