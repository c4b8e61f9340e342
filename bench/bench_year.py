"""A year of hourly units (issue 38): ``twice backfill`` of 3 hourly tasks over 8,760 hours.

    python bench/bench_year.py [--months 1,3,12] [--verified 20000] [--engines sqlite,postgresql]
                               [--postgres URL]
    python bench/bench_year.py --hours 4,8 --verified 12     # a tiny smoke run

The pipeline is ``bench/year_pipeline.py``: ``readings`` and ``prices`` (independent, 4 and 3
rows an hour) and ``summary`` (depends on both, reads their slices, 2 rows), every one an owned
``replace`` write. Each engine column is one ledger and its destination: ``sqlite`` is a SQLite
ledger file and an embedded SQLite destination file; ``postgresql`` a PostgreSQL ledger and a
PostgreSQL destination, each a scratch database created on the server at ``--postgres``
(default ``$TWICE_TEST_POSTGRES_URL``) and dropped afterwards.

Every measure is the real command (``python -m twice backfill ... --yes``, output to a file) in
a fresh process, started from a fresh ledger and destination for each size:

* each size but the largest (``--months``: calendar months from 2025-01-01; ``--hours``: exact
  hour counts instead): one backfill of the whole range, end to end;
* the largest size in two runs, as a restart: first the first ``--verified`` units (their hours
  x 3), then the whole range again. The restart's *time to new work* is from the process's start
  to the ``started_at`` of the first attempt it began (read from the ledger); the largest size's
  end-to-end time is the sum of both runs (its per-unit time counts every unit of the range);
* then a no-op rerun of the whole largest range (every unit verified).

twice's bytecode is written first (``compile_sources``), as an installed package has it.
Peak memory is each process's maximum RSS (``os.wait4``); the largest size's figure is the
restart's (it plans and reports the whole range) and the no-op rerun's. The tasks' own time is
measured inside the task bodies (``year_pipeline``'s ``task-seconds`` file) and printed next to
the end-to-end time. Nothing is asserted; goals (issue 38) are printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
PIPELINE = HERE / "year_pipeline.py"
START = datetime(2025, 1, 1, tzinfo=UTC)
TASKS = 3
RESTART_GOAL, NOOP_GOAL, MEMORY_GOAL = 3.0, 30.0, 1.5  # s, s, x the smallest size's peak RSS
SUMMARY = re.compile(r"backfill bench_year: (\d+) intervals, (.*) in ([\d.]+) s")


@dataclass
class Run:
    """One ``twice backfill`` process."""

    hours: int
    wall: float  # seconds, process start to exit
    rss_mb: float  # peak resident set size
    task_s: float  # seconds inside the task bodies
    counts: str  # "26280 succeeded", "20000 skipped, 6280 succeeded"
    first_new: float | None = None  # seconds from process start to its first new attempt

    @property
    def units(self) -> int:
        return self.hours * TASKS


@dataclass
class Column:
    """Every measure on one engine."""

    runs: dict[int, Run] = field(default_factory=dict)  # fresh runs, by hours
    first_part: Run | None = None
    restart: Run | None = None
    noop: Run | None = None
    floor: Run | None = None  # a no-op backfill of one hour: the command's start-up


def compile_sources(src: str | Path) -> None:
    """Write the bytecode of ``src``'s modules, as ``pip install`` does, before any process is
    timed: with ``PYTHONDONTWRITEBYTECODE`` set (as on the machine these figures come from), an
    editable checkout would otherwise compile its own modules from source in every process
    (about 0.1 s of each start-up)."""
    import compileall

    compileall.compile_dir(str(src), quiet=1)


def months_to_hours(months: int) -> int:
    year, month = divmod(months, 12)
    end = START.replace(year=START.year + year, month=month + 1)
    return int((end - START) / timedelta(hours=1))


def backfill(hours: int, workdir: Path, ledger: str, dest: str, *, first_hour: int = 0,
             ledger_reader: Callable[[datetime], float | None] | None = None) -> Run:
    """Run ``twice backfill`` over ``hours`` hours from START (+ ``first_hour``)."""
    start = START + timedelta(hours=first_hour)
    end = start + timedelta(hours=hours)
    command = [sys.executable, "-m", "twice", "backfill", str(PIPELINE),
               "--start", start.isoformat(), "--end", end.isoformat(), "--yes",
               "--ledger", ledger]
    env = {**os.environ, "TWICE_BENCH_WORKDIR": str(workdir), "TWICE_BENCH_YEAR_DEST": dest}
    env.pop("COLUMNS", None)
    out = workdir / "backfill-output.txt"
    with out.open("w") as sink:
        began_at = datetime.now(UTC)
        began = time.perf_counter()
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
    text = out.read_text()
    found = SUMMARY.search(text)
    if proc.returncode or found is None:
        raise SystemExit(f"twice backfill failed (exit {proc.returncode}): {' '.join(command)}"
                         f"\n{text[-2000:]}")
    seconds = workdir / f"task-seconds-{proc.pid}"
    task_s = float(seconds.read_text()) if seconds.exists() else 0.0
    first_new = ledger_reader(began_at) if ledger_reader is not None else None
    return Run(hours, wall, usage.ru_maxrss / 1024, task_s, found.group(2), first_new)


def first_attempt_after(ledger_url: str) -> Callable[[datetime], float | None]:
    """Seconds from ``since`` to the first attempt the ledger shows started after it."""
    def read(since: datetime) -> float | None:
        from sqlalchemy import create_engine, func, select

        from twice.ledger.schema import attempts

        engine = create_engine(ledger_url)
        try:
            with engine.connect() as conn:
                first = conn.execute(select(func.min(attempts.c.started_at))
                                     .where(attempts.c.started_at >= since)).scalar()
        finally:
            engine.dispose()
        return None if first is None else (first - since).total_seconds()
    return read


@contextmanager
def sqlite_place(workdir: Path) -> Iterator[Callable[[str], tuple[Path, str, str]]]:
    """``place(name)``: a fresh folder, its SQLite ledger URL and the destination keyword."""
    def place(name: str) -> tuple[Path, str, str]:
        folder = workdir / f"sqlite-{name}"
        folder.mkdir()
        return folder, f"sqlite:///{folder / 'ledger.db'}", "sqlite"
    yield place


@contextmanager
def postgres_place(workdir: Path, admin: str) -> Iterator[Callable[[str], tuple[Path, str, str]]]:
    """``place(name)``: a fresh folder, a scratch PostgreSQL ledger and destination database."""
    sys.path.insert(0, str(HERE))
    from bench_ledger import scratch_databases

    with scratch_databases(admin) as url:
        def place(name: str) -> tuple[Path, str, str]:
            folder = workdir / f"postgresql-{name}"
            folder.mkdir()
            return folder, url(f"year_ledger_{name}"), url(f"year_dest_{name}")
        yield place


def measure(place: Callable[[str], tuple[Path, str, str]], sizes: list[int], verified: int,
            tag: str) -> Column:
    column = Column()
    *smaller, largest = sizes
    for hours in smaller:
        folder, ledger, dest = place(f"h{hours}")
        column.runs[hours] = progress(tag, f"{hours:,} hours",
                                      backfill(hours, folder, ledger, dest))
    folder, ledger, dest = place(f"h{largest}")
    done_hours = min(max(verified // TASKS, 1), largest - 1)
    column.first_part = progress(tag, f"first {done_hours:,} hours",
                                 backfill(done_hours, folder, ledger, dest))
    column.restart = progress(tag, f"restart over {largest:,} hours",
                              backfill(largest, folder, ledger, dest,
                                       ledger_reader=first_attempt_after(ledger)))
    column.noop = progress(tag, "no-op rerun", backfill(largest, folder, ledger, dest))
    column.floor = progress(tag, "no-op of 1 hour (start-up)", backfill(1, folder, ledger, dest))
    return column


def progress(tag: str, what: str, run: Run) -> Run:
    """Print one finished run as it ends (a long run's figures survive an interruption)."""
    print(f"  {tag}: {what}: {run.wall:.1f} s, peak RSS {run.rss_mb:.0f} MB, task time "
          f"{run.task_s:.1f} s, {run.counts}"
          + ("" if run.first_new is None else f", first new attempt at {run.first_new:.2f} s"),
          flush=True)
    return run


def report(columns: dict[str, Column | str], sizes: list[int], verified: int) -> None:
    largest = sizes[-1]
    print(f"\nyear-of-hourly-units benchmark: twice backfill, {TASKS} hourly tasks, "
          f"sizes {', '.join(f'{h:,} h' for h in sizes)}; restart after "
          f"{min(max(verified // TASKS, 1), largest - 1) * TASKS:,} units verified\n")
    head = f"{'':<44}" + "".join(f"{name:>22}" for name in columns)
    print(head)

    def row(label: str, cell: Callable[[Column], str]) -> None:
        cells = [cell(c) if isinstance(c, Column) else "skipped" for c in columns.values()]
        print(f"{label:<44}" + "".join(f"{text:>22}" for text in cells))

    for hours in sizes[:-1]:
        units = hours * TASKS
        row(f"{units:,} units: end to end", lambda c, h=hours: f"{c.runs[h].wall:.1f} s")
        row("  per unit (task's own time)", lambda c, h=hours: (
            f"{c.runs[h].wall / (h * TASKS) * 1e3:.1f} ms "
            f"({c.runs[h].task_s / (h * TASKS) * 1e3:.1f} ms)"))
        row("  peak RSS", lambda c, h=hours: f"{c.runs[h].rss_mb:.0f} MB")

    def whole(c: Column) -> float:
        assert c.first_part is not None and c.restart is not None
        return c.first_part.wall + c.restart.wall

    def task_time(c: Column) -> float:
        assert c.first_part is not None and c.restart is not None
        return c.first_part.task_s + c.restart.task_s

    units = largest * TASKS
    row(f"{units:,} units: end to end (2 runs)", lambda c: f"{whole(c):.1f} s")
    row("  per unit (task's own time)", lambda c: (
        f"{whole(c) / units * 1e3:.1f} ms ({task_time(c) / units * 1e3:.1f} ms)"))
    row("  first run: units, wall", lambda c: (
        f"{c.first_part.units:,}, {c.first_part.wall:.1f} s" if c.first_part else ""))
    row("  restart: wall", lambda c: f"{c.restart.wall:.1f} s" if c.restart else "")
    row(f"  restart: time to new work (goal {RESTART_GOAL:.0f} s)", lambda c: (
        "none" if c.restart is None or c.restart.first_new is None
        else f"{c.restart.first_new:.2f} s"))
    row("  start-up: no-op backfill of 1 hour", lambda c: (
        f"{c.floor.wall:.2f} s" if c.floor else ""))
    row("  restart: peak RSS", lambda c: f"{c.restart.rss_mb:.0f} MB" if c.restart else "")
    row(f"no-op rerun of {units:,} units (goal {NOOP_GOAL:.0f} s)",
        lambda c: f"{c.noop.wall:.1f} s" if c.noop else "")
    row("  per unit", lambda c: f"{c.noop.wall / units * 1e3:.2f} ms" if c.noop else "")
    row("  peak RSS", lambda c: f"{c.noop.rss_mb:.0f} MB" if c.noop else "")

    def ratio(c: Column) -> str:
        base = c.runs[sizes[0]].rss_mb if len(sizes) > 1 else None
        peak = max(c.restart.rss_mb if c.restart else 0.0, c.noop.rss_mb if c.noop else 0.0)
        return "n/a" if base is None else f"{peak / base:.2f}x"

    row(f"peak RSS, largest / smallest (goal {MEMORY_GOAL}x)", ratio)
    for name, column in columns.items():
        if isinstance(column, str):
            print(f"\n{name}: {column}")
        else:
            states = [("first run", column.first_part), ("restart", column.restart),
                      ("no-op", column.noop)]
            print(f"\n{name} outcomes: " + "; ".join(
                f"{what}: {run.counts}" for what, run in states if run is not None))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--months", default="1,3,12",
                        help="comma-separated sizes in calendar months from 2025-01-01")
    parser.add_argument("--hours", default=None,
                        help="comma-separated sizes in hours (instead of --months)")
    parser.add_argument("--verified", type=int, default=20_000,
                        help="units verified before the restart over the largest size")
    parser.add_argument("--engines", default="sqlite,postgresql",
                        help="comma-separated subset of: sqlite, postgresql")
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"),
                        help="admin URL of a PostgreSQL server (scratch databases are created)")
    args = parser.parse_args(argv)
    if args.hours:
        sizes = sorted({int(h) for h in args.hours.split(",") if h.strip()})
    else:
        sizes = sorted({months_to_hours(int(m)) for m in args.months.split(",") if m.strip()})
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not sizes or sizes[0] < 2 or args.verified < TASKS:
        parser.error("sizes must be >= 2 hours and --verified >= 3")
    compile_sources(HERE.parent / "src")
    if set(engines) - {"sqlite", "postgresql"}:
        parser.error("--engines: choose from sqlite, postgresql")
    workdir = Path(tempfile.mkdtemp(prefix="twice-bench-year-"))
    columns: dict[str, Column | str] = {}
    try:
        if "sqlite" in engines:
            with sqlite_place(workdir) as place:
                columns["sqlite"] = measure(place, sizes, args.verified, "sqlite")
        if "postgresql" in engines:
            if not args.postgres:
                columns["postgresql"] = "no --postgres URL and TWICE_TEST_POSTGRES_URL unset"
            else:
                try:
                    with postgres_place(workdir, args.postgres) as place:
                        columns["postgresql"] = measure(place, sizes, args.verified,
                                                        "postgresql")
                except Exception as exc:  # an unreachable server: say so, measure the rest
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    why = ("unreachable" if "connect" in first.lower() else "failed")
                    columns["postgresql"] = f"{why}: {type(exc).__name__}: {first}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(columns, sizes, args.verified)


if __name__ == "__main__":
    main()
