"""Fixtures for the executor tests: real SQLite ledger files in tmp_path, a manual clock."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.executor.helpers import ManualClock

from twice.ledger import Ledger


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def ledger(ledger_url: str, clock: ManualClock) -> Iterator[Ledger]:
    """A ledger on the manual clock."""
    with Ledger.open(ledger_url, clock=clock) as opened:
        yield opened


@pytest.fixture
def real_ledger(ledger_url: str) -> Iterator[Ledger]:
    """A ledger on the system clock, for tests that measure real time (timeouts, pools)."""
    with Ledger.open(ledger_url) as opened:
        yield opened


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # load_pipeline puts a pipeline file's folder on sys.path; undo it per test.
    monkeypatch.setattr(sys, "path", list(sys.path))
