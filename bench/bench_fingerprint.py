"""Fingerprint cost against a full scan of the same columns, per engine (issue 23's goal).

    python bench/bench_fingerprint.py [--rows N] [--large] [--repeat R] [--postgres URL]

For SQLite, DuckDB and PostgreSQL (when reachable), and the Delta and Iceberg table formats
(issue 21: within the same goal), it builds one N-row partition of four
columns (id bigint, day date, fund text, amount decimal(12,2)): one sample row written by twice
(so the table has twice's types), the rest generated inside the engine. On that partition it
times, best of R:

* ``full scan``: the engine's own bulk read of the four columns of the partition, untouched by
  twice: DuckDB ``SELECT ... -> Arrow table``, PostgreSQL ``COPY (SELECT ...) TO STDOUT (FORMAT
  binary)`` drained by psycopg, SQLite ``cursor.execute(SELECT ...).fetchall()``. The baseline.
* ``in-engine scan``: ``SELECT count(col) ...`` of each column inside the engine (no transfer);
  shown for reference (DuckDB answers it from metadata).
* ``fingerprint v3``: ``twice.destinations.fingerprint.fingerprint`` over the four columns (the
  current algorithm, ``twice-fp-v3``: Arrow read + vectorised hash).
* ``fingerprint v2``: the same with ``algorithm="twice-fp-v2"`` (md5 of the row text in the
  engine; still computed to verify older records).

The goal (issue 23): ``fingerprint v3 / full scan`` at most 3x on each engine, at 1M and 10M
rows. ``--large`` runs 10,000,000 rows as well (the full run). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from bench_writers import postgres_column  # run as a script: bench/ is on sys.path

from twice.destinations import open_destination
from twice.destinations.fingerprint import ALGORITHM_V2, fingerprint

DAY = date(2026, 11, 30)
COLUMNS = ["id", "day", "fund", "amount"]
GOAL = 3.0


def best(action: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return min(times)


def sample_partition(spec: str, fill: Callable[[], None]) -> Any:
    dest = open_destination(spec)
    dest.replace_partition(pa.table({
        "id": pa.array([0], pa.int64()), "day": pa.array([DAY], pa.date32()),
        "fund": pa.array(["fund-0"], pa.string()),
        "amount": pa.array([Decimal("0.00")], pa.decimal128(12, 2)),
    }), DAY)
    dest.close()
    fill()
    return open_destination(spec)


def measure(dest: Any, full_scan: Callable[[], Any], engine_scan: Callable[[], Any],
            repeat: int) -> dict[str, float]:
    results = {"rows": float(dest.row_count(DAY))}
    fingerprint(dest, DAY, COLUMNS)  # warm: imports, first numpy calls
    results["full scan"] = best(full_scan, repeat)
    results["in-engine scan"] = best(engine_scan, repeat)
    results["fingerprint v3"] = best(lambda: fingerprint(dest, DAY, COLUMNS), repeat)
    results["fingerprint v2"] = best(
        lambda: fingerprint(dest, DAY, COLUMNS, ALGORITHM_V2), max(1, repeat // 2))
    v3, v2 = fingerprint(dest, DAY, COLUMNS), fingerprint(dest, DAY, COLUMNS, ALGORITHM_V2)
    print(f"  {dest.engine}: {v3}\n  {dest.engine}: {v2}", flush=True)
    dest.close()
    return results


SELECT = "SELECT id, day, fund, amount FROM {t} WHERE day = {d}"
COUNTS = "SELECT count(id), count(day), count(fund), count(amount) FROM {t} WHERE day = {d}"


def bench_sqlite(rows: int, workdir: Path, repeat: int) -> dict[str, float]:
    path = workdir / f"fp{rows}.db"

    def fill() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN")
        conn.execute(
            "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?) "
            "INSERT INTO fp SELECT x, d.day, 'fund-' || (x % 256), "
            "printf('%.2f', (x % 100000) / 100.0) FROM g, (SELECT day FROM fp LIMIT 1) AS d",
            [rows - 1])
        conn.execute("COMMIT")
        conn.close()

    dest = sample_partition(f"sqlite://{path}?partition_column=day#fp", fill)
    conn = sqlite3.connect(path)
    where = {"t": "fp", "d": f"'{DAY.isoformat()}'"}
    try:
        return measure(dest, lambda: conn.execute(SELECT.format(**where)).fetchall(),
                       lambda: conn.execute(COUNTS.format(**where)).fetchall(), repeat)
    finally:
        conn.close()


def bench_duckdb(rows: int, workdir: Path, repeat: int) -> dict[str, float]:
    path = workdir / f"fp{rows}.duckdb"

    def fill() -> None:
        conn = duckdb.connect(str(path))
        conn.execute("INSERT INTO fp SELECT range, d.day, 'fund-' || (range % 256), "
                     "CAST((range % 100000) / 100 AS DECIMAL(12,2)) "
                     "FROM range(1, ?), (SELECT day FROM fp LIMIT 1) AS d", [rows])
        conn.close()

    dest = sample_partition(f"duckdb://{path}?partition_column=day#fp", fill)
    conn = dest.connection  # DuckDB lets one connection per process own the file
    where = {"t": "fp", "d": f"DATE '{DAY.isoformat()}'"}
    return measure(dest, lambda: conn.sql(SELECT.format(**where)).to_arrow_table(),
                   lambda: conn.execute(COUNTS.format(**where)).fetchall(), repeat)


def bench_postgres(rows: int, url: str, repeat: int) -> dict[str, float]:
    import psycopg

    admin = psycopg.connect(url, autocommit=True, connect_timeout=3)
    name = f"twice_bench_fpv3_{os.getpid()}"
    admin.execute(f'CREATE DATABASE "{name}"')
    db_url = f"{url.rsplit('/', 1)[0]}/{name}"

    def fill() -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO public.fp SELECT g, d.day, 'fund-' || (g %% 256), "
                "((g %% 100000) / 100.0)::numeric(12,2) "
                "FROM generate_series(1, %s) AS g, (SELECT day FROM public.fp LIMIT 1) AS d",
                [rows - 1])
            conn.execute("VACUUM ANALYZE public.fp")

    try:
        dest = sample_partition(f"{db_url}?partition_column=day#public.fp", fill)
        conn = psycopg.connect(db_url, autocommit=True)
        where = {"t": "public.fp", "d": f"DATE '{DAY.isoformat()}'"}

        def copy_out() -> None:
            with conn.cursor() as cur, cur.copy(
                    f"COPY ({SELECT.format(**where)}) TO STDOUT (FORMAT binary)") as copy:
                for _ in copy:
                    pass

        try:
            return measure(dest, copy_out,
                           lambda: conn.execute(COUNTS.format(**where)).fetchall(), repeat)
        finally:
            conn.close()
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def generated(rows: int) -> pa.Table:
    """``rows`` rows of the four columns for DAY, built in Arrow (for the table formats, which
    twice writes itself: no SQL engine behind them to generate rows in)."""
    import numpy as np
    import pyarrow.compute as pc

    ids = pa.array(np.arange(rows, dtype=np.int64))
    days = pa.array(np.full(rows, (DAY - date(1970, 1, 1)).days, dtype=np.int32)).cast(
        pa.date32())
    funds = pc.binary_join_element_wise(
        "fund-", pc.cast(pc.bit_wise_and(ids, 255), pa.string()), "")
    cents = pc.cast(pc.cast(pc.divide(pc.cast(pc.remainder(ids, 100_000), pa.float64()), 100.0),
                            pa.float64()), pa.decimal128(12, 2), safe=False)
    return pa.table({"id": ids, "day": days, "fund": funds, "amount": cents})


def bench_table_format(scheme: str, rows: int, workdir: Path, repeat: int) -> dict[str, float]:
    """Delta or Iceberg: the baseline is the engine's own Arrow read of the four columns of
    the partition (delta-rs/pyarrow over the table's files; pyiceberg's scan), the same read
    twice's fingerprint makes before hashing."""
    spec = (f"delta://{workdir}/fp{rows}?partition_column=day" if scheme == "delta"
            else f"iceberg://{workdir}/wh{rows}?partition_column=day#bench.fp")
    dest = open_destination(spec)
    dest.replace_partition(generated(rows), DAY)
    scan = lambda: dest.read_partition(DAY, COLUMNS)  # noqa: E731
    return measure(dest, scan, lambda: scan().num_rows, repeat)


def report(rows: int, columns: dict[str, dict[str, float] | str]) -> None:
    width = 44
    print(f"\nfingerprint vs full scan: {rows:,} rows x 4 columns, one partition; seconds, "
          "best of the repeats\n")
    print("".ljust(width) + "".join(n.rjust(13) for n in columns))
    for measure_name in ("full scan", "in-engine scan", "fingerprint v3", "fingerprint v2"):
        cells = []
        for column in columns.values():
            cells.append(("skipped" if isinstance(column, str)
                          else f"{column[measure_name]:.3f}").rjust(13))
        print(measure_name.ljust(width) + "".join(cells))
    print("\nratios (x); goal: fingerprint v3 / full scan <= 3.0\n")
    for label, top, bottom in (("fingerprint v3 / full scan (goal <= 3)", "fingerprint v3",
                                "full scan"),
                               ("fingerprint v2 / full scan (before)", "fingerprint v2",
                                "full scan"),
                               ("fingerprint v2 / fingerprint v3", "fingerprint v2",
                                "fingerprint v3")):
        cells = []
        for column in columns.values():
            cells.append(("skipped" if isinstance(column, str)
                          else f"{column[top] / column[bottom]:.2f}").rjust(13))
        print(label.ljust(width) + "".join(cells))
    verdicts = []
    for name, column in columns.items():
        if isinstance(column, dict):
            ratio = column["fingerprint v3"] / column["full scan"]
            verdicts.append(f"{name} {'met' if ratio <= GOAL else 'NOT met'} ({ratio:.2f}x)")
        else:
            print(f"\n{name}: {column}")
    print(f"\ngoal at {rows:,} rows: " + "; ".join(verdicts))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--large", action="store_true",
                        help="also 10,000,000 rows (the full run)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get(
        "TWICE_BENCH_POSTGRES_URL", os.environ.get("TWICE_TEST_POSTGRES_URL")),
                        help="admin URL of a PostgreSQL server (a scratch database is created)")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.repeat < 1:
        parser.error("--rows and --repeat must be >= 1")
    sizes = [args.rows, *([10_000_000] if args.large else [])]
    workdir = Path(tempfile.mkdtemp(prefix="twice-bench-fp-"))
    try:
        for rows in sizes:
            repeat = args.repeat if rows <= 1_000_000 else 1
            print(f"\n{rows:,} rows:", flush=True)
            columns: dict[str, dict[str, float] | str] = {
                "sqlite": bench_sqlite(rows, workdir, repeat),
                "duckdb": bench_duckdb(rows, workdir, repeat),
                "postgresql": postgres_column(lambda r=rows, k=repeat: bench_postgres(
                    r, args.postgres, k), args.postgres),
                "delta": bench_table_format("delta", rows, workdir, repeat),
                "iceberg": bench_table_format("iceberg", rows, workdir, repeat),
            }
            report(rows, columns)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
