"""Restart to new work over many verified units (issue 38), repeatable and like for like.

    python bench/bench_restart.py --place DIR --verified 20000            # build once, measure
    python bench/bench_restart.py --place DIR --repeat 3 --baseline-src OLD/src
    python bench/bench_restart.py --verified 6 --repeat 1                 # a scratch place

``bench/bench_year.py`` measures a restart once, after a first run of ``--verified`` units that
takes minutes. This script keeps that first run: the first time, it backfills the first
``--verified`` units of ``bench/year_pipeline.py`` (3 hourly tasks, SQLite ledger and embedded
SQLite destination) into ``DIR`` and saves the ledger and destination in ``DIR/saved``
(without ``--place``: a scratch folder, built and removed in this run). Every measure then
restores both files in place (a destination's path is part of each unit's key, so they are
restored where they were written) and runs the real ``twice backfill`` over the
verified hours plus one day of new work: its time to new work is from the process's start to
the first attempt it began (read from the ledger), as in ``bench_year``. The start-up is a
no-op backfill of one hour over the same ledger.

``--baseline-src`` names another checkout's ``src`` (e.g. ``git worktree add /tmp/before
COMMIT``): each repeat measures it and this checkout in turn, in the same run, and the report
prints the medians and their ratio. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_year import START, TASKS, backfill, first_attempt_after  # noqa: E402

NEW_HOURS = 24  # new work after the verified hours: one day of hourly units
FILES = ("ledger.db", "year.db")


def build(place: Path, verified: int) -> None:
    """The first run: ``verified`` units (their hours x 3), saved in ``place/saved``."""
    hours = max(verified // TASKS, 1)
    place.mkdir(parents=True, exist_ok=True)
    print(f"building: first {hours:,} hours ({hours * TASKS:,} units) in {place}", flush=True)
    run = backfill(hours, place, ledger_url(place), "sqlite")
    print(f"  {run.wall:.1f} s, {run.counts}", flush=True)
    (place / "saved").mkdir(exist_ok=True)
    for name in FILES:
        shutil.copy2(place / name, place / "saved" / name)
    (place / "saved" / "hours").write_text(f"{hours}\n")


def ledger_url(place: Path) -> str:
    return f"sqlite:///{place / 'ledger.db'}"


def restore(place: Path) -> None:
    for name in FILES:
        shutil.copy2(place / "saved" / name, place / name)
    for stale in place.glob("task-seconds-*"):
        stale.unlink()
    os.sync()  # the copy's writeback must not land inside the measure
    time.sleep(1)


def measure(place: Path, hours: int, src: str | None) -> tuple[float, float, float]:
    """(time to new work, whole restart, start-up) with ``src`` first on the path."""
    saved = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        restore(place)
        restart = backfill(hours + NEW_HOURS, place, ledger_url(place), "sqlite",
                           ledger_reader=first_attempt_after(ledger_url(place)))
        restore(place)
        began = time.perf_counter()
        backfill(1, place, ledger_url(place), "sqlite")
        startup = time.perf_counter() - began
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    assert restart.first_new is not None, "the restart began no new attempt"
    return restart.first_new, restart.wall, startup


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--place", type=Path, default=None,
                        help="folder for the ledger and destination, built on first use "
                             "(default: a scratch folder, removed at the end)")
    parser.add_argument("--verified", type=int, default=20_000,
                        help="units verified by the first run (only when building)")
    parser.add_argument("--repeat", type=int, default=3, help="measures of each side")
    parser.add_argument("--baseline-src", default=None,
                        help="another checkout's src/ to measure in the same run")
    args = parser.parse_args(argv)
    if args.place is None:
        scratch = Path(tempfile.mkdtemp(prefix="twice-bench-restart-"))
        try:
            run(scratch, args)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    else:
        run(args.place.resolve(), args)


def run(place: Path, args: argparse.Namespace) -> None:
    if not (place / "saved" / "hours").exists():
        build(place, args.verified)
    hours = int((place / "saved" / "hours").read_text())
    sides = {"this checkout": str(HERE.parent / "src")}
    if args.baseline_src:
        sides = {"baseline": str(Path(args.baseline_src).resolve()), **sides}
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    for _ in range(args.repeat):
        for name, src in sides.items():
            figures[name].append(measure(place, hours, src))
            first, wall, startup = figures[name][-1]
            print(f"  {name}: time to new work {first:.2f} s, restart {wall:.2f} s, "
                  f"start-up {startup:.2f} s", flush=True)
    end = START + timedelta(hours=hours + NEW_HOURS)
    print(f"\nrestart over {START:%Y-%m-%d}..{end:%Y-%m-%dT%H:%M}: {hours * TASKS:,} units "
          f"verified, {NEW_HOURS * TASKS} new; medians of {args.repeat}")
    print(f"{'':<16}{'time to new work':>18}{'whole restart':>15}{'start-up':>10}")
    medians = {}
    for name, rows in figures.items():
        medians[name] = [statistics.median(column) for column in zip(*rows, strict=True)]
        first, wall, startup = medians[name]
        print(f"{name:<16}{first:>16.2f} s{wall:>13.2f} s{startup:>8.2f} s")
    if "baseline" in medians:
        ratio = medians["this checkout"][0] / medians["baseline"][0]
        print(f"time to new work, this checkout / baseline: {ratio:.2f}x")


if __name__ == "__main__":
    main()
