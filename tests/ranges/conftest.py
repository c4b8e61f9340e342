"""Fixtures for range tests: a small pipeline file (no destination) and a SQLite ledger URL."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

DAILY = """\
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule

pipeline = Pipeline("ranges", schedule=Schedule.{schedule}("UTC"))
SEEN = []

@pipeline.task(safe_repeat=True, timeout=5)
def extract(ctx):
    SEEN.append(("extract", ctx.interval.label))
    return 1

@pipeline.task(depends_on=[extract], safe_repeat=True, timeout=5)
def load(ctx):
    SEEN.append(("load", ctx.interval.label))
    return 2
"""


def today() -> date:
    return datetime.now(UTC).date()


def tomorrow() -> date:
    return today() + timedelta(days=1)


@pytest.fixture
def daily_file(tmp_path: Path) -> Path:
    path = tmp_path / "daily.py"
    path.write_text(DAILY.format(schedule="daily"))
    return path


@pytest.fixture
def hourly_file(tmp_path: Path) -> Path:
    path = tmp_path / "hourly.py"
    path.write_text(DAILY.format(schedule="hourly"))
    return path


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"
