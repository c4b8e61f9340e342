"""Backfill bookkeeping: durable ledger transactions and reads per successful unit (issue 23).

A unit that runs once and succeeds is claimed and begun in one write transaction and finished,
verified (its partition's fingerprint recorded) and released in another: the floor the issue
names. The reads are a fixed number per unit whatever the size of the range. Counted with
SQLAlchemy's engine events on the ledger's own engine, so a change that adds a commit or a
per-unit scan fails here, not only in bench/.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.drivers.backfill import run_backfill
from twice.ledger import Ledger

FIRST_DAY = date(2024, 1, 1)
WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


@dataclass
class Tally:
    """Transactions that wrote, transactions that only read, and statements that read rows."""

    writes: int = 0
    reads: int = 0
    selects: int = 0
    statements: int = 0  # on PostgreSQL, a round trip each (BEGIN and COMMIT aside)
    tables: Counter[str] = field(default_factory=Counter)
    scans: list[str] = field(default_factory=list)  # unit lists read without a unit's key


@contextmanager
def counting(ledger: Ledger) -> Iterator[Tally]:
    """Count the ledger's committed transactions and SELECTs while the block runs."""
    engine = ledger._session.engine
    tally = Tally()
    wrote: dict[int, bool] = {}

    def on_begin(conn: Any) -> None:
        wrote[id(conn)] = False

    def on_execute(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        tally.statements += not statement.lstrip().upper().startswith("BEGIN")
        if WRITE.match(statement) or statement.lstrip().upper().startswith("WITH"):
            wrote[id(conn)] = True
        elif statement.lstrip().upper().startswith("SELECT"):
            tally.selects += 1
            found = re.search(r"FROM (\w+)", statement)
            table = found.group(1) if found else "?"
            tally.tables[table] += 1
            if table == "twice_units_of_work" and not re.search(
                r"\.(uow_id|interval_start_utc) = ", statement
            ):
                tally.scans.append(statement)

    def on_commit(conn: Any) -> None:
        if wrote.pop(id(conn), False):
            tally.writes += 1
        else:
            tally.reads += 1

    listeners = [("begin", on_begin), ("before_cursor_execute", on_execute),
                 ("commit", on_commit)]
    for name, fn in listeners:
        event.listen(engine, name, fn)
    try:
        yield tally
    finally:
        for name, fn in listeners:
            event.remove(engine, name, fn)


def noop_pipeline() -> Pipeline:
    pipeline = Pipeline("bookkeeping", schedule=Schedule.daily("UTC"))

    def noop(ctx: TaskContext) -> None:
        """Does nothing: what is counted is the bookkeeping around it."""

    pipeline.task(noop)
    return pipeline


def owned_pipeline(warehouse: Path) -> Pipeline:
    """One task whose output twice writes (replace the interval's slice) and fingerprints."""
    pipeline = Pipeline("bookkeeping_owned", schedule=Schedule.daily("UTC"))
    destination = f"sqlite:///{warehouse}?partition_column=day#daily"

    @pipeline.task(destination=destination, write="replace")
    def daily(ctx: TaskContext) -> list[dict[str, Any]]:
        day = ctx.interval.start.date()
        return [{"day": day, "n": i, "value": i * 1.5} for i in range(3)]

    return pipeline


def spans(pipeline: Pipeline, first: int, count: int) -> list[Any]:
    start = FIRST_DAY + timedelta(days=first)
    return pipeline.schedule.intervals(start, start + timedelta(days=count))


def per_unit(ledger: Ledger, pipeline: Pipeline, first: int, count: int) -> Tally:
    """Backfill ``count`` fresh intervals; every unit must succeed once."""
    with counting(ledger) as tally:
        result = run_backfill(pipeline, ledger, spans(pipeline, first, count))
    assert result.ok, result.counts()
    assert [r.status for r in result.runs] == ["succeeded"] * count
    return tally


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_a_successful_unit_costs_two_durable_transactions(ledger_url: str) -> None:
    pipeline = noop_pipeline()
    with Ledger.open(ledger_url) as ledger:
        per_unit(ledger, pipeline, 0, 2)  # the ledger's first writes (counters, schema) aside
        tally = per_unit(ledger, pipeline, 10, 12)
    assert tally.writes == 2 * 12, tally


def test_an_owned_write_is_verified_in_the_finishing_transaction(
    ledger_url: str, tmp_path: Path
) -> None:
    """The partition's fingerprint is recorded with the attempt's outcome, not on its own."""
    pipeline = owned_pipeline(tmp_path / "warehouse.db")
    with Ledger.open(ledger_url) as ledger:
        per_unit(ledger, pipeline, 0, 2)
        tally = per_unit(ledger, pipeline, 10, 12)
        versions = [ledger.latest_fingerprint(f"sqlite:///{tmp_path / 'warehouse.db'}"
                                              "?partition_column=day#daily", span.label)
                    for span in spans(pipeline, 10, 12)]
    assert tally.writes == 2 * 12, tally
    assert [v.version if v else None for v in versions] == [1] * 12
    assert all(v is not None and v.row_count == 3 for v in versions)


def test_reads_per_unit_do_not_grow_with_the_range(tmp_path: Path) -> None:
    """Each further unit costs the same reads whatever the size of the range, and no unit
    reads the list of units (a scan that grows with the ledger): only the plan does, once."""
    pipeline = noop_pipeline()
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        per_unit(ledger, pipeline, 0, 2)
        four = per_unit(ledger, pipeline, 10, 4)
        eight = per_unit(ledger, pipeline, 20, 8)
        forty = per_unit(ledger, pipeline, 100, 40)
    each = (eight.selects - four.selects) / 4
    assert forty.selects - eight.selects == each * 32, (four, eight, forty)
    assert each <= 8, eight  # today's count: a new per-unit read must be argued for
    assert len(forty.scans) == len(four.scans), forty.scans


def test_a_unit_reads_only_inside_its_two_transactions(ledger_url: str) -> None:
    """No read transaction of its own per unit: the engine reads what it plans on inside the
    claim and the finish, and the backfill describes each run from what the engine read
    (``UnitResult.history``), so only the plan's one read of the range's units remains."""
    pipeline = noop_pipeline()
    with Ledger.open(ledger_url) as ledger:
        per_unit(ledger, pipeline, 0, 2)
        four = per_unit(ledger, pipeline, 10, 4)
        twelve = per_unit(ledger, pipeline, 20, 12)
    assert twelve.reads == four.reads, (four, twelve)


def test_on_postgresql_an_event_and_its_detail_row_are_one_statement(
        postgres_url: str, tmp_path: Path) -> None:
    """Every statement is a round trip to a PostgreSQL server. There, journaling an event and
    writing the row that carries its ``seq`` (a unit recorded, an observation, an attempt
    begun or finished, a job generation taken or marked) is one statement, a data-modifying
    CTE, and a new lease and an attempt each draw their fencing token in their own INSERT. A
    no-op unit makes 9 fewer statements than on SQLite, where these cost no round trip."""
    pipeline = noop_pipeline()
    counted = {}
    for engine, url in (("sqlite", f"sqlite:///{tmp_path / 'ledger.db'}"),
                        ("postgresql", postgres_url)):
        with Ledger.open(url) as ledger:
            per_unit(ledger, pipeline, 0, 2)
            counted[engine] = per_unit(ledger, pipeline, 10, 5).statements / 5
    assert counted["postgresql"] == counted["sqlite"] - 9, counted
    assert counted["postgresql"] <= 18.5, counted  # the plan's one read, shared by 5 units


def test_an_owned_unit_reads_its_unit_and_attempt_rows_once_each_to_finish(
        postgres_url: str, tmp_path: Path) -> None:
    """Recording the slice's fingerprint locks the unit and its attempt; marking the job
    generation and ending the attempt, later in the same finishing transaction, find both
    held and read neither again (a PostgreSQL round trip each). The claim's reads and the
    plan's reads after the success are counted too: what is asserted is today's count
    (before: 3.2 reads of the unit and 4 of its attempts a unit)."""
    pipeline = owned_pipeline(tmp_path / "warehouse.db")
    with Ledger.open(postgres_url) as ledger:
        per_unit(ledger, pipeline, 0, 2)
        tally = per_unit(ledger, pipeline, 10, 5)
    units = tally.tables["twice_units_of_work"] / 5
    attempts = tally.tables["twice_attempts"] / 5
    assert units <= 2.2, tally.tables
    assert attempts <= 3.0, tally.tables


def test_a_unit_reads_its_partitions_last_version_once_and_no_unrecorded_errors(
        ledger_url: str, tmp_path: Path) -> None:
    """Finishing an owned unit reads the slice's last fingerprint once, under the partition's
    lock (it numbers the next version and is the diff's "before"), and does not read the
    non-fatal errors of an attempt this process ran and recorded none for. A backfill reads
    the last version once more before the write, to see drift (before: three reads of the
    fingerprints and one of the errors a unit)."""
    pipeline = owned_pipeline(tmp_path / "warehouse.db")
    with Ledger.open(ledger_url) as ledger:
        per_unit(ledger, pipeline, 0, 2)
        tally = per_unit(ledger, pipeline, 10, 5)
    assert tally.tables["twice_fingerprints"] <= 2 * 5 + 1, tally.tables  # + the plan's read
    assert tally.tables["twice_nonfatal_errors"] == 0, tally.tables


def test_every_statement_of_a_unit_runs_as_its_compiled_string(
        ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The statements a unit's claim and finish run are built once and run as the SQL string
    compiled for them (``twice.ledger.prepared``); one that SQLAlchemy has to render on each
    execution (an expanding ``IN``, a default computed per row) falls back to
    ``Connection.execute``, several times the cost: none of a unit's may."""
    from twice.ledger import prepared

    pipeline = owned_pipeline(tmp_path / "warehouse.db")
    fallbacks: list[str] = []
    through = prepared._through_sqlalchemy

    def spy(conn: Any, statement: Any, params: Any) -> Any:
        if statement in prepared._BUILT:
            fallbacks.append(str(statement))
        return through(conn, statement, params)

    with Ledger.open(ledger_url) as ledger:
        per_unit(ledger, pipeline, 0, 2)
        monkeypatch.setattr(prepared, "_through_sqlalchemy", spy)
        per_unit(ledger, pipeline, 10, 3)
    assert fallbacks == []
