"""The whole unit of work: twice's overhead per unit for a 10-row owned write (issue 38).

    python bench/bench_unit.py [--units 200] [--slow-units 20] [--block 50] [--postgres URL]

For each configuration (ledger + destination):

* ``sqlite``: SQLite ledger, SQLite destination (files in a scratch directory);
* ``duckdb``: SQLite ledger, DuckDB destination;
* ``postgresql``: PostgreSQL ledger and destination, in a scratch database created on the
  server at ``--postgres`` (default ``$TWICE_TEST_POSTGRES_URL``) and dropped afterwards;

it runs ``--units`` daily units of a task returning 10 rows (``write="replace"``, the owned
write: commit record, fencing, fingerprint, verification) through ``twice.Executor.run`` with one
worker, and ``--slow-units`` units of the same task sleeping 0.2 s first (I/O-bound); then the
no-op units again through the backfill driver (``run_backfill``), a ``Worker`` and the Airflow
runner (``twice.drivers.airflow.runner.run_try``, one call per unit as each Airflow try makes:
twice's part of a try, without Airflow's own start of the task process). Overhead
per unit is wall time per unit minus the task's own time; the CPU time per unit of the
process is printed beside it, and on PostgreSQL the server's own CPU per no-op unit when the
server runs on this machine (its ``postgres`` processes in ``/proc``; n/a otherwise): on two
CPUs, the client's CPU, the server's and the round trips' waits add up to the unit.

The floor is a bare script in the same run issuing the same durable transactions per unit with
the raw driver and no twice code: the ledger's claim (the unit, its lease, the attempt's start),
the destination's write (delete the slice, insert the rows, insert a commit record, commit),
and the ledger's end (the attempt's end, the observation, the fingerprint, the lease released).
On DuckDB the floor is printed twice: opening the file for each unit, as twice does (DuckDB lets
one process at a time open a file, and the task's own reads need it between units), and with
one connection held for the whole run. The floor is measured twice: with the no-op task,
over ``--units`` units, and with the 0.2 s task (the same sleep, where the task runs: after the
claim, before the write), over ``--slow-units`` units. The second is the 0.2 s task's floor:
on a shared machine, work after 0.2 s of sleep runs slower than the same work back to back
(caches the machine's other work has emptied meanwhile), for the bare script as for twice, so
each task's overhead is set against the floor of the same task. The 0.2 s task and its floor
run in turn, ``--block`` units of each at a time (default 50), so both are measured in the
same minutes: the machine's speed drifts by tens of percent within minutes, and a floor
measured a minute after twice's units set a ratio against another machine. (Smaller blocks
charge each unit more of a run's own start: blocks of 10 added 2-4 ms a unit on PostgreSQL.)

Nothing is asserted: the output is a table to read. Wall clock, one run each.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ledger import scratch_databases

from twice import Pipeline, Schedule, TaskContext
from twice.drivers.airflow.runner import run_try, try_holder
from twice.drivers.backfill import run_backfill
from twice.drivers.worker import Worker
from twice.engine.executor import Executor
from twice.ledger import Ledger

FIRST_DAY = date(2024, 1, 1)
ROWS = 10
SLOW_SECONDS = 0.2
WARM_UNITS = 3
Results = dict[str, float | None]


def ten_rows(day: date) -> pa.Table:
    return pa.table({"day": pa.array([day] * ROWS, pa.date32()),
                     "v": pa.array(range(ROWS), pa.int64())})


def unit_pipeline(destination: str, sleep: float) -> Pipeline:
    pipeline = Pipeline("bench_unit", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=destination, write="replace", safe_repeat=True)
    def load(ctx: TaskContext) -> pa.Table:
        """Ten rows of the day (after ``sleep`` seconds of pretend I/O)."""
        if sleep:
            time.sleep(sleep)
        return ten_rows(ctx.interval.start.date())

    return pipeline


DRIVERS = ("run", "backfill", "worker", "airflow")


def run_twice(ledger_url: str, destination: str, units: int, sleep: float,
              driver: str = "run", first: date = FIRST_DAY,
              server: list[float] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) per unit of ``units`` units after a warm-up, through
    ``driver``: ``Executor.run`` (``twice run``), ``run_backfill`` (``twice backfill``), a
    ``Worker`` (``twice worker``) or ``run_try`` (an Airflow try of the ``TwiceTaskOperator``),
    each with one unit at a time. ``server``: the local PostgreSQL server's CPU seconds per
    unit over the same units (:func:`server_cpu`) is appended to it (None when not seen)."""
    pipeline = unit_pipeline(destination, sleep)
    spans = pipeline.schedule.intervals(first, first + timedelta(days=units + WARM_UNITS))
    with Ledger.open(ledger_url) as ledger:
        def drive(chosen: list[Any]) -> bool:
            if driver == "backfill":
                return bool(run_backfill(pipeline, ledger, chosen).ok)
            if driver == "worker":
                return bool(Worker(pipeline, ledger, chosen, poll=0.01).run().ok)
            if driver == "airflow":  # one Airflow try per unit: the runner, not Airflow
                return all(run_try(pipeline, "load", ledger, span, continue_run=False,
                                   holder=try_holder("bench_unit", "load", span.label, 1)
                                   ).verdict == "succeeded" for span in chosen)
            return bool(Executor(pipeline, ledger, max_workers=1).run(chosen).ok)

        if not drive(spans[:WARM_UNITS]):
            raise RuntimeError("warm-up units did not succeed")
        before = server_cpu() if server is not None else None
        wall, cpu = time.perf_counter(), time.process_time()
        ok = drive(spans[WARM_UNITS:])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        after = server_cpu() if before is not None else None
        if server is not None and before is not None and after is not None:
            server.append((after - before) / units)
        if not ok:
            raise RuntimeError(f"{driver}: units did not succeed")
    return wall / units, cpu / units


def server_cpu() -> float | None:
    """CPU seconds (user + system) of every ``postgres`` process this machine shows
    (``/proc``, Linux): the local server's own work, backends and background writers alike.
    None when there is none to see (another machine's server, or no ``/proc``)."""
    ticks, seen = 0, False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name, _, rest = text.partition(" (")[2].rpartition(") ")
        if name != "postgres":
            continue
        fields = rest.split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (man 5 proc)
        seen = True
    return ticks / os.sysconf("SC_CLK_TCK") if seen else None


# -- the floor: the same transactions from a bare script ------------------------------------

LEDGER_DDL = [
    "CREATE TABLE units (uow_id TEXT PRIMARY KEY, pipeline TEXT, task TEXT, start TEXT)",
    "CREATE TABLE leases (uow_id TEXT PRIMARY KEY, holder TEXT, token BIGINT, expires TEXT, "
    "released TEXT)",
    "CREATE TABLE events (seq BIGINT, uow_id TEXT, kind TEXT, at TEXT, data TEXT)",
    "CREATE INDEX events_uow ON events (uow_id, seq)",
    "CREATE TABLE observations (uow_id TEXT, attempt INT, state TEXT, source TEXT, at TEXT)",
    "CREATE TABLE fingerprints (destination TEXT, part TEXT, version INT, row_count BIGINT, "
    "checksum TEXT)",
    "CREATE INDEX fingerprints_part ON fingerprints (destination, part, version)",
]
DEST_DDL = [
    "CREATE TABLE out (day DATE, v BIGINT)",
    "CREATE TABLE commits (table_name TEXT, slice TEXT, uow_id TEXT, token BIGINT, "
    "row_count BIGINT, checksum TEXT, committed_at TEXT)",
    "CREATE INDEX commits_fence ON commits (table_name, slice, token)",
]
NOW = "2024-01-01T00:00:00+00:00"


def ledger_claim(execute: Callable[..., Any], p: str, i: int) -> None:
    uow = f"bench_unit.load.{i}"
    execute(f"INSERT INTO units VALUES ({p}, 'bench_unit', 'load', {p})", (uow, NOW))
    execute(f"INSERT INTO leases VALUES ({p}, 'bench', {p}, {p}, NULL)", (uow, i, NOW))
    execute(f"INSERT INTO events VALUES ({p}, {p}, 'attempt-started', {p}, {p})",
            (2 * i, uow, NOW, '{"attempt": 1, "holder": "bench"}'))


def ledger_end(execute: Callable[..., Any], p: str, i: int) -> None:
    uow = f"bench_unit.load.{i}"
    execute(f"INSERT INTO events VALUES ({p}, {p}, 'attempt-ended', {p}, {p})",
            (2 * i + 1, uow, NOW, '{"attempt": 1, "outcome": "succeeded"}'))
    execute(f"INSERT INTO observations VALUES ({p}, 1, 'succeeded', 'executor', {p})", (uow, NOW))
    execute(f"INSERT INTO fingerprints VALUES ('out', {p}, 1, {ROWS}, 'abc')", (uow,))
    execute(f"UPDATE leases SET released = {p} WHERE uow_id = {p}", (NOW, uow))


def floor_ledger(path: Path) -> sqlite3.Connection:
    """The floor's SQLite ledger, with twice's durability settings (WAL, synchronous FULL)."""
    ledger = sqlite3.connect(path, isolation_level=None)
    ledger.execute("PRAGMA journal_mode = WAL")
    ledger.execute("PRAGMA synchronous = FULL")
    for ddl in LEDGER_DDL:
        ledger.execute(ddl)
    return ledger


def floor_unit(ledger: sqlite3.Connection, i: int, write: Callable[[], None],
               sleep: float = 0.0) -> None:
    """One unit of the floor on a SQLite ledger: the claim, the task (``sleep`` seconds),
    ``write``, the end."""
    ledger.execute("BEGIN IMMEDIATE")
    ledger_claim(ledger.execute, "?", i)
    ledger.execute("COMMIT")
    if sleep:
        time.sleep(sleep)
    write()
    ledger.execute("BEGIN IMMEDIATE")
    ledger_end(ledger.execute, "?", i)
    ledger.execute("COMMIT")


#: Numbers the floors' files and databases: a floor measured in blocks runs once per block.
_FLOOR_RUNS = itertools.count()


def floor_sqlite(workdir: Path, units: int, sleep: float = 0.0) -> float:
    """SQLite ledger (WAL, synchronous FULL, as twice's) and SQLite destination file (opened
    per unit, as twice opens it), each transaction committed; the task sleeps ``sleep``."""
    run = next(_FLOOR_RUNS)
    ledger = floor_ledger(workdir / f"floor-ledger-{sleep}-{run}.db")
    dest_path = workdir / f"floor-dest-{sleep}-{run}.db"
    with sqlite3.connect(dest_path) as dest:
        for ddl in DEST_DDL:
            dest.execute(ddl)
    rows = [(str(FIRST_DAY), v) for v in range(ROWS)]

    def one(i: int) -> None:
        def write() -> None:
            dest = sqlite3.connect(dest_path, isolation_level=None)
            dest.execute("BEGIN IMMEDIATE")
            dest.execute("DELETE FROM out WHERE day = ?", (str(FIRST_DAY),))
            dest.executemany("INSERT INTO out VALUES (?, ?)", rows)
            dest.execute("INSERT INTO commits VALUES ('out', ?, ?, ?, ?, 'abc', ?)",
                         (str(FIRST_DAY), f"u{i}", i, ROWS, NOW))
            dest.execute("COMMIT")
            dest.close()

        floor_unit(ledger, i, write, sleep)

    try:
        return per_unit(one, units, sleep)
    finally:
        ledger.close()


def floor_duckdb(workdir: Path, units: int, *, reopen: bool, sleep: float = 0.0) -> float:
    """SQLite ledger as above; DuckDB destination opened per unit (``reopen``) or held."""
    import duckdb

    run = next(_FLOOR_RUNS)
    ledger = floor_ledger(workdir / f"floor-ledger-duck-{reopen}-{sleep}-{run}.db")
    path = str(workdir / f"floor-{reopen}-{sleep}-{run}.duckdb")
    held = duckdb.connect(path)
    for ddl in DEST_DDL:
        held.execute(ddl)
    if reopen:
        held.close()
    table = ten_rows(FIRST_DAY)

    def one(i: int) -> None:
        def write() -> None:
            dest = duckdb.connect(path) if reopen else held
            dest.execute("BEGIN TRANSACTION")
            dest.execute("DELETE FROM out WHERE day = ?", [FIRST_DAY])
            dest.register("incoming", table)
            dest.execute("INSERT INTO out SELECT * FROM incoming")
            dest.unregister("incoming")
            dest.execute("INSERT INTO commits VALUES ('out', ?, ?, ?, ?, 'abc', ?)",
                         [str(FIRST_DAY), f"u{i}", i, ROWS, NOW])
            dest.execute("COMMIT")
            if reopen:
                dest.close()

        floor_unit(ledger, i, write, sleep)

    try:
        return per_unit(one, units, sleep)
    finally:
        ledger.close()
        if not reopen:
            held.close()


def floor_postgres(url: str, units: int, sleep: float = 0.0) -> float:
    """PostgreSQL ledger and destination (one database, two held connections), each
    transaction committed; the rows by COPY, as twice sends them; the task sleeps ``sleep``.
    A database measured again (in blocks) keeps its tables; each run's units are its own."""
    import psycopg

    ledger = psycopg.connect(url, autocommit=True)
    dest = psycopg.connect(url, autocommit=True)
    for ddl in LEDGER_DDL + DEST_DDL:
        ledger.execute(ddl.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ").replace(
            "CREATE INDEX ", "CREATE INDEX IF NOT EXISTS "))
    rows = [(FIRST_DAY, v) for v in range(ROWS)]
    base = next(_FLOOR_RUNS) * 1_000_000

    def one(unit: int) -> None:
        i = base + unit
        with ledger.transaction():
            ledger_claim(ledger.execute, "%s", i)
        if sleep:
            time.sleep(sleep)
        with dest.transaction(), dest.cursor() as cur:
            cur.execute("DELETE FROM out WHERE day = %s", (FIRST_DAY,))
            with cur.copy("COPY out (day, v) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cur.execute("INSERT INTO commits VALUES ('out', %s, %s, %s, %s, 'abc', %s)",
                        (str(FIRST_DAY), f"u{i}", i, ROWS, NOW))
        with ledger.transaction():
            ledger_end(ledger.execute, "%s", i)

    try:
        return per_unit(one, units, sleep)
    finally:
        ledger.close()
        dest.close()


def per_unit(one: Callable[[int], None], units: int, sleep: float = 0.0) -> float:
    """Wall seconds per unit of ``one`` after a warm-up, less the task's ``sleep``."""
    for i in range(WARM_UNITS):
        one(-1 - i)
    began = time.perf_counter()
    for i in range(units):
        one(i)
    return (time.perf_counter() - began) / units - sleep


# -- the configurations ----------------------------------------------------------------------

#: The measures the ratios and goals read, by their names in the table.
FLOOR = "floor: same transactions, bare script"
SLOW_FLOOR = "floor, 0.2 s task: overhead per unit"
NOOP = "twice, no-op task: per unit"
SLOW = "twice, 0.2 s task: overhead per unit"


def measure(ledger_url: Callable[[str], str], destination: Callable[[str], str],
            floor: Callable[[int, float], float], args: argparse.Namespace) -> Results:
    """Every measure of one configuration; ``floor(units, sleep)`` is its bare script's."""
    results: Results = {}
    # one ledger and one table; each measure runs its own days (the units are all new)
    ledger, table = ledger_url("twice"), destination("twice")
    blocks = [min(args.block, args.slow_units - done)
              for done in range(0, args.slow_units, args.block)]
    stride = timedelta(days=max(args.units, args.slow_units + WARM_UNITS * len(blocks))
                       + WARM_UNITS + 1)
    server: list[float] = []
    wall, cpu = run_twice(ledger, table, args.units, 0.0,
                          server=server if ledger.startswith("postgresql") else None)
    results[NOOP] = wall
    results["twice, no-op task: CPU per unit"] = cpu
    results["no-op task: local PostgreSQL server's CPU per unit"] = server[0] if server else None
    results[SLOW] = results["twice, 0.2 s task: CPU per unit"] = results[SLOW_FLOOR] = None
    if blocks:  # twice's units and the floor's in turn, a block at a time (the module doc)
        walls = cpus = floors = 0.0
        first = FIRST_DAY + stride
        for n in blocks:
            wall, cpu = run_twice(ledger, table, n, SLOW_SECONDS, first=first)
            walls, cpus = walls + wall * n, cpus + cpu * n
            floors += floor(n, SLOW_SECONDS) * n
            first += timedelta(days=n + WARM_UNITS)
        results[SLOW] = walls / args.slow_units - SLOW_SECONDS
        results["twice, 0.2 s task: CPU per unit"] = cpus / args.slow_units
        results[SLOW_FLOOR] = floors / args.slow_units
    for n, driver in enumerate(DRIVERS[1:], start=2):
        wall, _ = run_twice(ledger, table, args.units, 0.0, driver, first=FIRST_DAY + n * stride)
        results[f"twice, no-op task, twice {driver}: per unit"] = wall
    results[FLOOR] = floor(args.units, 0.0)
    return results


def bench_sqlite(workdir: Path, args: argparse.Namespace) -> Results:
    return measure(lambda n: f"sqlite:///{workdir / ('ledger-' + n + '.db')}",
                   lambda n: f"sqlite://{workdir / ('out-' + n + '.db')}?partition_column=day#out",
                   lambda units, sleep: floor_sqlite(workdir, units, sleep), args)


def bench_duckdb(workdir: Path, args: argparse.Namespace) -> Results:
    results = measure(
        lambda n: f"sqlite:///{workdir / ('dledger-' + n + '.db')}",
        lambda n: f"duckdb://{workdir / ('out-' + n + '.duckdb')}?partition_column=day#out",
        lambda units, sleep: floor_duckdb(workdir, units, reopen=True, sleep=sleep), args)
    results[HELD] = floor_duckdb(workdir, args.units, reopen=False)
    return results


HELD = "floor, DuckDB file held for the run"


def bench_postgres(args: argparse.Namespace) -> Results:
    with scratch_databases(args.postgres) as url:
        made: dict[str, str] = {}

        def database(name: str) -> str:
            if name not in made:
                made[name] = url("unit_" + name)
            return made[name]

        return measure(database,
                       lambda n: f"{database(n)}?partition_column=day#public.out",
                       lambda units, sleep: floor_postgres(
                           database("floor" if not sleep else "floor_slow"), units, sleep),
                       args)


GOALS = {"sqlite": 0.008, "duckdb": 0.008, "postgresql": 0.015}


def report(args: argparse.Namespace, columns: dict[str, Results | str]) -> None:
    names = list(columns)
    width = 46
    print(f"\nunit benchmark: {args.units} no-op units and {args.slow_units} units of a "
          f"{SLOW_SECONDS:g} s task, each a {ROWS}-row owned write; milliseconds per unit "
          "(wall clock, one run)\n")
    print("".ljust(width) + "".join(n.rjust(14) for n in names))
    measures: list[str] = []
    for column in columns.values():
        if isinstance(column, dict):
            measures += [m for m in column if m not in measures]
    for measure_name in measures:
        cells = []
        for n in names:
            column = columns[n]
            value = None if isinstance(column, str) else column.get(measure_name)
            text = "skipped" if isinstance(column, str) else (
                "n/a" if value is None else f"{value * 1000:.2f}")
            cells.append(text.rjust(14))
        print(measure_name.ljust(width) + "".join(cells))
    print("\nratios and goals\n")
    drivers = [NOOP, *(f"twice, no-op task, twice {d}: per unit" for d in DRIVERS[1:])]
    rows = [
        ("no-op unit / floor", [NOOP], FLOOR),
        ("no-op unit, slowest driver / floor", drivers, FLOOR),
        ("0.2 s task overhead / its floor", [SLOW], SLOW_FLOOR),
    ]
    for label, tops, bottom in rows:
        cells = []
        for n in names:
            column = columns[n]
            worst = floor = None
            if isinstance(column, dict):
                worst, floor = slowest(column, tops), column.get(bottom)
            cells.append(("n/a" if worst is None or not floor else f"{worst / floor:.1f}x"
                          ).rjust(14))
        print(label.ljust(width) + "".join(cells))
    goals = [
        ("goal, no-op task, every driver (ms)", drivers, FLOOR),
        ("goal, 0.2 s task (ms)", [SLOW], SLOW_FLOOR),
    ]
    for label, tops, bottom in goals:
        cells = []
        for n in names:
            column = columns[n]
            if isinstance(column, str):
                cells.append("skipped".rjust(14))
                continue
            worst, floor = slowest(column, tops), column.get(bottom)
            if worst is None:
                cells.append("n/a".rjust(14))
                continue
            goal = max(GOALS[n], 3 * floor) if floor else GOALS[n]
            cells.append((f"{goal * 1000:.1f} " + ("met" if worst <= goal else "not met")
                          ).rjust(14))
        print(label.ljust(width) + "".join(cells))
    print("(each goal: at most the ms goal or 3x the same task's floor, whichever is larger)")
    for n in names:
        if isinstance(columns[n], str):
            print(f"\n{n}: {columns[n]}")


def slowest(column: Results, measures: list[str]) -> float | None:
    """The largest of ``measures`` in ``column`` (None when none was measured)."""
    values = [v for v in (column.get(m) for m in measures) if v is not None]
    return max(values) if values else None


@contextmanager
def scratch_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="twice-bench-unit-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=200)
    parser.add_argument("--slow-units", type=int, default=20)
    parser.add_argument("--block", type=int, default=50,
                        help="units of the 0.2 s task, then of its floor, in turn")
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"),
                        help="admin URL of a PostgreSQL server (scratch databases are created)")
    parser.add_argument("--only", default="sqlite,duckdb,postgresql",
                        help="comma-separated subset of sqlite, duckdb, postgresql")
    args = parser.parse_args(argv)
    if args.units < 1 or args.slow_units < 0 or args.block < 1:
        parser.error("--units and --block must be >= 1 and --slow-units >= 0")
    chosen = [n.strip() for n in args.only.split(",") if n.strip()]
    columns: dict[str, Results | str] = {}
    with scratch_dir() as workdir:
        if "sqlite" in chosen:
            columns["sqlite"] = bench_sqlite(workdir, args)
        if "duckdb" in chosen:
            columns["duckdb"] = bench_duckdb(workdir, args)
        if "postgresql" in chosen:
            if not args.postgres:
                columns["postgresql"] = "no --postgres URL and TWICE_TEST_POSTGRES_URL unset"
            else:
                try:
                    columns["postgresql"] = bench_postgres(args)
                except Exception as exc:  # report it, keep the other columns
                    first = (str(exc).strip().splitlines() or [repr(exc)])[0]
                    columns["postgresql"] = f"failed ({type(exc).__name__}): {first}"
    report(args, columns)


if __name__ == "__main__":
    main()
