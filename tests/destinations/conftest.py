"""Fixtures for destination tests: one real engine per parameter, never mocks.

``engines`` builds spec strings for SQLite, DuckDB, PostgreSQL (the ``postgres_url`` fixture of
tests/conftest.py, a fresh database per test), Parquet, Iceberg (an embedded catalog) and Delta
Lake under the test's tmp_path.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

ENGINES = ("sqlite", "duckdb", "postgresql", "parquet", "iceberg", "delta")
SQL_ENGINES = ("sqlite", "duckdb", "postgresql")


@dataclass
class Engines:
    tmp: Path
    request: pytest.FixtureRequest

    @property
    def pg_url(self) -> str:
        """A fresh PostgreSQL database, provisioned on first use only."""
        return str(self.request.getfixturevalue("postgres_url"))

    def spec(
        self, engine: str, name: str | None = None, *, partition_column: str | None = "day",
        key_columns: tuple[str, ...] = (),
    ) -> str:
        name = name or f"t_{uuid.uuid4().hex[:10]}"
        options = []
        if partition_column:
            options.append(f"partition_column={partition_column}")
        if key_columns:
            options.append("key_columns=" + ",".join(key_columns))
        query = ("?" + "&".join(options)) if options else ""
        if engine == "sqlite":
            return f"sqlite://{self.tmp}/w.db{query}#{name}"
        if engine == "duckdb":
            return f"duckdb://{self.tmp}/w.duckdb{query}#{name}"
        if engine == "postgresql":
            return f"{self.pg_url}{query}#public.{name}"
        if engine == "parquet":
            return f"parquet://{self.tmp}/{name}{query}"
        if engine == "iceberg":  # the embedded SQLite catalog inside the warehouse
            return f"iceberg://{self.tmp}/iceberg{query}#default.{name}"
        if engine == "delta":  # a Delta Lake table directory (delta-rs)
            return f"delta://{self.tmp}/{name}{query}"
        raise AssertionError(engine)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=SQL_ENGINES)
def sql_engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Engines:
    return Engines(tmp_path, request)
