"""Ledger cost per attempt and per backfill interval, on SQLite and PostgreSQL.

    python bench/bench_ledger.py [--intervals 1000] [--attempts 500] [--postgres URL]

For each ledger engine (a fresh SQLite file; a scratch PostgreSQL database created on the
server at ``--postgres``, default ``$TWICE_TEST_POSTGRES_URL``, dropped afterwards):

* one attempt's bookkeeping: ``begin_attempt`` + ``record_observation`` + ``finish_attempt``
  on its own unit of work, against one committed bare ``INSERT`` of a row on the same engine
  with the ledger's durability settings (the floor for any durable write; on SQLite, WAL and
  ``synchronous = FULL``, as the ledger; the rollback-journal commit of earlier runs, about
  three times dearer, is printed beside it);
* a backfill of ``--intervals`` daily intervals of a pipeline whose only task does nothing
  (``twice.drivers.backfill.run_backfill``), its rerun (every interval verified, so skipped), and
  the same intervals through ``twice.Executor.run``, against a bare Python loop calling the same
  task function over the same intervals: total time and overhead per interval.

The time the backfill spends in its own COMMITs is printed apart: each writes a page of every
table and index the transaction touched (about 13 on SQLite), so it costs more than the bare
one-row commit, whatever the Python around it.

Also a floor under any design that keeps the ledger's rows: the unit's two transactions, each
writing the rows it writes now and committing, with no reads and no Python work around them
(SQLite: one ``executemany`` each, :func:`sqlite_floor`; PostgreSQL: one round trip each, to a
PL/pgSQL function, :func:`server_side_floor`).

Nothing is asserted: the output is a table to read. Wall clock, one run each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers.backfill import run_backfill
from twice.engine.executor import Executor
from twice.ledger import Ledger

FIRST_DAY = date(2024, 1, 1)
Results = dict[str, float | None]


def noop_pipeline() -> tuple[Pipeline, Callable[[Any], None]]:
    pipeline = Pipeline("bench_noop", schedule=Schedule.daily("UTC"))

    def noop(ctx: TaskContext) -> None:
        """Does nothing: what is measured is twice's bookkeeping around it."""

    pipeline.task(noop)
    return pipeline, noop


def intervals(pipeline: Pipeline, count: int) -> list[Interval]:
    return pipeline.schedule.intervals(FIRST_DAY, FIRST_DAY + timedelta(days=count))


def timed(action: Callable[[], Any]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def bench_engine(url: Callable[[str], str], raw_insert: Callable[[int], None],
                 args: argparse.Namespace, tag: str) -> Results:
    """All measures on one ledger engine; ``url(name)`` gives a fresh, empty ledger URL."""
    results: Results = {}
    pipeline, noop = noop_pipeline()
    spans = intervals(pipeline, args.intervals)

    results["bare INSERT + commit"] = timed(lambda: raw_insert(args.attempts)) / args.attempts
    with Ledger.open(url("attempts")) as ledger:
        units = [UnitOfWork("bench_ledger", "noop", span, "", "1")
                 for span in intervals(pipeline, args.attempts)]
        for uow in units:
            ledger.record_unit(uow)

        def attempts() -> None:
            for uow in units:
                record = ledger.begin_attempt(uow.uow_id, holder="bench")
                ledger.record_observation(uow.uow_id, "succeeded", source="bench",
                                          attempt=record.number)
                ledger.finish_attempt(uow.uow_id, record.number, "succeeded")

        results["attempt: begin+observe+finish"] = timed(attempts) / args.attempts

    def bare() -> None:
        for span in spans:
            noop(span)

    results["bare loop (total)"] = timed(bare)
    with Ledger.open(url("backfill")) as ledger:
        committing = _commit_timer(ledger)
        first = timed(lambda: _check(run_backfill(pipeline, ledger, spans), tag, "backfill"))
        results["backfill: its COMMITs per interval"] = committing() / args.intervals
        rerun = timed(lambda: _check(run_backfill(pipeline, ledger, spans), tag, "rerun"))
    with Ledger.open(url("executor")) as ledger:
        executor = Executor(pipeline, ledger, max_workers=1)
        run = timed(lambda: _check(executor.run(spans), tag, "executor"))
    results["backfill (total)"] = first
    results["backfill rerun, all verified (total)"] = rerun
    results["Executor.run (total)"] = run
    results["backfill per interval"] = first / args.intervals
    results["rerun per interval"] = rerun / args.intervals
    results["Executor.run per interval"] = run / args.intervals
    results["backfill overhead per interval"] = (first - results["bare loop (total)"]) / len(spans)
    return results


def _commit_timer(ledger: Ledger) -> Callable[[], float]:
    """Time the ledger's COMMITs from now on (its dialect's ``do_commit``); returns a function
    giving the seconds spent so far. A commit of the ledger's own transactions writes a page
    of every table and index it touched, so it costs more than the bare one-row commit."""
    dialect = ledger._session.engine.dialect
    spent = [0.0]
    commit = dialect.do_commit

    def timed_commit(dbapi_connection: Any) -> None:
        began = time.perf_counter()
        try:
            commit(dbapi_connection)
        finally:
            spent[0] += time.perf_counter() - began

    dialect.do_commit = timed_commit  # type: ignore[method-assign]
    return lambda: spent[0]


def _check(result: Any, tag: str, what: str) -> None:
    if not result.ok:
        raise RuntimeError(f"{tag} {what} did not succeed: {result.counts()}")


def bare_sqlite(path: Path, journal_mode: str) -> tuple[sqlite3.Connection, Callable[[int], None]]:
    """A raw connection in ``journal_mode`` with ``synchronous = FULL`` (every commit durable)
    and ``insert(count)``: that many one-row INSERT + COMMIT transactions."""
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute(f"PRAGMA journal_mode = {journal_mode}")
    raw.execute("PRAGMA synchronous = FULL")
    raw.execute("CREATE TABLE raw (id INTEGER, payload TEXT)")

    def insert(count: int) -> None:
        for i in range(count):
            raw.execute("BEGIN")
            raw.execute("INSERT INTO raw VALUES (?, ?)", (i, "attempt"))
            raw.execute("COMMIT")

    return raw, insert


#: The bare commit under SQLite's default rollback journal, which the ledger does not use: the
#: baseline of the runs before 2026-12-05 11:00 UTC, kept to compare with them.
ROLLBACK_BARE = "bare INSERT + commit (rollback journal)"


def bench_sqlite(args: argparse.Namespace, workdir: Path) -> Results:
    """The bare commit is made with the ledger's own settings (``twice.ledger.engine``: WAL,
    ``synchronous = FULL``), so both sides pay the same durability."""
    raw, insert = bare_sqlite(workdir / "raw.db", "WAL")
    rollback, rollback_insert = bare_sqlite(workdir / "raw-rollback.db", "DELETE")
    try:
        results = bench_engine(lambda name: f"sqlite:///{workdir / (name + '.db')}", insert,
                               args, "sqlite")
        results[ROLLBACK_BARE] = timed(lambda: rollback_insert(args.attempts)) / args.attempts
        results[FLOOR] = sqlite_floor(raw, args.attempts)
        return results
    finally:
        raw.close()
        rollback.close()


@contextmanager
def scratch_databases(admin_url: str) -> Iterator[Callable[[str], str]]:
    """``url(name)`` creates a scratch database per name; all are dropped at the end."""
    import psycopg

    admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
    base = admin_url.rsplit("/", 1)[0]
    created: list[str] = []

    def url(name: str) -> str:
        db = f"twice_bench_{name}_{uuid.uuid4().hex[:8]}"
        admin.execute(f'CREATE DATABASE "{db}"')
        created.append(db)
        return f"{base}/{db}"

    try:
        yield url
    finally:
        for db in created:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.close()


def bench_postgres(args: argparse.Namespace) -> Results:
    import psycopg

    with scratch_databases(args.postgres) as url:
        raw = psycopg.connect(url("raw"), autocommit=True)
        raw.execute("CREATE TABLE raw (id bigint, payload text)")

        def insert(count: int) -> None:
            for i in range(count):
                raw.execute("INSERT INTO raw VALUES (%s, %s)", (i, "attempt"))

        try:
            results = bench_engine(url, insert, args, "postgresql")
            results[FLOOR] = server_side_floor(raw, args.attempts)
            return results
        finally:
            raw.close()


#: The rows a successful unit writes in each of its two transactions (claim and begin; finish,
#: verify and release): events, the unit, lease, generation, attempt, observations.
UNIT_WRITES = (9, 7)
FLOOR = "floor: 2 transactions, their rows, no Python"


def sqlite_floor(raw: sqlite3.Connection, count: int) -> float:
    """The same floor on SQLite: each of the unit's two transactions writes its rows
    (journal-shaped, indexed) with one ``executemany`` and commits, in the ledger's WAL mode.
    No reads, no Python work beyond the driver call."""
    raw.execute("CREATE TABLE unit_rows (seq INTEGER PRIMARY KEY, uow_id TEXT, kind TEXT, "
                "at TEXT, summary TEXT, data TEXT)")
    raw.execute("CREATE INDEX unit_rows_uow ON unit_rows (uow_id, seq)")
    insert = ("INSERT INTO unit_rows (uow_id, kind, at, summary, data) VALUES "
              "(?, 'attempt-started', '2024-01-01T00:00:00+00:00', "
              "'attempt 1 started by bench-holder', "
              "'{\"attempt\": 1, \"holder\": \"bench-holder\", \"generation\": 1}')")

    def units() -> None:
        for i in range(count):
            for rows in UNIT_WRITES:
                raw.execute("BEGIN IMMEDIATE")
                raw.executemany(insert, [(f"uow-{i}",)] * rows)
                raw.execute("COMMIT")

    return timed(units) / count


def server_side_floor(raw: Any, count: int) -> float:
    """What a unit's bookkeeping would cost on PostgreSQL if each of its two transactions were
    ONE round trip: a PL/pgSQL function writing that transaction's rows (journal-shaped: text
    and JSON, an index), committed. No reads, no Python work: a floor under any design that
    keeps the rows the ledger keeps now."""
    raw.execute("CREATE TABLE unit_rows (seq bigserial PRIMARY KEY, uow_id text, kind text, "
                "at timestamptz, summary text, data text)")
    raw.execute("CREATE INDEX ON unit_rows (uow_id, seq)")
    raw.execute("""
        CREATE FUNCTION unit_tx(uow text, n int) RETURNS int LANGUAGE plpgsql AS $$
        BEGIN
          FOR i IN 1..n LOOP
            INSERT INTO unit_rows (uow_id, kind, at, summary, data)
            VALUES (uow, 'attempt-started', now(), 'attempt 1 started by bench-holder',
                    '{"attempt": 1, "holder": "bench-holder", "generation": 1}');
          END LOOP;
          RETURN n;
        END $$""")

    def units() -> None:
        for i in range(count):
            for rows in UNIT_WRITES:
                raw.execute("SELECT unit_tx(%s, %s)", (f"uow-{i}", rows))

    return timed(units) / count


RATIOS = [
    ("backfill per interval / bare commit (goal <= 4)", "backfill per interval",
     "bare INSERT + commit"),
    ("same, against the rollback-journal commit (before)", "backfill per interval",
     ROLLBACK_BARE),
    ("floor (2 transactions, no Python) / bare commit", FLOOR, "bare INSERT + commit"),
    ("backfill's own COMMITs / bare commit", "backfill: its COMMITs per interval",
     "bare INSERT + commit"),
    ("attempt / bare INSERT + commit", "attempt: begin+observe+finish", "bare INSERT + commit"),
    ("backfill per interval / attempt", "backfill per interval", "attempt: begin+observe+finish"),
    ("Executor.run / backfill", "Executor.run (total)", "backfill (total)"),
    ("rerun (verified) / backfill", "backfill rerun, all verified (total)", "backfill (total)"),
    ("backfill / bare loop", "backfill (total)", "bare loop (total)"),
]


def report(args: argparse.Namespace, columns: dict[str, Results | str]) -> None:
    names = list(columns)
    width = 50
    print(f"\nledger benchmark: {args.attempts} attempts, {args.intervals}-interval backfill "
          "of a no-op task; milliseconds (wall clock, one run)\n")
    print("".ljust(width) + "".join(n.rjust(14) for n in names))
    measures = list(next((c for c in columns.values() if isinstance(c, dict)), {}))
    for measure in measures:
        cells = []
        for n in names:
            column = columns[n]
            value = None if isinstance(column, str) else column.get(measure)
            text = "skipped" if isinstance(column, str) else (
                "n/a" if value is None else f"{value * 1000:.3f}")
            cells.append(text.rjust(14))
        print(measure.ljust(width) + "".join(cells))
    print("\nratios (x)\n")
    for label, top, bottom in RATIOS:
        cells = []
        for n in names:
            column = columns[n]
            if isinstance(column, str):
                cells.append("skipped".rjust(14))
                continue
            a, b = column.get(top), column.get(bottom)
            cells.append(("n/a" if a is None or not b else f"{a / b:,.1f}").rjust(14))
        print(label.ljust(width) + "".join(cells))
    for n in names:
        if isinstance(columns[n], str):
            print(f"\n{n}: {columns[n]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=int, default=1000)
    parser.add_argument("--attempts", type=int, default=500)
    parser.add_argument("--postgres", default=os.environ.get("TWICE_TEST_POSTGRES_URL"),
                        help="admin URL of a PostgreSQL server (scratch databases are created)")
    args = parser.parse_args(argv)
    for name in ("intervals", "attempts"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    workdir = Path(tempfile.mkdtemp(prefix="twice-bench-ledger-"))
    columns: dict[str, Results | str] = {}
    try:
        columns["sqlite"] = bench_sqlite(args, workdir)
        if not args.postgres:
            columns["postgresql"] = "no --postgres URL and TWICE_TEST_POSTGRES_URL unset"
        else:
            try:
                columns["postgresql"] = bench_postgres(args)
            except Exception as exc:  # report it, keep the SQLite column
                import psycopg

                first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                why = ("unreachable" if isinstance(exc, psycopg.OperationalError)
                       else f"failed ({type(exc).__name__})")
                columns["postgresql"] = f"{why}: {first}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(args, columns)


if __name__ == "__main__":
    main()
