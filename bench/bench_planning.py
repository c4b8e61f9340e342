"""Planning at scale: ``twice backfill --dry-run`` of an hourly pipeline over 100 to 100,000 units.

    python bench/bench_planning.py [--units 100,10000,100000] [--repeat R]

Each size runs the real command in a fresh process (``bench/hourly_pipeline.py``, one task,
a fresh SQLite ledger, piped output) and times the first printed interval and the whole plan.
The largest size is issue 23's range, ``--start 2016-01-01T00:00:00+00:00 --end
2027-06-01T00:00:00+00:00`` (100,056 hours, ending after now, hence ``--allow-open-intervals``:
a dry run changes nothing); the others start at the same hour. The cost per unit is measured in
this process (the same planning and printing functions the command uses, output to a
buffer, best of ``--repeat``, so interpreter start-up does not swamp a 100-unit plan) as
``(plan of N - plan of 1) / (N - 1)``, the per-plan cost (ledger read, console) left out; its
ratio to the cost per unit at the middle size, measured in the same run, says whether
planning stays flat. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
START = datetime(2016, 1, 1, tzinfo=UTC)
ISSUE_END = datetime(2027, 6, 1, tzinfo=UTC)  # issue 23's range: 100,056 hourly units
FIRST_GOAL, WHOLE_GOAL = 2.0, 10.0  # seconds, at 100,000 units


def plan_once(units: int, workdir: Path) -> tuple[float, float, int]:
    """(seconds to the first printed interval, seconds to the end, units planned)."""
    end = ISSUE_END if units == 100_000 else START + timedelta(hours=units)
    ledger = workdir / f"ledger-{units}.db"
    command = [sys.executable, "-m", "twice", "backfill", str(HERE / "hourly_pipeline.py"),
               "--start", START.isoformat(), "--end", end.isoformat(), "--dry-run", "--yes",
               "--allow-open-intervals", "--ledger", str(ledger)]
    env = {**os.environ, "TWICE_BENCH_WORKDIR": str(workdir)}
    env.pop("COLUMNS", None)
    marker = START.isoformat()
    began = time.perf_counter()
    first = None
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if first is None and marker in line:
                first = time.perf_counter() - began
    whole = time.perf_counter() - began
    if proc.returncode or first is None:
        raise SystemExit(f"twice backfill --dry-run failed (exit {proc.returncode}): "
                         + " ".join(command))
    ledger.unlink(missing_ok=True)
    return first, whole, int((end - START) / timedelta(hours=1))


def plan_in_process(units: int, workdir: Path) -> float:
    """Seconds to plan and print ``units`` hourly units in this process (fresh ledger)."""
    import contextlib
    import io

    from twice.cli.backfill_cmd import _print_plan_stream
    from twice.define.load import load_pipeline
    from twice.drivers.backfill import iter_plan
    from twice.ledger import Ledger

    os.environ["TWICE_BENCH_WORKDIR"] = str(workdir)
    pipeline = load_pipeline(str(HERE / "hourly_pipeline.py"))
    end = ISSUE_END if units == 100_000 else START + timedelta(hours=units)
    units = int((end - START) / timedelta(hours=1))
    path = workdir / f"inproc-{units}.db"
    with Ledger.open(f"sqlite:///{path}", durable=True) as ledger:
        header = {"pipeline": pipeline.name, "tasks": ["readings"], "dependents": [],
                  "force": False}
        began = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            _print_plan_stream(header, units, iter_plan(
                pipeline, ledger, pipeline.schedule.iter_intervals(START, end)))
        took = time.perf_counter() - began
    path.unlink(missing_ok=True)
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", default="100,10000,100000",
                        help="comma-separated plan sizes (100000 means issue 23's range)")
    parser.add_argument("--repeat", type=int, default=1, help="best of R runs per size")
    args = parser.parse_args(argv)
    sizes = sorted({int(u) for u in args.units.split(",") if u.strip()})
    if not sizes or sizes[0] < 2 or args.repeat < 1:
        parser.error("--units must be sizes >= 2, --repeat >= 1")
    workdir = Path(tempfile.mkdtemp(prefix="twice-bench-plan-"))
    try:
        def best(units: int) -> tuple[float, float, int]:
            runs = [plan_once(units, workdir) for _ in range(args.repeat)]
            return min(r[0] for r in runs), min(r[1] for r in runs), runs[0][2]

        plan_in_process(2, workdir)  # warm up: the lazy imports of a first plan
        fixed = min(plan_in_process(1, workdir) for _ in range(max(args.repeat, 3)))
        rows = []
        for size in sizes:
            first, whole, planned = best(size)
            took = min(plan_in_process(size, workdir) for _ in range(args.repeat))
            rows.append((first, whole, planned, (took - fixed) / (planned - 1)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    per_middle = rows[len(rows) // 2][3]
    middle = rows[len(rows) // 2][2]
    runs = "one run" if args.repeat == 1 else f"best of {args.repeat}"
    print(f"planning benchmark: twice backfill --dry-run, hourly, one task ({runs})\n")
    print(f"{'units':>8} {'first interval':>15} {'whole plan':>11} {'per unit':>10} "
          f"{'x per unit at ' + format(middle, ','):>22}")
    for first, whole, planned, per in rows:
        print(f"{planned:>8,} {first:>13.2f} s {whole:>9.2f} s {per * 1e6:>7.1f} us "
              f"{per / per_middle:>22.2f}")
    first, whole, planned, _ = rows[-1]
    print("\nfirst interval and whole plan: the command in a fresh process (start-up included);"
          f"\nper unit: planning + printing in this process, (N units - 1 unit) / (N - 1); "
          f"a one-unit plan took {fixed * 1e3:.1f} ms")
    if planned == 100_056:
        print(f"\ngoals (issue 23) at {planned:,} units: first interval {first:.2f} s "
              f"(<= {FIRST_GOAL:.0f} s: {'yes' if first <= FIRST_GOAL else 'NO'}), whole "
              f"plan {whole:.2f} s (<= {WHOLE_GOAL:.0f} s: "
              f"{'yes' if whole <= WHOLE_GOAL else 'NO'})")


if __name__ == "__main__":
    main()
