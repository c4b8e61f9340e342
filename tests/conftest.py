"""Shared fixtures: real databases, never mocks.

PostgreSQL comes from ``TWICE_TEST_POSTGRES_URL`` (``.ci/run`` starts the server and sets it);
each test that asks for ``postgres_url`` gets a database of its own, dropped afterwards, so tests
and parallel developers never see each other's rows. Under CI a missing server is a failure,
not a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

DEFAULT_ADMIN_URL = "postgresql://twice:twice@127.0.0.1:5432/postgres"


def _admin_url() -> str:
    return os.environ.get("TWICE_TEST_POSTGRES_URL", DEFAULT_ADMIN_URL)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """URL (``postgresql://...``) of a fresh, empty PostgreSQL database."""
    import psycopg

    admin = _admin_url()
    name = f"twice_t_{uuid.uuid4().hex[:12]}"
    try:
        conn = psycopg.connect(admin, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL not reachable at {admin}: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {admin}")
    with conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
