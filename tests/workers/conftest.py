"""Fixtures for the multi-worker tests: a fresh PostgreSQL database per test, ready to use.

The ledger schema and the side tables are created once before any worker starts, as an
operator would migrate before starting a fleet.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.workers.worker_procs import fresh_database


@pytest.fixture
def shared_db() -> Iterator[str]:
    """One database holding the shared ledger, the execution log and the destination."""
    with fresh_database() as url:
        yield url
