"""Fixtures for backfill tests on the manual clock: a real SQLite ledger sharing its time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.executor.helpers import ManualClock

from twice.ledger import Ledger


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def ledger(tmp_path: Path, clock: ManualClock) -> Iterator[Ledger]:
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock) as opened:
        yield opened
