"""Writers and fingerprints against the engines' own bulk paths, as side-by-side ratios.

    python bench/bench_writers.py [--rows N] [--fingerprint-rows M] [--repeat R] [--postgres URL]

For each engine (SQLite, DuckDB, PostgreSQL when reachable) it times, on the same N-row Arrow
table of one day:

* raw bulk insert with the engine's native API (SQLite ``executemany`` of tuples prepared
  before the clock starts, DuckDB Arrow scan, PostgreSQL ``COPY`` of Arrow-written CSV), no
  validation, no delete, no index: the floor;
* ``replace_partition`` into an empty table, and a rerun that deletes and re-inserts N rows;
* ``upsert`` by key (id, day) into an empty table, and again over the same N keys (every row
  updated);
* pandas ``DataFrame.to_sql`` (SQLite via sqlite3, PostgreSQL via SQLAlchemy + psycopg; DuckDB
  has no SQLAlchemy dialect installed here, so n/a);
* ``fingerprint`` of the partition (in-database) against ``count(*)`` and against pulling the
  key columns into Python and hashing there;
* at scale: ``fingerprint`` of an M-row partition (default 10,000,000; the rows are generated
  inside the engine, in a table twice created) against ``count(*)`` of the same partition.
  ``--fingerprint-rows 0`` skips it.

Nothing is asserted: the output is a table to read. Timings are wall-clock; with ``--repeat R``
each engine's whole sequence runs R times on fresh tables (a fresh file or database each time)
and every measure keeps its best (lowest) time, so a machine shared with other work shows its
noise less. The goals of issue 23 are marked ``goal`` beside their ratio.
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
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from twice.destinations import open_destination
from twice.destinations.fingerprint import fingerprint

Column = TypeVar("Column")  # one engine's figures, whatever their type

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
    bench_upsert(results, f"sqlite://{path}?partition_column=day&key_columns=id,day#upserted",
                 table)
    results["count(*)"] = timed(lambda: dest.row_count(DAY))
    results["fingerprint"] = timed(lambda: fingerprint(dest, DAY, KEYS))
    results["pull + hash in Python"] = timed(lambda: python_pull_and_hash(
        lambda: conn.execute("SELECT id, day FROM positions WHERE day = ?",
                             [DAY.isoformat()]).fetchall()))
    dest.close()
    conn.close()
    return results


def bench_upsert(results: dict[str, float | None], spec: str, table: pa.Table) -> None:
    """Upsert N rows into an empty keyed table, then the same N keys again (all updates)."""
    dest = open_destination(spec)
    results["upsert (insert)"] = timed(lambda: dest.upsert(table, partition=DAY))
    results["upsert (update all)"] = timed(lambda: dest.upsert(table, partition=DAY))
    dest.close()


def generated_partition(spec: str, rows: int, fill: Callable[[int], None]) -> Any:
    """A twice-created table holding ``rows`` rows of DAY: one sample row written by twice,
    the rest generated inside the engine by ``fill(rows)`` copying the sample's stored day
    value, so the 10M-row case never builds 10M rows in Python. Returns it reopened."""
    dest = open_destination(spec)
    dest.replace_partition(pa.table({
        "id": pa.array([0], pa.int64()),
        "day": pa.array([DAY], pa.date32()),
        "fund": pa.array(["fund-0"], pa.string()),
    }), DAY)
    dest.close()  # DuckDB allows one writer per file: fill through a connection of its own
    fill(rows)
    return open_destination(spec)


def fingerprint_at_scale(dest: Any) -> dict[str, float | None]:
    results: dict[str, float | None] = {"rows": float(dest.row_count(DAY))}
    results["count(*)"] = timed(lambda: dest.row_count(DAY))
    results["fingerprint"] = timed(lambda: fingerprint(dest, DAY, KEYS))
    dest.close()
    return results


def scale_sqlite(rows: int, workdir: Path) -> dict[str, float | None]:
    path = workdir / "scale.db"

    def fill(count: int) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN")
        conn.execute(
            "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?) "
            "INSERT INTO fp SELECT x, d.day, 'fund-' || (x % 256) "
            "FROM g, (SELECT day FROM fp LIMIT 1) AS d", [count - 1])
        conn.execute("COMMIT")
        conn.close()

    return fingerprint_at_scale(
        generated_partition(f"sqlite://{path}?partition_column=day#fp", rows, fill))


def scale_duckdb(rows: int, workdir: Path) -> dict[str, float | None]:
    path = workdir / "scale.duckdb"

    def fill(count: int) -> None:
        conn = duckdb.connect(str(path))
        conn.execute("INSERT INTO fp SELECT range, d.day, 'fund-' || (range % 256) "
                     "FROM range(1, ?), (SELECT day FROM fp LIMIT 1) AS d", [count])
        conn.close()

    return fingerprint_at_scale(
        generated_partition(f"duckdb://{path}?partition_column=day#fp", rows, fill))


def scale_postgres(rows: int, url: str) -> dict[str, float | None]:
    import psycopg

    admin = psycopg.connect(url, autocommit=True, connect_timeout=3)
    name = f"twice_bench_fp_{os.getpid()}"
    admin.execute(f'CREATE DATABASE "{name}"')
    db_url = f"{url.rsplit('/', 1)[0]}/{name}"

    def fill(count: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO public.fp SELECT g, d.day, 'fund-' || (g %% 256) "
                "FROM generate_series(1, %s) AS g, (SELECT day FROM public.fp LIMIT 1) AS d",
                [count - 1])
            conn.execute("ANALYZE public.fp")

    try:
        return fingerprint_at_scale(
            generated_partition(f"{db_url}?partition_column=day#public.fp", rows, fill))
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


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
    bench_upsert(results, f"duckdb://{path}?partition_column=day&key_columns=id,day#upserted",
                 table)
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
        bench_upsert(results,
                     f"{db_url}?partition_column=day&key_columns=id,day#public.upserted", table)
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
    ("upsert (insert) / raw bulk insert", "upsert (insert)", "raw bulk insert"),
    ("upsert (update all) / raw bulk insert", "upsert (update all)", "raw bulk insert"),
    ("pandas to_sql / replace (first run)", "pandas to_sql", "replace (first run)"),
    ("pandas to_sql / upsert (insert)", "pandas to_sql", "upsert (insert)"),
    ("fingerprint / count(*)", "fingerprint", "count(*)"),
    ("pull + hash in Python / fingerprint", "pull + hash in Python", "fingerprint"),
]


# Issue 23's writer goals: (ratio label, engine) -> the ratio must stay at or below this.
GOALS = {
    ("upsert (insert) / raw bulk insert", "duckdb"): 2.0,
    ("upsert (update all) / raw bulk insert", "duckdb"): 2.0,
    ("replace (first run) / raw bulk insert", "sqlite"): 1.5,
    ("replace (first run) / raw bulk insert", "postgresql"): 1.17,
}


def report(rows: int, columns: dict[str, dict[str, float | None] | str],
           repeat: int = 1) -> None:
    names = list(columns)
    width = 40
    runs = "one run" if repeat == 1 else f"best of {repeat} runs"
    print(f"\n{rows:,} rows, one partition; seconds (wall clock, {runs})\n")
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
    goals = [(label, engine, limit) for (label, engine), limit in GOALS.items()
             if isinstance(columns.get(engine), dict)]
    if goals:
        print("\ngoals (issue 23): ratio, goal, met\n")
    for label, engine, limit in goals:
        column = columns[engine]
        assert isinstance(column, dict)
        top, bottom = next((t, b) for lab, t, b in RATIOS if lab == label)
        a, b = column.get(top), column.get(bottom)
        ratio = None if a is None or not b else a / b
        shown = "n/a" if ratio is None else f"{ratio:.2f}"
        met = "n/a" if ratio is None else ("yes" if ratio <= limit else "NO")
        print(f"{engine} {label}".ljust(width + 14) + shown.rjust(8)
              + f"  <= {limit:.2f}".rjust(10) + met.rjust(6))
    for n in names:
        if isinstance(columns[n], str):
            print(f"\n{n}: {columns[n]}")


def _cell(column: dict[str, float | None] | str, measure: str) -> str:
    if isinstance(column, str):
        return "skipped".rjust(14)
    value = column.get(measure)
    return ("n/a" if value is None else f"{value:.3f}").rjust(14)


SCALE_RATIOS = [("fingerprint / count(*)", "fingerprint", "count(*)")]


def report_scale(rows: int, columns: dict[str, dict[str, float | None] | str]) -> None:
    print(f"\nfingerprint at scale: {rows:,} rows, one partition; seconds (one run)\n")
    width = 40
    print("".ljust(width) + "".join(n.rjust(14) for n in columns))
    for measure in ("count(*)", "fingerprint"):
        print(measure.ljust(width) + "".join(_cell(c, measure) for c in columns.values()))
    for label, top, bottom in SCALE_RATIOS:
        cells = []
        for column in columns.values():
            if isinstance(column, str):
                cells.append("skipped".rjust(14))
                continue
            a, b = column.get(top), column.get(bottom)
            cells.append(("n/a" if a is None or not b else f"{a / b:.2f}").rjust(14))
        print(label.ljust(width) + "".join(cells))
    for name, column in columns.items():
        if isinstance(column, dict) and column.get("rows") != rows:
            print(f"{name}: partition holds {column.get('rows'):,.0f} rows, expected {rows:,}")
        elif isinstance(column, str):
            print(f"\n{name}: {column}")


def postgres_column(run: Callable[[], Column], url: str | None) -> Column | str:
    """``run()``'s column of figures, or why PostgreSQL has none (no URL, unreachable, failed):
    the other engines' columns are kept (bench_fingerprint uses it too)."""
    if not url:
        return "no --postgres URL, TWICE_BENCH_POSTGRES_URL and TWICE_TEST_POSTGRES_URL unset"
    try:
        return run()
    except Exception as exc:  # report it, keep the other columns
        import psycopg

        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        why = ("unreachable" if isinstance(exc, psycopg.OperationalError)
               else f"failed ({type(exc).__name__})")
        return f"{why}: {first}"


def _keep_best(columns: dict[str, dict[str, float | None] | str], engine: str,
               run: dict[str, float | None] | str) -> None:
    """Merge one run of an engine into ``columns``, each measure keeping its lowest time."""
    held = columns.get(engine)
    if not isinstance(held, dict) or not isinstance(run, dict):
        if not isinstance(held, dict):  # a measured run replaces a skipped one, never back
            columns[engine] = run
        return
    for measure, value in run.items():
        old = held.get(measure)
        held[measure] = value if old is None or (value is not None and value < old) else old


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--fingerprint-rows", type=int, default=10_000_000,
                        help="rows of the at-scale fingerprint partition (0 skips it)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each engine's sequence R times, keep each measure's best")
    parser.add_argument("--postgres", default=os.environ.get(
        "TWICE_BENCH_POSTGRES_URL", os.environ.get("TWICE_TEST_POSTGRES_URL")),
                        help="admin URL of a PostgreSQL server (a scratch database is created)")
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be >= 1")
    if args.fingerprint_rows < 0:
        parser.error("--fingerprint-rows must be >= 0")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    table = make_table(args.rows)
    workdir = Path(tempfile.mkdtemp(prefix="twice-bench-"))
    columns: dict[str, dict[str, float | None] | str] = {}
    scale: dict[str, dict[str, float | None] | str] = {}
    try:
        for round_ in range(args.repeat):
            rundir = workdir / f"round{round_}"
            rundir.mkdir()
            _keep_best(columns, "sqlite", bench_sqlite(table, rundir))
            _keep_best(columns, "duckdb", bench_duckdb(table, rundir))
            _keep_best(columns, "postgresql", postgres_column(
                lambda: bench_postgres(table, args.postgres), args.postgres))
        report(args.rows, columns, args.repeat)
        if args.fingerprint_rows:
            scale["sqlite"] = scale_sqlite(args.fingerprint_rows, workdir)
            scale["duckdb"] = scale_duckdb(args.fingerprint_rows, workdir)
            scale["postgresql"] = postgres_column(
                lambda: scale_postgres(args.fingerprint_rows, args.postgres), args.postgres)
            report_scale(args.fingerprint_rows, scale)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
