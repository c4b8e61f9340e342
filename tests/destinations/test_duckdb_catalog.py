"""DuckDB destinations find tables and views through DuckDB's catalog functions (issue 38:
``information_schema.tables`` cost several times as much, and a write looks two or three
times). What they find must be what ``information_schema.tables`` lists: tables and user views
in the destination's schema, never DuckDB's internal views, and a view over a dropped table
reads as holding nothing."""

from __future__ import annotations

from pathlib import Path

import duckdb

from twice.destinations import open_destination


def listed(path: Path, schema: str) -> set[str]:
    with duckdb.connect(str(path)) as conn:
        return {name for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?",
            [schema]).fetchall()}


def test_tables_and_views_are_found_as_information_schema_lists_them(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE SCHEMA sales")
        conn.execute("CREATE TABLE sales.orders (day DATE, v BIGINT)")
        conn.execute("CREATE VIEW sales.recent AS SELECT * FROM sales.orders")
        conn.execute("CREATE TABLE main.other (day DATE)")
    names = ["orders", "recent", "other", "duckdb_tables", "duckdb_columns", "absent"]
    for schema in ("sales", "main"):
        expected = listed(path, schema)
        for name in names:
            with open_destination(f"duckdb://{path}#{schema}.{name}") as dest:
                found = dest._table_exists(name)
            assert found == (name in expected), (schema, name)
    with open_destination(f"duckdb://{path}#sales.recent") as dest:
        schema_read = dest.schema()
    assert schema_read is not None and list(schema_read) == ["day", "v"]


def test_a_view_over_a_dropped_table_holds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE base (day DATE, v BIGINT)")
        conn.execute("CREATE VIEW shown AS SELECT * FROM base")
        conn.execute("DROP TABLE base")
    with open_destination(f"duckdb://{path}#shown") as dest:
        assert dest._table_exists("shown")
        assert dest.schema() is None
