"""Run every benchmark, one after another, each in its own interpreter.

    python bench/run_all.py            # full suite (minutes: 1M-row writers, 10M fingerprint)
    python bench/run_all.py --quick    # smoke run with tiny sizes, well under 30 s
    python bench/run_all.py --only retry,ledger [--postgres URL]

Each benchmark prints its own table of times and of ratios against a baseline measured in the
same run; nothing is asserted. The exit code is non-zero only if a benchmark crashed.
PostgreSQL columns use ``--postgres`` (default ``$TWICE_TEST_POSTGRES_URL``) and say "skipped"
with the reason when it is unset or unreachable.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (script, full-run arguments, quick-run arguments)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "decide": ("bench_decide.py", ["--tasks", "100000", "--repeat", "3"],
               ["--tasks", "2000", "--repeat", "1"]),
    "retry": ("bench_retry.py", ["--calls", "200000", "--repeat", "5"],
              ["--calls", "20000", "--repeat", "2"]),
    "ledger": ("bench_ledger.py", ["--intervals", "1000", "--attempts", "500"],
               ["--intervals", "5", "--attempts", "5"]),
    "writers": ("bench_writers.py", ["--rows", "1000000", "--fingerprint-rows", "10000000",
                                     "--repeat", "3"],
                ["--rows", "2000", "--fingerprint-rows", "5000"]),
    "fingerprint": ("bench_fingerprint.py", ["--rows", "1000000", "--large"],
                    ["--rows", "5000", "--repeat", "1"]),
    "planning": ("bench_planning.py", ["--units", "100,10000,100000", "--repeat", "3"],
                 ["--units", "10,100", "--repeat", "1"]),
    "unit": ("bench_unit.py", ["--units", "200", "--slow-units", "20"],
             ["--units", "2", "--slow-units", "1"]),
    "workers": ("bench_workers.py", ["--units", "240", "--workers", "1,2,4,6,8",
                                     "--sleeps", "0.05,0.2"],
                ["--units", "2", "--workers", "2", "--sleeps", "0"]),
    # the year on both engines (PostgreSQL's column reads "skipped" without a server); the
    # quick run on SQLite only
    "year": ("bench_year.py", ["--months", "1,3,12", "--verified", "20000",
                               "--engines", "sqlite,postgresql"],
             ["--hours", "2,3", "--verified", "3", "--engines", "sqlite"]),
    # restart to new work like for like: builds its 20,000 verified units once a run
    "restart": ("bench_restart.py", ["--verified", "20000", "--repeat", "3"],
                ["--verified", "6", "--repeat", "1"]),
}
POSTGRES_AWARE = {"ledger", "writers", "fingerprint", "unit", "workers", "year"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--only", default="",
                        help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"),
                        help="admin URL of a PostgreSQL server (scratch databases are created)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"--only: unknown benchmark {', '.join(unknown)}; "
                     f"choose from {', '.join(BENCHMARKS)}")
    print(f"twice benchmarks, {'quick' if args.quick else 'full'} run, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {platform.machine()}")
    failed: list[str] = []
    began = time.perf_counter()
    for name in names:
        script, full, quick = BENCHMARKS[name]
        command = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
        if name in POSTGRES_AWARE and args.postgres:
            command += ["--postgres", args.postgres]
        shown = " ".join(["python", f"bench/{script}", *(quick if args.quick else full)])
        print(f"\n=== {name}: {shown}", flush=True)
        started = time.perf_counter()
        code = subprocess.run(command, check=False).returncode
        print(f"--- {name}: {time.perf_counter() - started:.1f} s"
              + ("" if code == 0 else f", FAILED with exit code {code}"), flush=True)
        if code:
            failed.append(name)
    print(f"\nall benchmarks: {time.perf_counter() - began:.1f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
