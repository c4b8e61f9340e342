"""The statements one unit of work sends to PostgreSQL, counted by the server (issue 38).

    python bench/trace_statements.py [--units 20] [--driver run] [--postgres URL]
        [--log /var/log/postgresql/postgresql-15-main.log] [--show 1]

Runs ``--units`` no-op units of ``bench_unit.py``'s task (10 rows, an owned ``replace`` write)
through one driver on a PostgreSQL ledger and destination (scratch databases, dropped after),
with ``log_statement = 'all'`` set on the server for the measured units only, and counts the
statements the server logged, per unit, for the ledger and the destination. Each statement of
the extended protocol, each ``BEGIN`` and ``COMMIT`` and each batch of the simple protocol is
one round trip: the count does not depend on the machine's load, the timings do. ``--show N``
prints the statements of the N-th measured unit.

It needs a superuser (``ALTER SYSTEM``) and the server's log file readable here (a local
server; ``--log``). Nothing is asserted.

``--round-trips`` counts round trips instead, on the client: every libpq connection twice opens
is traced (``PQtrace``), and each ``ReadyForQuery`` the server sends ends one exchange the
client waited for (a statement, a batch, ``BEGIN``, ``COMMIT``, a pipeline's sync, a COPY).
Statements sent together in one pipeline are several statements in the server's log and one
round trip here. It needs neither a superuser nor the log.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ledger import scratch_databases
from bench_unit import DRIVERS, WARM_UNITS, run_twice

STATEMENT = re.compile(r"@(?P<database>\w+) LOG:  (?:statement|execute [^:]*): (?P<sql>.*)")


def set_logging(admin_url: str, value: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET log_statement = '{value}'")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.3)  # the backends take the new setting at their next command


class RoundTrips:
    """Every psycopg connection opened from now on traced into its own file (libpq's
    ``PQtrace``), named by its database; ``count`` reads how many ``ReadyForQuery`` messages
    each database's connections received since ``mark``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files: list[tuple[str, Path, Any]] = []
        self.marks: dict[Path, int] = {}
        connect = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]
        traces = self

        def traced(cls: Any, *args: Any, **kwargs: Any) -> Any:
            conn = connect(cls, *args, **kwargs)
            path = directory / f"{conn.info.dbname}-{len(traces.files)}.trace"
            handle = path.open("w")
            conn.pgconn.trace(handle.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            traces.files.append((conn.info.dbname, path, handle))
            return conn

        psycopg.Connection.connect = classmethod(traced)  # type: ignore[assignment]
        psycopg.connect = psycopg.Connection.connect  # the module's alias, bound at import

    def mark(self) -> None:
        for _, path, handle in self.files:
            handle.flush()
            self.marks[path] = path.stat().st_size

    def count(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for database, path, handle in self.files:
            handle.flush()
            with path.open(encoding="utf-8", errors="replace") as f:
                f.seek(self.marks.get(path, 0))
                found[database] += sum(1 for line in f
                                       if "\tReadyForQuery" in line and line.startswith("B"))
        return found


def round_trips(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory, scratch_databases(args.postgres) as url:
        traces = RoundTrips(Path(directory))
        ledger, destination = url("trips_ledger"), url("trips_dest")
        target = f"{destination}?partition_column=day#public.out"
        run_twice(ledger, target, WARM_UNITS, 0.0, args.driver)  # tables made, caches warm
        traces.mark()
        run_twice(ledger, target, args.units, 0.0, args.driver, first=date(2021, 1, 1))
        counts = traces.count()
    units = args.units + WARM_UNITS
    names = {ledger.rsplit("/", 1)[1].split("?")[0]: "ledger",
             destination.rsplit("/", 1)[1].split("?")[0]: "destination"}
    per = Counter({names[db]: n for db, n in counts.items() if db in names})
    total = sum(per.values())
    print(f"{args.driver}: {total} round trips for {units} units, {total / units:.2f} a unit "
          f"(ledger {per['ledger'] / units:.2f}, destination {per['destination'] / units:.2f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=20)
    parser.add_argument("--driver", choices=DRIVERS, default="run")
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"))
    parser.add_argument("--log", default="/var/log/postgresql/postgresql-15-main.log")
    parser.add_argument("--show", type=int, default=0)
    parser.add_argument("--round-trips", action="store_true",
                        help="count round trips on the client instead (see above)")
    args = parser.parse_args(argv)
    if not args.postgres:
        parser.error("--postgres (or TWICE_TEST_POSTGRES_URL) is required")
    if args.round_trips:
        round_trips(args)
        return
    log = Path(args.log)
    with scratch_databases(args.postgres) as url:
        ledger, destination = url("trace_ledger"), url("trace_dest")
        target = f"{destination}?partition_column=day#public.out"
        run_twice(ledger, target, WARM_UNITS, 0.0, args.driver)  # tables made, caches warm
        set_logging(args.postgres, "all")
        start = log.stat().st_size
        try:
            run_twice(ledger, target, args.units, 0.0, args.driver, first=date(2021, 1, 1))
        finally:
            set_logging(args.postgres, "none")
        with log.open(encoding="utf-8", errors="replace") as f:
            f.seek(start)
            lines = f.read().splitlines()
    names = {ledger.rsplit("/", 1)[1].split("?")[0]: "ledger",
             destination.rsplit("/", 1)[1].split("?")[0]: "destination"}
    found = [(names[m["database"]], m["sql"]) for line in lines
             if (m := STATEMENT.search(line)) and m["database"] in names]
    units = args.units + WARM_UNITS  # run_twice warms up again inside the measured run
    counts = Counter(where for where, _ in found)
    print(f"{args.driver}: {len(found)} statements for {units} units, "
          f"{len(found) / units:.2f} a unit (ledger {counts['ledger'] / units:.2f}, "
          f"destination {counts['destination'] / units:.2f})")
    if args.show:
        per_unit = len(found) // units
        for where, sql in found[per_unit * (args.show - 1):per_unit * args.show]:
            print(f"  {where:<11} {sql[:150]}")


if __name__ == "__main__":
    main()
