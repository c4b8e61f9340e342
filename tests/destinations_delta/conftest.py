"""Fixtures for the Delta Lake destination tests (``delta://``, delta-rs).

The engine-generic tests in tests/destinations run on Delta too (``delta`` is one of their
``ENGINES``); the tests here cover what is Delta's own: the spec, the log as the commit record
store, fencing by app transactions, racing processes, SIGKILL at commit points, time travel and
``twice diff``, the hypothesis rerun property and fingerprints equal to DuckDB's.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.destinations.conftest import Engines
from tests.reliability.table_format_trials import spec_query

# dest_helpers and the shared property check live beside the engine-generic tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "destinations"))


@pytest.fixture
def delta_spec(tmp_path: Path) -> Callable[..., str]:
    """``delta_spec(name=None, partition_column="day", key_columns=())``: a table directory
    under the test's tmp_path."""

    def make(name: str | None = None, *, partition_column: str | None = "day",
             key_columns: tuple[str, ...] = ()) -> str:
        query = spec_query(partition_column, key_columns)
        return f"delta://{tmp_path}/{name or 't_' + uuid.uuid4().hex[:10]}{query}"

    return make


@pytest.fixture
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Engines:
    """Spec strings of every engine under the test's tmp_path (tests/destinations' helper)."""
    return Engines(tmp_path, request)
