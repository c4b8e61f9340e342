"""Fixtures of the OpenLineage tests: the client's FILE transport configured through the
environment (the standard way), and a SQLite ledger on a manual clock."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from twice.ledger import Ledger
from twice.testing import ManualClock


@pytest.fixture
def lineage_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The FILE transport, configured through the environment as the client documents."""
    path = tmp_path / "lineage" / "events.ndjson"
    path.parent.mkdir()
    for name in [n for n in os.environ if n.startswith("OPENLINEAGE")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no stray openlineage.yml
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(path))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
    monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "etl-tests")
    return path


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    clock = ManualClock(datetime(2026, 12, 1, 5, tzinfo=UTC))  # the morning after the day
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock) as opened:
        yield opened
