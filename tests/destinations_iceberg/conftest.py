"""Fixtures for the Iceberg destination tests (``iceberg://``, pyiceberg with a SQL catalog).

The engine-generic tests in tests/destinations run on Iceberg too (``iceberg`` is one of their
``ENGINES``); the tests here cover what is Iceberg's own: the spec, time travel, snapshots as
the commit log, cross-engine fingerprints, racing processes and SIGKILL at commit points.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.reliability.table_format_trials import spec_query

# dest_helpers and the shared property check live beside the engine-generic tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "destinations"))

@pytest.fixture
def iceberg_spec(tmp_path: Path) -> Callable[..., str]:
    """``iceberg_spec(name=None, partition_column="day", key_columns=())``: a spec in one
    warehouse (embedded SQLite catalog) under the test's tmp_path."""

    def make(name: str | None = None, *, partition_column: str | None = "day",
             key_columns: tuple[str, ...] = ()) -> str:
        query = spec_query(partition_column, key_columns)
        return f"iceberg://{tmp_path}/wh{query}#ns.{name or 't_' + uuid.uuid4().hex[:10]}"

    return make
