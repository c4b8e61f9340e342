"""Writers and fingerprints against the engines' own bulk paths, as side-by-side ratios.

    python bench/bench_writers.py [--rows N] [--postgres URL]

For each engine (SQLite, DuckDB, PostgreSQL when reachable) it times, on the same N-row Arrow
table of one day:

* raw bulk insert with the engine's native API (SQLite ``executemany`` of tuples prepared
  before the clock starts, DuckDB Arrow scan, PostgreSQL ``COPY`` of Arrow-written CSV), no
  validation, no delete, no index: the floor;
* ``replace_partition`` into an empty table, and a rerun that deletes and re-inserts N rows;
* pandas ``DataFrame.to_sql`` (SQLite via sqlite3, PostgreSQL via SQLAlchemy + psycopg; DuckDB
  has no SQLAlchemy dialect installed here, so n/a);
* ``fingerprint`` of the partition (in-database) against ``count(*)`` and against pulling the
  key columns into Python and hashing there.

Nothing is asserted: the output is a table to read. Timings are wall-clock, single run.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from twice.destinations import open_destination
from twice.fingerprint import fingerprint

DAY = date(2026, 11, 30)
KEYS = ("id", "day")


def make_table(rows: int) -> pa.Table:
    ids = pa.array(range(rows), pa.int64())
    start = datetime(2026, 11, 30, tzinfo=UTC)
    return pa.table({
        "id": ids,
        "day": pa.array([DAY] * rows, pa.date32()),
        "fund": pc.binary_join_element_wise("fund-", pc.cast(pc.bit_wise_and(ids, 255),
                                                            pa.string()), ""),
        "amount": pa.array([Decimal(i % 100000) / 100 for i in range(rows)],
                           pa.decimal128(12, 2)),
        "booked_at": pa.array([start + timedelta(seconds=i % 86400) for i in range(rows)],
                       pa.timestamp("us", tz="UTC")),
    })


def timed(action: Callable[[], Any]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def python_pull_and_hash(fetch: Callable[[], list[tuple[Any, ...]]]) -> None:
    """The alternative to an in-database fingerprint: ship the rows out and hash them here."""
    total = 0
    for row in fetch():
        total += int(hashlib.md5("\x1f".join(map(str, row)).encode()).hexdigest()[:15], 16)


def bench_sqlite(table: pa.Table, workdir: Path) -> dict[str, float | None]:
    path = workdir / "bench.db"
    results: dict[str, float | None] = {}
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE raw (id BIGINT, day TEXT, fund TEXT, amount TEXT, booked_at TEXT)")

    # The floor: rows already as storable Python tuples (prepared untimed), one executemany.
    text = [table.column("id"), *(pc.cast(table.column(n), pa.string())
                                  for n in ("day", "fund", "amount", "booked_at"))]
    rows = list(zip(*(c.to_pylist() for c in text), strict=True))

    def raw() -> None:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO raw VALUES (?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")

    results["raw bulk insert"] = timed(raw)
    frame = table.to_pandas()
    frame["amount"] = frame["amount"].astype(str)  # sqlite3 cannot bind Decimal
    pandas_conn = sqlite3.connect(path)  # pandas manages its own transaction
    results["pandas to_sql"] = timed(
        lambda: frame.to_sql("pandas_out", pandas_conn, index=False, chunksize=50_000)
    )
    pandas_conn.close()
    dest = open_destination(f"sqlite://{path}?partition_column=day#positions")
    results["replace (first run)"] = timed(lambda: dest.replace_partition(table, DAY))
    results["replace (rerun)"] = timed(lambda: dest.replace_partition(table, DAY))
    results["count(*)"] = timed(lambda: dest.row_count(DAY))
    results["fingerprint"] = timed(lambda: fingerprint(dest, DAY, KEYS))
    results["pull + hash in Python"] = timed(lambda: python_pull_and_hash(
        lambda: conn.execute("SELECT id, day FROM positions WHERE day = ?",
                             [DAY.isoformat()]).fetchall()))
    dest.close()
    conn.close()
    return results


def bench_duckdb(table: pa.Table, workdir: Path) -> dict[str, float | None]:
    path = workdir / "bench.duckdb"
    results: dict[str, float | None] = {}
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE raw (id BIGINT, day DATE, fund VARCHAR, amount DECIMAL(12,2), "
                 "booked_at TIMESTAMPTZ)")
    conn.register("incoming", table)
    results["raw bulk insert"] = timed(
        lambda: conn.execute("INSERT INTO raw SELECT * FROM incoming")
    )
    conn.unregister("incoming")
    results["pandas to_sql"] = None
    dest = open_destination(f"duckdb://{path}?partition_column=day#positions")
    results["replace (first run)"] = timed(lambda: dest.replace_partition(table, DAY))
    results["replace (rerun)"] = timed(lambda: dest.replace_partition(table, DAY))
    results["count(*)"] = timed(lambda: dest.row_count(DAY))
    results["fingerprint"] = timed(lambda: fingerprint(dest, DAY, KEYS))
    results["pull + hash in Python"] = timed(lambda: python_pull_and_hash(
        lambda: conn.execute("SELECT id, day FROM positions WHERE day = ?", [DAY]).fetchall()))
    dest.close()
    conn.close()
    return results


def bench_postgres(table: pa.Table, url: str) -> dict[str, float | None]:
    import psycopg
    import sqlalchemy

    admin = psycopg.connect(url, autocommit=True, connect_timeout=3)
    name = f"twice_bench_{os.getpid()}"
    admin.execute(f'CREATE DATABASE "{name}"')
    base = url.rsplit("/", 1)[0]
    db_url = f"{base}/{name}"
    results: dict[str, float | None] = {}
    try:
        conn = psycopg.connect(db_url, autocommit=True)
        conn.execute("CREATE TABLE raw (id bigint, day date, fund text, amount numeric(12,2), "
                     "booked_at timestamptz)")

        def raw() -> None:
            with conn.cursor() as cur, cur.copy("COPY raw FROM STDIN (FORMAT csv)") as copy:
                for batch in table.to_batches(max_chunksize=65_536):
                    buffer = io.BytesIO()
                    pacsv.write_csv(batch, buffer, pacsv.WriteOptions(include_header=False))
                    copy.write(buffer.getvalue())

        results["raw bulk insert"] = timed(raw)
        engine = sqlalchemy.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
        frame = table.to_pandas()
        results["pandas to_sql"] = timed(
            lambda: frame.to_sql("pandas_out", engine, index=False, chunksize=50_000)
        )
        engine.dispose()
        dest = open_destination(f"{db_url}?partition_column=day#public.positions")
        results["replace (first run)"] = timed(lambda: dest.replace_partition(table, DAY))
        results["replace (rerun)"] = timed(lambda: dest.replace_partition(table, DAY))
        results["count(*)"] = timed(lambda: dest.row_count(DAY))
        results["fingerprint"] = timed(lambda: fingerprint(dest, DAY, KEYS))
        results["pull + hash in Python"] = timed(lambda: python_pull_and_hash(
            lambda: conn.execute("SELECT id, day FROM positions WHERE day = %s",
                                 [DAY]).fetchall()))
        dest.close()
        conn.close()
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
    return results


RATIOS = [
    ("replace (first run) / raw bulk insert", "replace (first run)", "raw bulk insert"),
    ("replace (rerun) / raw bulk insert", "replace (rerun)", "raw bulk insert"),
    ("pandas to_sql / replace (first run)", "pandas to_sql", "replace (first run)"),
    ("fingerprint / count(*)", "fingerprint", "count(*)"),
    ("pull + hash in Python / fingerprint", "pull + hash in Python", "fingerprint"),
]


def report(rows: int, columns: dict[str, dict[str, float | None] | str]) -> None:
    names = list(columns)
    width = 40
    print(f"\n{rows:,} rows, one partition; seconds (wall clock, one run)\n")
    print("".ljust(width) + "".join(n.rjust(14) for n in names))
    measures = list(next((c for c in columns.values() if isinstance(c, dict)), {}))
    for measure in measures:
        cells = [_cell(columns[n], measure) for n in names]
        print(measure.ljust(width) + "".join(cells))
    print("\nratios (x)\n")
    for label, top, bottom in RATIOS:
        cells = []
        for n in names:
            column = columns[n]
            if isinstance(column, str):
                cells.append("skipped".rjust(14))
                continue
            a, b = column.get(top), column.get(bottom)
            cells.append(("n/a" if a is None or not b else f"{a / b:.2f}").rjust(14))
        print(label.ljust(width) + "".join(cells))
    for n in names:
        if isinstance(columns[n], str):
            print(f"\n{n}: {columns[n]}")


def _cell(column: dict[str, float | None] | str, measure: str) -> str:
    if isinstance(column, str):
        return "skipped".rjust(14)
    value = column.get(measure)
    return ("n/a" if value is None else f"{value:.3f}").rjust(14)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--postgres", default=os.environ.get("TWICE_BENCH_POSTGRES_URL"),
                        help="admin URL of a PostgreSQL server (a scratch database is created)")
    args = parser.parse_args()
    table = make_table(args.rows)
    workdir = Path(tempfile.mkdtemp(prefix="twice-bench-"))
    columns: dict[str, dict[str, float | None] | str] = {}
    try:
        columns["sqlite"] = bench_sqlite(table, workdir)
        columns["duckdb"] = bench_duckdb(table, workdir)
        if not args.postgres:
            columns["postgresql"] = "no --postgres URL and TWICE_BENCH_POSTGRES_URL unset"
        else:
            try:
                columns["postgresql"] = bench_postgres(table, args.postgres)
            except Exception as exc:  # unreachable server: report, keep the other columns
                columns["postgresql"] = f"unreachable: {str(exc).strip().splitlines()[0]}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(args.rows, columns)


if __name__ == "__main__":
    main()
