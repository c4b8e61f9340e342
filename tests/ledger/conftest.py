"""Fixtures for the ledger tests: real SQLite files and real PostgreSQL databases, no mocks.

``engine_url`` runs a test once per engine; the PostgreSQL case uses the shared
``postgres_url`` fixture (a fresh database per test) and is marked ``postgres``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.ledger.ledger_helpers import FakeClock, make_uow

from twice.core.unit import UnitOfWork
from twice.ledger import Ledger


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(engine_url: str, clock: FakeClock) -> Iterator[Ledger]:
    with Ledger.open(engine_url, clock=clock) as opened:
        yield opened


@pytest.fixture
def uow(ledger: Ledger) -> UnitOfWork:
    unit = make_uow()
    ledger.record_unit(unit)
    return unit
