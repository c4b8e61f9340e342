"""Restart to new work over many verified units (issue 38), repeatable and like for like.

    python bench/bench_restart.py --place DIR --verified 20000            # build once, measure
    python bench/bench_restart.py --place DIR --repeat 3 --baseline-src OLD/src
    python bench/bench_restart.py --verified 6 --repeat 1                 # a scratch place
    python bench/bench_restart.py --engine postgresql --place DIR --verified 20000


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

``--engine postgresql`` does the same with a PostgreSQL ledger and destination on the server at
``--postgres`` (default ``$TWICE_TEST_POSTGRES_URL``): two databases named after ``DIR``, saved
as template databases and re-created from them for every measure. They stay on the server with
``--place`` (to measure again later) and are dropped with a scratch place.

``--baseline-src`` names another checkout's ``src`` (e.g. ``git worktree add /tmp/before
COMMIT``): each repeat measures it and this checkout in turn, in the same run, and the report
prints the medians and their ratio. Each side's bytecode is written first, as an installed
package has it (``bench_year.compile_sources``). Nothing is asserted.
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

from bench_year import START, TASKS, backfill, compile_sources, first_attempt_after  # noqa: E402

NEW_HOURS = 24  # new work after the verified hours: one day of hourly units
FILES = ("ledger.db", "year.db")


class Engine:
    """Where the ledger and the destination live, and how they are saved and restored."""

    def __init__(self, place: Path) -> None:
        self.place = place

    def ledger_url(self) -> str:
        return f"sqlite:///{self.place / 'ledger.db'}"

    def destination(self) -> str:
        return "sqlite"

    def save(self) -> None:
        (self.place / "saved").mkdir(exist_ok=True)
        for name in FILES:
            shutil.copy2(self.place / name, self.place / "saved" / name)

    def restore(self) -> None:
        for name in FILES:
            shutil.copy2(self.place / "saved" / name, self.place / name)

    def drop(self) -> None:
        """Nothing outside the place."""


class Postgres(Engine):
    """Two databases named after the place; ``save`` keeps each as a template database."""

    def __init__(self, place: Path, admin_url: str) -> None:
        super().__init__(place)
        import hashlib

        import psycopg

        self.admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
        self.base = admin_url.rsplit("/", 1)[0]
        tag = hashlib.sha256(str(place).encode()).hexdigest()[:8]
        self.names = (f"twice_restart_ledger_{tag}", f"twice_restart_dest_{tag}")
        for name in self.names:
            if not self.admin.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                      (name,)).fetchone():
                self.admin.execute(f'CREATE DATABASE "{name}"')

    def ledger_url(self) -> str:
        return f"{self.base}/{self.names[0]}"

    def destination(self) -> str:
        return f"{self.base}/{self.names[1]}"

    def save(self) -> None:
        (self.place / "saved").mkdir(exist_ok=True)
        for name in self.names:
            self.admin.execute(f'DROP DATABASE IF EXISTS "{name}_saved"')
            self.admin.execute(f'CREATE DATABASE "{name}_saved" TEMPLATE "{name}"')

    def restore(self) -> None:
        for name in self.names:
            self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            self.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{name}_saved"')
        self.admin.execute("CHECKPOINT")

    def drop(self) -> None:
        for name in self.names:
            for db in (name, f"{name}_saved"):
                self.admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def build(engine: Engine, verified: int) -> None:
    """The first run: ``verified`` units (their hours x 3), saved in ``place/saved``."""
    place = engine.place
    hours = max(verified // TASKS, 1)
    place.mkdir(parents=True, exist_ok=True)
    print(f"building: first {hours:,} hours ({hours * TASKS:,} units) in {place}", flush=True)
    run = backfill(hours, place, engine.ledger_url(), engine.destination())
    print(f"  {run.wall:.1f} s, {run.counts}", flush=True)
    engine.save()
    (place / "saved" / "hours").write_text(f"{hours}\n")


def restore(engine: Engine) -> None:
    engine.restore()
    for stale in engine.place.glob("task-seconds-*"):
        stale.unlink()
    os.sync()  # the copy's writeback must not land inside the measure
    time.sleep(1)


def measure(engine: Engine, hours: int, src: str | None) -> tuple[float, float, float]:
    """(time to new work, whole restart, start-up) with ``src`` first on the path."""
    saved = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        place, ledger, destination = engine.place, engine.ledger_url(), engine.destination()
        restore(engine)
        restart = backfill(hours + NEW_HOURS, place, ledger, destination,
                           ledger_reader=first_attempt_after(ledger))
        restore(engine)
        began = time.perf_counter()
        backfill(1, place, ledger, destination)
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
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite",
                        help="ledger and destination (default: SQLite files)")
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"),
                        help="an administrator URL of the server, for --engine postgresql")
    args = parser.parse_args(argv)
    if args.engine == "postgresql" and not args.postgres:
        parser.error("--engine postgresql needs --postgres or $TWICE_TEST_POSTGRES_URL")
    if args.place is None:
        scratch = Path(tempfile.mkdtemp(prefix="twice-bench-restart-"))
        engine = engine_at(scratch, args)
        try:
            run(engine, args)
        finally:
            engine.drop()
            shutil.rmtree(scratch, ignore_errors=True)
    else:
        run(engine_at(args.place.resolve(), args), args)


def engine_at(place: Path, args: argparse.Namespace) -> Engine:
    return Engine(place) if args.engine == "sqlite" else Postgres(place, args.postgres)


def run(engine: Engine, args: argparse.Namespace) -> None:
    if not (engine.place / "saved" / "hours").exists():
        build(engine, args.verified)
    place = engine.place
    hours = int((place / "saved" / "hours").read_text())
    sides = {"this checkout": str(HERE.parent / "src")}
    if args.baseline_src:
        sides = {"baseline": str(Path(args.baseline_src).resolve()), **sides}
    for src in sides.values():
        compile_sources(src)
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    for _ in range(args.repeat):
        for name, src in sides.items():
            figures[name].append(measure(engine, hours, src))
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
