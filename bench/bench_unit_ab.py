"""The whole unit before and after a change, interleaved: ``bench_unit.py``'s no-op units, each
side in a fresh interpreter, in turn (issue 38).

    python bench/bench_unit_ab.py --baseline-src OLD/src [--engine postgresql] [--driver run]
        [--units 200] [--repeat 6] [--sleep 0] [--postgres URL]

``bench_unit.py`` runs each configuration once; on a machine whose speed drifts by tens of
percent within minutes, a change of 10% shows only when both sides run alternately, in the
same minutes. Each repeat runs ``--units`` no-op units (after ``bench_unit``'s warm-up units)
through one driver in a new process for each side, the baseline with ``PYTHONPATH`` set to
``--baseline-src`` (e.g. ``git worktree add /tmp/base <commit>`` then ``/tmp/base/src``), in
the order before, after, after, before, ... It prints, per side, the median and the least of
the wall time and of the process's CPU time a unit, in milliseconds. ``--sleep 0.2`` runs
``bench_unit``'s 0.2 s task instead, and the wall time is its overhead (the sleep taken off).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_side(engine: str, driver: str, units: int, postgres: str | None,
             sleep: float = 0.0) -> tuple[float, float]:
    """Run the units in this process; wall time (less ``sleep``) and CPU time a unit, in
    seconds."""
    sys.path.insert(0, str(HERE))
    import bench_unit
    from bench_ledger import scratch_databases

    if engine == "postgresql":
        assert postgres, "--postgres (or TWICE_TEST_POSTGRES_URL) is required"
        with scratch_databases(postgres) as url:
            ledger = url("ab")
            wall, cpu = bench_unit.run_twice(
                ledger, f"{ledger}?partition_column=day#public.out", units, sleep, driver)
            return wall - sleep, cpu
    with tempfile.TemporaryDirectory() as place:
        wall, cpu = bench_unit.run_twice(f"sqlite:///{place}/ledger.db",
                                         f"sqlite://{place}/out.db?partition_column=day#out",
                                         units, sleep, driver)
        return wall - sleep, cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", help="the baseline's src/ directory")
    parser.add_argument("--engine", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--driver", default="run")
    parser.add_argument("--units", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--sleep", type=float, default=0.0,
                        help="the task's sleep in seconds (0.2: bench_unit's 0.2 s task)")
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"))
    parser.add_argument("--one-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_side:
        wall, cpu = one_side(args.engine, args.driver, args.units, args.postgres, args.sleep)
        print(wall, cpu)
        return
    if not args.baseline_src:
        parser.error("--baseline-src is required")
    found: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    for round_ in range(args.repeat):
        for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
            env = dict(os.environ)
            env.pop("PYTHONPATH", None)
            if side == "before":
                env["PYTHONPATH"] = args.baseline_src
            out = subprocess.run(
                [sys.executable, __file__, "--one-side", "--engine", args.engine, "--driver",
                 args.driver, "--units", str(args.units), "--sleep", str(args.sleep), *(
                     ["--postgres", args.postgres] if args.postgres else [])],
                env=env, capture_output=True, text=True, check=True).stdout.split()
            found[side].append((float(out[-2]), float(out[-1])))
    task = f"units of a {args.sleep:g} s task (its overhead)" if args.sleep else "no-op units"
    print(f"{args.engine}, {args.driver}: {args.units} {task}, {args.repeat} runs a side, "
          "in turn; milliseconds a unit")
    for side, runs in found.items():
        wall = sorted(w * 1000 for w, _ in runs)
        cpu = sorted(c * 1000 for _, c in runs)
        print(f"  {side:<7} wall median {statistics.median(wall):6.2f} (least {wall[0]:6.2f})"
              f"   CPU median {statistics.median(cpu):6.2f} (least {cpu[0]:6.2f})")


if __name__ == "__main__":
    main()
