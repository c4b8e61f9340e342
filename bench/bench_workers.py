"""Many ``twice worker`` processes on one PostgreSQL ledger: scaling, lease conflicts, executions.

    python bench/bench_workers.py [--units 240] [--workers 1,2,4,6,8] [--sleeps 0.05,0.2]
                                  [--postgres URL]

For each task time in ``--sleeps`` (seconds an I/O-bound task waits: ``time.sleep``) and each
fleet size in ``--workers``: a scratch PostgreSQL database is created on the server at
``--postgres`` (default ``$TWICE_TEST_POSTGRES_URL``) holding the ledger (migrated before the
fleet starts, as an operator would) and the destination tables; that many real ``twice worker``
processes (``python -m twice.cli worker``, each its own OS process) are started at once over the
same range of ``--units`` units (bench/worker_pipeline.py: independent daily tasks, each waiting
then returning 10 rows that twice writes to its PostgreSQL table, an owned write); the database
is dropped afterwards.

Every process imports twice and loads the pipeline (which also does pyarrow's one-time import
of pandas, the tasks' own set-up), says it is ready, and waits for the benchmark's "go"
(bench/worker_pipeline.py), so the fleet starts working at one instant however long its
interpreters took to start on a busy machine. Per run it prints:

* wall: from starting the processes to the last one's exit (interpreter start-up included);
* run: from the "go" to the last process's exit (opening the ledger, choosing, claiming,
  running, recording, and the last ``--poll`` wait of workers with nothing left to take);
* span: from the first task body's start to the last one's end; to work: from the "go" to the
  moment the last worker to start one began its first task body (opening the ledger, the
  first claims, the first write's table creation);
* ideal: units x task time / workers (the tasks' own time, nothing else);
* units/s over the run; speedup: the first fleet size's run / this run, same task time, same
  invocation (span x and wall x: the same ratio on span and wall);
* conflicts: claims that found another worker first (the sum of each worker's
  ``lease_conflicts``; n/a for a twice that does not count them);
* extra: task-body executions beyond one per unit, from the bodies' own log files (0 is the
  guarantee); missing: units never executed; ran/worker: units each worker ran (min-max);
* lock waits s: session-seconds the fleet's database sessions spent waiting on a lock another
  held (row, transaction, advisory), sampled every 20 ms from ``pg_stat_activity``: the
  serialisation itself, whatever the machine's load;
* cpu ms/unit: the worker processes' CPU time (user + system, start-up included) per unit:
  with the fleet's units/s it says how much of the machine's CPUs the workers need
  (PostgreSQL's own CPU is not counted).

Nothing is asserted: the table is to read. Wall clock, one run each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PIPELINE = HERE / "worker_pipeline.py"
FIRST_DAY = date(2025, 1, 1)
TASKS = 4

sys.path[:0] = [str(HERE), str(ROOT / "src")]  # the twice the workers run (ROOT/src)
from bench_ledger import scratch_databases  # noqa: E402


class LockWaits:
    """Samples, every ``every`` seconds on a connection of its own, how many sessions of the
    database wait on a lock (``pg_stat_activity.wait_event_type = 'Lock'``: a row, a
    transaction id, an advisory lock, a relation); ``seconds`` is the sum of samples x
    ``every``: session-seconds spent waiting on another session, the serialisation itself."""

    def __init__(self, db: str, every: float = 0.02) -> None:
        import psycopg

        self.every, self.seconds = every, 0.0
        self.by: dict[str, float] = {}  # "wait event: statement" -> seconds
        self._conn = psycopg.connect(db, autocommit=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> LockWaits:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            for event, query in self._conn.execute(
                    "SELECT wait_event, left(regexp_replace(query, '\\s+', ' ', 'g'), 70) "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'").fetchall():
                self.seconds += self.every
                key = f"{event}: {query}"
                self.by[key] = self.by.get(key, 0.0) + self.every


def run_fleet(db: str, workers: int, units: int, sleep: float, workdir: Path,
              poll: float, profile: Path | None = None) -> dict[str, Any]:
    """Start ``workers`` processes on the ledger ``db`` at once; wait for all; measure."""
    from twice.ledger import Ledger

    with Ledger.open(db) as ledger:  # migrated before the fleet, as an operator would
        assert ledger.dialect == "postgresql"
    side = workdir / f"side-{sleep}-{workers}"
    side.mkdir()
    tasks = min(TASKS, units)
    days = -(-units // tasks)
    go = side / "go"
    env = {**os.environ, "TWICE_BENCH_DEST": db, "TWICE_BENCH_SIDE": str(side),
           "TWICE_BENCH_GO": str(go),
           "TWICE_BENCH_SLEEP": str(sleep), "TWICE_BENCH_TASKS": str(tasks),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                         os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "twice.cli", "worker", str(PIPELINE), "--ledger", db,
               "--start", FIRST_DAY.isoformat(),
               "--end", (FIRST_DAY + timedelta(days=days)).isoformat(),
               "--poll", str(poll), "--json"]
    def argv(n: int) -> list[str]:
        if profile is None:
            return [*command, "--name", f"bench-w{n}"]
        out = profile / f"sleep{sleep:g}-workers{workers}-w{n}.prof"
        return [sys.executable, "-m", "cProfile", "-o", str(out), *command[1:],
                "--name", f"bench-w{n}"]

    began = time.time()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = [subprocess.Popen(argv(n), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=workdir)
             for n in range(workers)]
    while len(list(side.glob("ready-*"))) < workers:  # every interpreter started
        if any(proc.poll() is not None for proc in procs):
            break  # one failed early: its report (or error) is read below
        time.sleep(0.01)
    with LockWaits(db) as waits:
        went = time.time()
        go.touch()
        outputs = [proc.communicate() for proc in procs]
        ended = time.time()
    wall, run = ended - began, ended - went
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    reports = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        try:
            reports.append(json.loads(out))
        except json.JSONDecodeError:
            raise RuntimeError(f"a worker exited {proc.returncode} without a report: "
                               f"{err.strip()[-2000:]}") from None
        if proc.returncode != 0:
            failed = [f"{u['task']} {u['interval']}: {u['outcome']}: {u['reason']}"
                      + (f" ({u['result'].get('error')})" if u.get("result") else "")
                      for u in reports[-1]["units"] if u["outcome"] != "succeeded"]
            raise RuntimeError(f"worker {reports[-1]['worker']} exited {proc.returncode}: "
                               f"{reports[-1]['counts']}; " + "; ".join(failed))
    starts: Counter[tuple[str, str]] = Counter()
    first, last = float("inf"), 0.0
    firsts: dict[str, float] = {}  # pid -> its first task start
    for log in side.glob("executions-*.log"):
        for line in log.read_text(encoding="utf-8").splitlines():
            kind, task, day, pid, at = line.split()
            if kind == "start":
                starts[(task, day)] += 1
                first = min(first, float(at))
                firsts[pid] = min(firsts.get(pid, float("inf")), float(at))
            else:
                last = max(last, float(at))
    expected = tasks * days
    ran = [sum(1 for u in r["units"] if u["settlement"] == "ran") for r in reports]
    conflicts = [r.get("lease_conflicts") for r in reports]
    return {
        "units": expected,
        "executed": len(starts),
        "extra": sum(starts.values()) - len(starts),
        "missing": expected - len(starts),
        "wall": wall,
        "run": run,
        "to_work": max(firsts.values()) - went if firsts else float("nan"),
        "span": last - first if starts else float("nan"),
        "conflicts": None if None in conflicts else sum(c for c in conflicts if c is not None),
        "ran": (min(ran), max(ran)),
        "passes": max(r["passes"] for r in reports),
        "cpu": cpu,
        "lock_waits": waits.seconds,
        "lock_waits_by": sorted(waits.by.items(), key=lambda kv: -kv[1])[:3],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=240)
    parser.add_argument("--workers", default="1,2,4,6,8")
    parser.add_argument("--sleeps", default="0.05,0.2",
                        help="comma-separated task times, seconds")
    parser.add_argument("--poll", type=float, default=1.0, help="each worker's --poll")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="run each worker under cProfile, writing DIR/sleepS-workersN-wI.prof")
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"),
                        help="admin URL of a PostgreSQL server (scratch databases are created)")
    args = parser.parse_args(argv)
    try:
        fleets = [int(n) for n in args.workers.split(",") if n.strip()]
        sleeps = [float(s) for s in args.sleeps.split(",") if s.strip()]
    except ValueError as exc:
        parser.error(f"--workers / --sleeps: {exc}")
    if args.units < 1 or not fleets or min(fleets) < 1 or not sleeps or min(sleeps) < 0:
        parser.error("--units and each worker count must be >= 1, each sleep >= 0")
    load = os.getloadavg()
    print(f"workers benchmark: {args.units} units ({TASKS} independent daily tasks, each "
          f"writing 10 rows to PostgreSQL), fleets of {args.workers} `twice worker` processes "
          f"on one PostgreSQL ledger; {os.cpu_count()} CPUs, load average before "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    header = (f"{'task s':>6} {'workers':>7} {'wall s':>7} {'run s':>7} {'span s':>7} "
              f"{'ideal s':>7} {'units/s':>7} {'speedup':>7} {'span x':>6} {'wall x':>6} "
              f"{'conflicts':>9} {'extra':>5} {'missing':>7} {'ran/worker':>10} "
              f"{'cpu ms/unit':>11} {'to work s':>9} {'lock waits s':>12}")
    print(f"\n{header}", flush=True)
    if not args.postgres:
        print("\npostgresql: no --postgres URL and TWICE_TEST_POSTGRES_URL unset; skipped")
        return
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="twice-bench-workers-"))
    rows: list[str] = []
    try:
        import psycopg

        try:
            with scratch_databases(args.postgres) as url:
                for sleep in sleeps:
                    base: dict[str, Any] | None = None
                    for workers in fleets:
                        got = run_fleet(url("workers"), workers, args.units, sleep, workdir,
                                        args.poll, args.profile)
                        base = base or (got if workers == fleets[0] else None)
                        def times(key: str, got: dict[str, Any] = got,
                                  base: dict[str, Any] | None = base) -> str:
                            return "n/a" if base is None else f"{base[key] / got[key]:.2f}"

                        conflicts = "n/a" if got["conflicts"] is None else str(got["conflicts"])
                        ideal = got["units"] * sleep / workers
                        rows.append(
                            f"{sleep:>6g} {workers:>7} {got['wall']:>7.2f} {got['run']:>7.2f} "
                            f"{got['span']:>7.2f} {ideal:>7.2f} "
                            f"{got['units'] / got['run']:>7.1f} {times('run'):>7} "
                            f"{times('span'):>6} {times('wall'):>6} {conflicts:>9} "
                            f"{got['extra']:>5} {got['missing']:>7} "
                            f"{got['ran'][0]:>4}-{got['ran'][1]:<5} "
                            f"{got['cpu'] * 1000 / got['units']:>11.1f} "
                            f"{got['to_work']:>9.2f} {got['lock_waits']:>12.2f}")
                        print(rows[-1], flush=True)
                        for what, seconds in got["lock_waits_by"]:
                            print(f"{'':>14}lock waits {seconds:.2f} s on {what}", flush=True)
        except psycopg.OperationalError as exc:
            print(f"\npostgresql: unreachable: {str(exc).strip().splitlines()[0]}")
            return
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\nspeedup: run of the first fleet size / this run (same task time, same "
          "invocation); span x, wall x: the same on span and wall. extra: task-body executions "
          "beyond one per unit (must be 0).")

if __name__ == "__main__":
    main()
