"""Fixtures for the lifecycle tests: a work folder, an engine, a real SQLite ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lifecycle.story import DAYS, ENGINES, default_rows, write_source
from twice.ledger import Ledger


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def pg(engine: str, request: pytest.FixtureRequest) -> str | None:
    """A fresh PostgreSQL database URL when the engine is PostgreSQL, else None."""
    if engine != "postgresql":
        return None
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for day in DAYS:
        write_source(tmp_path, day, default_rows(day))
    return tmp_path


@pytest.fixture
def ledger(root: Path) -> Iterator[Ledger]:
    with Ledger.open(f"sqlite:///{root / 'ledger.db'}") as opened:
        yield opened
