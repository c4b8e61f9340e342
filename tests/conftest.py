"""Shared fixtures: real databases, never mocks.

PostgreSQL comes from ``TWICE_TEST_POSTGRES_URL`` (``.ci/run`` starts the server and sets it);
each test that asks for ``postgres_url`` gets a database of its own, dropped afterwards, so tests
and parallel developers never see each other's rows. Under CI a missing server is a failure,
not a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

DEFAULT_ADMIN_URL = "postgresql://twice:twice@127.0.0.1:5432/postgres"


def _admin_url() -> str:
    return os.environ.get("TWICE_TEST_POSTGRES_URL", DEFAULT_ADMIN_URL)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """URL (``postgresql://...``) of a fresh, empty PostgreSQL database."""
    with _databases() as create:
        yield create()


@pytest.fixture
def postgres_databases() -> Iterator[Callable[[], str]]:
    """``create()`` gives the URL of another fresh, empty PostgreSQL database (one per trial of
    a test that runs several); all are dropped at the end."""
    with _databases() as create:
        yield create


@contextmanager
def _databases() -> Iterator[Callable[[], str]]:
    import psycopg

    admin = _admin_url()
    try:
        psycopg.connect(admin, autocommit=True, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL not reachable at {admin}: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {admin}")
    base, _, _ = admin.rpartition("/")
    made: list[str] = []

    def create() -> str:
        name = f"twice_t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return f"{base}/{name}"

    try:
        yield create
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            for name in made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(autouse=True)
def _lifecycle_transitions_are_declared() -> Iterator[None]:
    """Every transition the engine makes in any test is declared in
    ``twice.engine.lifecycle.TRANSITIONS``: an undeclared one raises where it is made, and is
    also recorded, so a path that swallows the error still fails the test that took it."""
    from twice.engine import lifecycle

    lifecycle.refused.clear()
    yield
    taken, lifecycle.refused[:] = list(lifecycle.refused), []
    assert not taken, "undeclared lifecycle transitions: " + "; ".join(taken)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist a worker process starts with ``COLUMNS=80`` and ``LINES=24`` set
    (the controller does not have them): the CLI would then wrap its piped output at 80
    columns (``twice.cli.console``), unlike a plain ``pytest`` run. A test that wants a width
    sets ``COLUMNS`` itself."""
    if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("TWICE_KEEP_COLUMNS"):
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
