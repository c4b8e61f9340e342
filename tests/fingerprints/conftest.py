"""Fixtures for the fingerprint tests: real engines (SQLite, DuckDB, PostgreSQL, Parquet), never
mocks, plus "by hand" edits that change a destination behind twice's back."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ENGINES = ("sqlite", "duckdb", "postgresql", "parquet")


@dataclass
class Target:
    """One destination table on one engine, and a way to edit it without twice."""

    engine: str
    spec: str
    tmp: Path
    table: str
    pg_url: str | None = None

    def sql(self, statement: str) -> None:
        """Run ``statement`` on the engine directly ({t} is the table), committing."""
        text = statement.format(t=self.table)
        if self.engine == "sqlite":
            import sqlite3

            conn = sqlite3.connect(self.tmp / "w.db")
            with conn:
                conn.execute(text)
            conn.close()
        elif self.engine == "duckdb":
            import duckdb

            conn = duckdb.connect(str(self.tmp / "w.duckdb"))
            conn.execute(text)
            conn.close()
        elif self.engine == "postgresql":
            import psycopg

            assert self.pg_url is not None
            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                conn.execute(text)
        else:
            raise AssertionError(f"{self.engine}: edit the files with rewrite()")

    def rewrite(self, day: str, change: Callable[[pa.Table], pa.Table]) -> None:
        """Parquet: replace the files of partition ``day`` by ``change`` of their rows."""
        directory = self.tmp / self.table / f"day={day}"
        files = sorted(directory.glob("*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files])
        for f in files:
            f.unlink()
        pq.write_table(change(table), directory / "part-by-hand.parquet")

    def edit(self, day: str, *, sql: str, change: Callable[[pa.Table], pa.Table]) -> None:
        """The same edit on any engine: ``sql`` on SQL engines, ``change`` on Parquet."""
        if self.engine == "parquet":
            self.rewrite(day, change)
        else:
            self.sql(sql)

    def day_literal(self, day: str) -> str:
        """``day`` as a literal comparable with the engine's day column."""
        return f"'{day}'" if self.engine == "sqlite" else f"DATE '{day}'"


@dataclass
class Engines:
    tmp: Path
    request: pytest.FixtureRequest

    def target(self, engine: str, *, key_columns: tuple[str, ...] = (),
               partition_column: str | None = "day") -> Target:
        table = f"t_{uuid.uuid4().hex[:10]}"
        options = [f"partition_column={partition_column}"] if partition_column else []
        if key_columns:
            options.append("key_columns=" + ",".join(key_columns))
        query = ("?" + "&".join(options)) if options else ""
        pg_url = None
        if engine == "sqlite":
            spec = f"sqlite://{self.tmp}/w.db{query}#{table}"
        elif engine == "duckdb":
            spec = f"duckdb://{self.tmp}/w.duckdb{query}#{table}"
        elif engine == "postgresql":
            pg_url = str(self.request.getfixturevalue("postgres_url"))
            spec = f"{pg_url}{query}#public.{table}"
        elif engine == "parquet":
            spec = f"parquet://{self.tmp}/{table}{query}"
        else:
            raise AssertionError(engine)
        return Target(engine, spec, self.tmp, table, pg_url)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Engines:
    return Engines(tmp_path, request)
