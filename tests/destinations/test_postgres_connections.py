"""PostgreSQL destinations: the catalog read of a table's columns, and idle connections reused
by the next unit (issue 38: a connection and an ``information_schema`` read were most of a
small unit's time).

The columns read from ``pg_catalog`` must be what ``information_schema.columns`` says, for
every kind of column a user's table can hold; a connection is reused only when nothing of its
last user can be on it, and a connection the server ended while it was idle is never handed
to a write.
"""

from __future__ import annotations

import os
import threading
from datetime import date

import psycopg
import pyarrow as pa
import pytest
from dest_helpers import day_interval

from twice.destinations import open_destination
from twice.destinations.columns import ColumnType
from twice.destinations.postgres import _TYPES, IDLE

COLUMNS = {
    "day": "date", "a_small": "smallint", "an_int": "integer", "a_big": "bigint",
    "a_bool": "boolean", "a_text": "text", "a_varchar": "varchar(12)", "a_char": "char(3)",
    "a_bytea": "bytea", "a_ts": "timestamp", "a_tstz": "timestamptz", "a_real": "real",
    "a_double": "double precision", "a_money": "numeric(12,2)", "a_wide": "numeric(38,0)",
    "a_bare_numeric": "numeric", "a_too_wide": "numeric(60,4)", "an_array": "integer[]",
    "a_json": "jsonb", "a_uuid": "uuid", "a_domain": "cents", "a_domain_numeric": "amount",
    "an_enum": "mood",
}


def information_schema(url: str, schema: str, table: str) -> dict[str, ColumnType]:
    """The columns as ``information_schema.columns`` gives them (the read twice made before),
    mapped as twice maps them: an independent reading to compare the catalog read with."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT column_name, data_type, numeric_precision, numeric_scale, udt_name "
            "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "ORDER BY ordinal_position", [schema, table]).fetchall()
    mapped: dict[str, ColumnType] = {}
    for name, data_type, precision, scale, _ in rows:
        if data_type == "numeric" and precision is not None and 0 < precision <= 38:
            mapped[name] = ColumnType("decimal", precision, scale)
        elif data_type in _TYPES:
            mapped[name] = ColumnType(_TYPES[data_type])
        else:
            mapped[name] = ColumnType("unsupported")
    return mapped


@pytest.mark.parametrize("relation", ["table", "view"])
def test_catalog_columns_are_what_information_schema_says(postgres_url: str,
                                                           relation: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA sales")
        conn.execute("CREATE DOMAIN cents AS bigint")
        conn.execute("CREATE DOMAIN amount AS numeric(10,3)")
        conn.execute("CREATE TYPE mood AS ENUM ('ok', 'sad')")
        conn.execute("CREATE TABLE sales.wide (" + ", ".join(
            f"{name} {kind}" for name, kind in COLUMNS.items()) + ", dropped int)")
        conn.execute("ALTER TABLE sales.wide DROP COLUMN dropped")
        conn.execute("CREATE VIEW sales.wide_view AS SELECT * FROM sales.wide")
    table = "wide" if relation == "table" else "wide_view"
    with open_destination(f"{postgres_url}?partition_column=day#sales.{table}") as dest:
        read = dest.schema()
    assert read is not None
    expected = information_schema(postgres_url, "sales", table)
    assert list(read) == list(COLUMNS) == list(expected)
    assert {n: (t.kind, t.precision, t.scale) for n, t in read.items()} == \
        {n: (t.kind, t.precision, t.scale) for n, t in expected.items()}
    # the kinds twice understands, spelled out: a domain is its base type
    assert read["a_domain"] == ColumnType("integer")
    assert read["a_domain_numeric"] == ColumnType("decimal", 10, 3)
    assert read["a_money"] == ColumnType("decimal", 12, 2)
    assert read["a_bare_numeric"].engine_type == "numeric without (precision, scale)"
    assert read["an_array"].engine_type == "integer[]"


def test_no_table_no_index_reads_as_missing(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE other (day date)")
        conn.execute("CREATE INDEX not_a_table ON other (day)")
    for name in ("absent", "not_a_table"):
        with open_destination(f"{postgres_url}#public.{name}") as dest:
            assert dest.schema() is None


def rows(day: date, n: int = 3) -> pa.Table:
    return pa.table({"day": pa.array([day] * n, pa.date32()), "v": pa.array(range(n), pa.int64())})


def backend(dest: object) -> int:
    return int(dest.connection.info.backend_pid)  # type: ignore[attr-defined]


def test_the_next_destination_reuses_the_closed_ones_connection(postgres_url: str) -> None:
    spec = f"{postgres_url}?partition_column=day#reused"
    IDLE.clear()
    with open_destination(spec) as dest:
        dest.replace_partition(rows(date(2026, 1, 1)), day_interval(date(2026, 1, 1)),
                               stamp=None)
        first = backend(dest)
    with open_destination(spec) as dest:
        assert backend(dest) == first
        dest.replace_partition(rows(date(2026, 1, 2)), day_interval(date(2026, 1, 2)),
                               stamp=None)
        assert dest.row_count() == 6


def test_a_connection_the_server_ended_while_idle_is_not_reused(postgres_url: str) -> None:
    spec = f"{postgres_url}?partition_column=day#ended"
    IDLE.clear()
    with open_destination(spec) as dest:
        dest.replace_partition(rows(date(2026, 1, 1)), day_interval(date(2026, 1, 1)),
                               stamp=None)
        ended = backend(dest)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [ended]).fetchone() == (True,)
        # wait until the backend is gone, so its goodbye is on the idle socket
        for _ in range(200):
            if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                 [ended]).fetchall():
                break
            threading.Event().wait(0.01)
    with open_destination(spec) as dest:
        dest.replace_partition(rows(date(2026, 1, 2)), day_interval(date(2026, 1, 2)),
                               stamp=None)
        assert backend(dest) != ended
        assert dest.row_count() == 6


def test_a_connection_left_in_a_transaction_is_closed_not_kept(postgres_url: str) -> None:
    spec = f"{postgres_url}?partition_column=day#midway"
    IDLE.clear()
    dest = open_destination(spec)
    tx = dest._transaction()  # a write interrupted inside its transaction
    tx.__enter__()
    held = dest.connection
    dest.close()
    assert held.closed
    assert IDLE.take(dest._conninfo) is None


def test_a_connection_closed_by_another_thread_is_not_kept(postgres_url: str) -> None:
    spec = f"{postgres_url}?partition_column=day#elsewhere"
    IDLE.clear()
    dest = open_destination(spec)
    held = dest.connection  # opened in this thread
    closer = threading.Thread(target=dest.close)
    closer.start()
    closer.join()
    assert held.closed
    assert IDLE.take(dest._conninfo) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_connects_on_its_own(postgres_url: str) -> None:
    spec = f"{postgres_url}?partition_column=day#forked"
    IDLE.clear()
    with open_destination(spec) as dest:
        parent = backend(dest)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the backend it gets, and leave without cleanup
        try:
            with open_destination(spec) as dest:
                os.write(write, str(backend(dest)).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = int(os.read(read, 64) or b"0")
    os.close(read)
    os.waitpid(pid, 0)
    assert child not in (0, parent)
    with open_destination(spec) as dest:  # the parent's kept connection still works
        assert backend(dest) == parent
        assert dest.schema() is None
