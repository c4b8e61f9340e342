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
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from datetime import date
from pathlib import Path

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=20)
    parser.add_argument("--driver", choices=DRIVERS, default="run")
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"))
    parser.add_argument("--log", default="/var/log/postgresql/postgresql-15-main.log")
    parser.add_argument("--show", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.postgres:
        parser.error("--postgres (or TWICE_TEST_POSTGRES_URL) is required")
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
