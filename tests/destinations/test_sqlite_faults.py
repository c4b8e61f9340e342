"""An embedded destination's machinery faults are typed destination errors, named for what
they are, never a raw driver traceback (issue 39, machinery faults tried as an adversary
would): a SQLite destination locked by another process made `twice backfill --force` print
``sqlite3.OperationalError: database is locked`` from its schema check, and a full disk was
reported as "cannot rollback - no transaction is active", the disk nowhere in it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from click.testing import CliRunner
from dest_helpers import day_interval

from twice.cli import cli
from twice.destinations import DestinationUnavailableError, open_destination
from twice.destinations import sqlite as sqlite_module
from twice.errors import UnavailableError

DAY = date(2026, 11, 28)


@pytest.fixture
def spec(tmp_path: Path) -> str:
    spec = f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#t"
    with open_destination(spec) as dest:
        dest.replace_partition([{"day": DAY, "x": "a"}], day_interval(DAY, 1), stamp=None)
    return spec


@pytest.fixture
def locked(spec: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Another connection holds the file's exclusive lock; twice waits 0.2 s, not 30."""
    monkeypatch.setattr(sqlite_module, "LOCK_WAIT_SECONDS", 0.2)
    path = spec.split("///", 1)[1].split("?", 1)[0]
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield spec
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_locked_file_is_unavailable_for_reads_and_writes(locked: str) -> None:
    with open_destination(locked) as dest:
        with pytest.raises(DestinationUnavailableError, match="database is locked") as read:
            dest.schema()
        with pytest.raises(DestinationUnavailableError, match="database is locked"):
            dest.replace_partition([{"day": DAY, "x": "b"}], day_interval(DAY, 1), stamp=None)
    assert isinstance(read.value, UnavailableError)  # a service that failed: exit 1


def test_a_full_disk_says_so_and_leaves_the_slice(spec: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    opened = sqlite_module.SQLiteDestination._open

    def small(self: sqlite_module.SQLiteDestination) -> sqlite3.Connection:
        conn = opened(self)
        conn.execute("PRAGMA max_page_count = 5")  # SQLite then fails as on a full disk
        return conn

    monkeypatch.setattr(sqlite_module.SQLiteDestination, "_open", small)
    rows = [{"day": DAY, "x": "a" * 5000 * i} for i in range(1, 20)]
    with open_destination(spec) as dest, pytest.raises(
        DestinationUnavailableError, match="database or disk is full"
    ):
        dest.replace_partition(rows, day_interval(DAY, 1), stamp=None)
    monkeypatch.setattr(sqlite_module.SQLiteDestination, "_open", opened)
    with open_destination(spec) as dest:
        assert dest.read_partition(day_interval(DAY, 1)).column("x").to_pylist() == ["a"]


def test_backfill_force_on_a_locked_destination_is_one_line(locked: str, tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(
        "import pyarrow as pa\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('locked', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination={locked!r}, write='replace', safe_repeat=True, timeout=60)\n"
        "def t(ctx):\n"
        "    return pa.table({'day': [ctx.interval.start.date()], 'x': ['b']})\n"
    )
    result = CliRunner().invoke(cli, [
        "backfill", str(pipeline), "--start", "2026-11-28", "--end", "2026-11-29", "--force",
        "--ledger", str(tmp_path / "ledger.db"), "--deadline", "none", "--yes"])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "database is locked" in result.output and "Traceback" not in result.output


def test_a_run_on_a_locked_destination_names_the_lock_and_retries(locked: str,
                                                                  tmp_path: Path) -> None:
    """Issue 39: a destination locked during `twice run --force` was reported as an attempt
    timeout with an unknown outcome. The lock is the cause, and the write was rolled back: the
    attempt is failed-transient naming the lock, and the next attempt (declared retry) runs."""
    from twice.ledger import Ledger

    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(
        "import pyarrow as pa\n"
        "from twice import Pipeline, RetryPolicy, Schedule\n"
        "pipeline = Pipeline('locked', schedule=Schedule.daily('UTC'))\n"
        f"@pipeline.task(destination={locked!r}, write='replace', safe_repeat=True, timeout=60,\n"
        "               retry=RetryPolicy(max_attempts=2, initial_delay=0.1, jitter='none'))\n"
        "def t(ctx):\n"
        "    return pa.table({'day': [ctx.interval.start.date()], 'x': ['b']})\n"
    )
    result = CliRunner().invoke(cli, [
        "run", str(pipeline), "--interval", "2026-11-28", "--force",
        "--ledger", str(tmp_path / "ledger.db"), "--deadline", "none", "--json"])
    assert result.exit_code == 1, result.output
    with Ledger.open(str(tmp_path / "ledger.db")) as ledger:
        [unit] = ledger.units()
        attempts = ledger.attempts(unit.uow_id)
        errors = ledger.errors(unit.uow_id)
    assert [a.outcome for a in attempts] == ["failed-transient", "failed-transient"]
    assert len(errors) == 2 and all("database is locked" in e.message for e in errors), errors
    assert {e.error_class for e in errors} == {
        "twice.destinations.errors.DestinationUnavailableError"}
