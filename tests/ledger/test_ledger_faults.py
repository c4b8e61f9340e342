"""Ledger writes survive transient faults; storage faults raise typed, plain-spoken errors.

Real databases, real faults: another connection holding the SQLite write lock, a PostgreSQL
backend terminated with ``pg_terminate_backend`` in the middle of a write, a SQLite database
that cannot grow (``PRAGMA max_page_count``), a read-only tmpfs mount (where mounting is
permitted, i.e. as root).
"""

from __future__ import annotations

import inspect
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, OperationalError
from tests.ledger.ledger_helpers import FakeClock, make_uow

from twice.ledger import (
    Ledger,
    LedgerCommitUnknownError,
    LedgerError,
    LedgerStorageError,
    LedgerUnavailableError,
    SchemaVersionError,
)
from twice.ledger import engine as ledger_engine
from twice.ledger import migrations as ledger_migrations
from twice.ledger.faults import classify, root_failure
from twice.ledger.store import _NOT_RETRIED

# -- SQLite: the write lock held by another connection --------------------------------------


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


@pytest.fixture
def sqlite_ledger_file(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "ledger.db"
    uow = make_uow()
    with Ledger.open(path) as ledger:
        ledger.record_unit(uow)
    return path, uow.uow_id


def test_write_waits_out_a_lock_held_longer_than_the_busy_timeout(
    sqlite_ledger_file: tuple[Path, str],
) -> None:
    path, uow_id = sqlite_ledger_file
    other = _hold_write_lock(path)
    release = threading.Timer(0.6, lambda: other.execute("COMMIT"))
    try:
        with Ledger.open(path, busy_timeout=0.05, retry_seconds=10) as ledger:
            started = time.monotonic()
            release.start()
            recorded = ledger.record_observation(uow_id, "seen", source="test")
            waited = time.monotonic() - started
            assert waited >= 0.5  # it waited for the lock: 10 busy timeouts and more
            assert [o.seq for o in ledger.observations(uow_id)] == [recorded.seq]
    finally:
        release.join()
        other.close()


def test_lock_never_released_raises_ledger_unavailable(
    sqlite_ledger_file: tuple[Path, str],
) -> None:
    path, uow_id = sqlite_ledger_file
    other = _hold_write_lock(path)
    try:
        with Ledger.open(path, busy_timeout=0.05, retry_seconds=0.5) as ledger:
            started = time.monotonic()
            with pytest.raises(LedgerUnavailableError) as caught:
                ledger.begin_attempt(uow_id, holder="w1")
            assert 0.45 <= time.monotonic() - started < 5  # the retry window, then no more
    finally:
        other.execute("ROLLBACK")
        other.close()
    message = str(caught.value)
    assert not isinstance(caught.value, OperationalError)
    assert f"ledger sqlite:///{path} is unavailable: database is locked" in message
    assert "gave up on begin_attempt()" in message and "nothing of it was recorded" in message
    assert "What to do: another process holds the ledger's write lock" in message
    assert isinstance(caught.value.original, OperationalError)
    with Ledger.open(path) as ledger:
        assert ledger.attempts(uow_id) == []


def test_opening_an_up_to_date_ledger_does_not_queue_for_the_write_lock(
    sqlite_ledger_file: tuple[Path, str],
) -> None:
    path, uow_id = sqlite_ledger_file
    other = _hold_write_lock(path)
    try:
        with Ledger.open(path, busy_timeout=0.05, retry_seconds=0.2) as ledger:
            assert ledger.unit(uow_id) is not None  # reads need no lock (WAL)
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_grouped_transaction_retries_its_start_and_atomic_retries_its_body(
    sqlite_ledger_file: tuple[Path, str],
) -> None:
    path, uow_id = sqlite_ledger_file
    other = _hold_write_lock(path)
    release = threading.Timer(0.4, lambda: other.execute("COMMIT"))
    try:
        with Ledger.open(path, busy_timeout=0.05, retry_seconds=10) as ledger:
            release.start()
            with ledger.transaction():  # BEGIN IMMEDIATE is retried until the lock is free
                ledger.begin_attempt(uow_id, holder="w1")
                ledger.finish_attempt(uow_id, 1, "succeeded")
            runs = []

            def two_writes(tx: Ledger) -> int:
                runs.append(1)
                if len(runs) == 1:  # a transient fault in the middle of the first run
                    raise OperationalError("INSERT", {}, sqlite3.OperationalError(
                        "database is locked"))
                tx.begin_attempt(uow_id, holder="w1")
                return tx.finish_attempt(uow_id, 2, "succeeded").number

            assert ledger.atomic(two_writes) == 2
            assert len(runs) == 2
            assert [a.outcome for a in ledger.attempts(uow_id)] == ["succeeded", "succeeded"]
    finally:
        release.join()
        other.close()


def test_errors_that_are_not_transient_are_not_retried(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db", retry_seconds=30) as ledger:
        started = time.monotonic()
        with pytest.raises(LedgerError, match="unknown unit of work"):
            ledger.begin_attempt("nobody", holder="w1")
        with pytest.raises(IntegrityError):  # a constraint violation is a bug, not a fault
            with ledger.transaction() as tx, tx._session.write() as conn:
                conn.exec_driver_sql(
                    "INSERT INTO twice_events (kind, at, recorded_at, summary, data) "
                    "VALUES ('no-such-kind', 'x', 'x', 'x', '{}')"
                )
        assert time.monotonic() - started < 2


def test_every_public_method_is_retried() -> None:
    """A method added later is covered as well: wrapping is by exclusion, not by list."""
    for name, value in vars(Ledger).items():
        if name.startswith("_") or name in _NOT_RETRIED or not inspect.isfunction(value):
            continue
        assert getattr(value, "__twice_retried__", False), name
    for name in ("record_job_generation", "mark_generation", "acquire_lease", "begin_attempt",
                 "record_resolution", "record_intermediate"):
        assert Ledger.__dict__[name].__twice_retried__


# -- SQLite: disk full ------------------------------------------------------------------------


def _cap_database_size(ledger: Ledger) -> None:
    """Every new connection may not grow the file: SQLite answers "database or disk is full"."""

    @event.listens_for(ledger._engine, "connect")
    def _cap(dbapi_connection: Any, _record: Any) -> None:
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    ledger._engine.dispose()


def test_disk_full_raises_a_storage_error_naming_the_ledger_at_once(
    sqlite_ledger_file: tuple[Path, str],
) -> None:
    path, uow_id = sqlite_ledger_file
    with Ledger.open(path, retry_seconds=30) as ledger:
        _cap_database_size(ledger)
        started = time.monotonic()
        with pytest.raises(LedgerStorageError) as caught:
            ledger.record_observation(uow_id, "seen", source="test",
                                      detail={"padding": "x" * 20_000})
        assert time.monotonic() - started < 2  # not retried: it would fail again
        message = str(caught.value)
        assert message.startswith(f"ledger sqlite:///{path}: database or disk is full during "
                                  "record_observation()")
        assert f"free space on the volume holding {path}" in message
        assert "nothing of this write was recorded" in message
        assert ledger.observations(uow_id) == []  # rolled back; reading still works


def test_a_failed_rollback_after_disk_full_does_not_hide_it(
    sqlite_ledger_file: tuple[Path, str],
) -> None:
    path, uow_id = sqlite_ledger_file
    with Ledger.open(path) as ledger:
        _cap_database_size(ledger)

        @event.listens_for(ledger._engine, "rollback")
        def _already_rolled_back(_conn: Any) -> None:  # what SQLite says after SQLITE_FULL
            raise sqlite3.OperationalError("cannot rollback - no transaction is active")

        with pytest.raises(LedgerStorageError, match="database or disk is full"):
            ledger.record_error(uow_id, error_class="E", message="x" * 20_000,
                                classification="transient")
        with pytest.raises(LedgerStorageError, match="database or disk is full"):
            with ledger.transaction():
                ledger.record_nonfatal(uow_id, "y" * 20_000)
    # And where it is the rollback error that surfaces, the cause it followed is used.
    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError:
            raise sqlite3.OperationalError("cannot rollback - no transaction is active")  # noqa: B904
    except sqlite3.OperationalError as hidden:
        assert str(root_failure(hidden)) == "database or disk is full"
        fault = classify(hidden)
        assert fault is not None and fault.kind == "storage" and fault.disk_full


# -- read-only ledgers ------------------------------------------------------------------------


def test_read_only_open_reads_and_refuses_writes_without_touching_the_file(
    sqlite_ledger_file: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a read-only file system (tests run as root, chmod does not stop root): the
    read_only=True path itself, on a version-2 ledger in rollback-journal mode, which a
    writable open would migrate and switch to WAL."""
    path = tmp_path / "old.db"
    uow = make_uow()
    with monkeypatch.context() as pinned:
        pinned.setattr(ledger_migrations, "MIGRATIONS", ledger_migrations.MIGRATIONS[:2])
        pinned.setattr(ledger_migrations, "LATEST_VERSION", 2)
        with Ledger.open(path, clock=FakeClock()) as old:
            old.record_unit(uow)
            old.begin_attempt(uow.uow_id, holder="w1")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    before = path.read_bytes()
    with Ledger.open(path, read_only=True) as ledger:
        assert ledger.read_only == "opened read-only"
        assert ledger.schema_version == 2  # not migrated
        assert [a.holder for a in ledger.attempts(uow.uow_id)] == ["w1"]
        with ledger.snapshot():
            assert ledger.unit(uow.uow_id) is not None
        with pytest.raises(LedgerStorageError, match=r"is read-only \(opened read-only\)"):
            ledger.record_observation(uow.uow_id, "seen", source="test")
        with pytest.raises(LedgerStorageError, match="read-only"):
            with ledger.transaction():
                pass
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()
    with pytest.raises(LedgerError, match="read-only: no file"):
        Ledger.open(tmp_path / "missing.db", read_only=True)
    with pytest.raises(LedgerError, match="durable=True records evidence"):
        Ledger.open(path, read_only=True, durable=True)


def test_read_only_open_refuses_a_newer_schema_and_a_non_ledger(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    Ledger.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO twice_schema VALUES (9, 'future', "
                     "'2030-01-01T00:00:00.000000+00:00')")
    conn.close()
    with pytest.raises(SchemaVersionError, match="newer than this twice"):
        Ledger.open(path, read_only=True)
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(LedgerError, match="is not a twice ledger"):
        Ledger.open(empty, read_only=True)


def test_relative_sqlite_url_reopens_writable_and_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:///ledger.db`` is relative to the working directory; reopening an existing one
    used to fail building its ``file:`` URI (a relative path has none)."""
    monkeypatch.chdir(tmp_path)
    uow = make_uow()
    with Ledger.open("sqlite:///rel.db") as ledger:
        ledger.record_unit(uow)
    with Ledger.open("sqlite:///rel.db") as ledger:
        assert ledger.read_only is None and ledger.unit(uow.uow_id) is not None
    with Ledger.open("sqlite:///rel.db", read_only=True) as ledger:
        assert ledger.unit(uow.uow_id) is not None
    from twice.reports import load_evidence

    assert [u.uow_id for u in load_evidence("sqlite:///rel.db").units] == [uow.uow_id]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs mount (needs root, or CAP_SYS_ADMIN); skipped where mounting is refused."""
    where = tmp_path / "mnt"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_ledger_on_a_read_only_file_system_is_still_readable(tmpfs: Path) -> None:
    path = tmpfs / "ledger.db"
    uow = make_uow()
    with Ledger.open(path) as ledger:
        ledger.record_unit(uow)
        ledger.begin_attempt(uow.uow_id, holder="w1")
    assert sorted(p.name for p in tmpfs.iterdir()) == ["ledger.db"]  # no -shm to reuse
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    with Ledger.open(path) as ledger:  # detected: opened read-only, not refused
        assert ledger.read_only is not None and "read-only file system" in ledger.read_only
        assert [a.holder for a in ledger.attempts(uow.uow_id)] == ["w1"]
        with pytest.raises(LedgerStorageError) as caught:
            ledger.finish_attempt(uow.uow_id, 1, "succeeded")
        assert f"ledger sqlite:///{path} is read-only" in str(caught.value)
    with pytest.raises(LedgerStorageError, match=r"cannot be written here: .*read-only file "
                                                 r"system\. This command records evidence"):
        Ledger.open(path, durable=True)
    from twice.reports import load_evidence

    evidence = load_evidence(str(path))  # the reports read it too
    assert [u.uow_id for u in evidence.units] == [uow.uow_id]


def test_disk_full_on_a_real_small_file_system(tmpfs: Path) -> None:
    path = tmpfs / "ledger.db"
    uow = make_uow()
    with Ledger.open(path) as ledger:
        ledger.record_unit(uow)
        with pytest.raises(LedgerStorageError) as caught:
            for _ in range(2_000):
                ledger.record_observation(uow.uow_id, "seen", source="test",
                                          detail={"padding": "x" * 8_000})
    assert "database or disk is full" in str(caught.value)
    assert "free space on the volume holding" in str(caught.value)


# -- PostgreSQL: connections terminated ---------------------------------------------------------


def _terminate_ledger_backends(url: str) -> int:
    """Kill every ledger connection to the test database (they run as ``twice-ledger``)."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name = 'twice-ledger'"
        ).fetchone()
    assert row is not None
    return int(row[0])


class KillingClock:
    """A clock that, once armed, terminates the ledger's backends the next time it is read.

    The ledger reads its clock inside the write transaction, after the lease row is locked
    (acquire_lease) or before the first insert (begin_attempt): mid-transaction.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.armed = False
        self.killed = 0

    def __call__(self) -> datetime:
        if self.armed:
            self.armed = False
            self.killed += _terminate_ledger_backends(self.url)
        return datetime.now(UTC)


@pytest.mark.postgres
def test_postgres_write_whose_backend_is_terminated_succeeds_on_retry(postgres_url: str) -> None:
    clock = KillingClock(postgres_url)
    uow = make_uow()
    with Ledger.open(postgres_url, clock=clock) as ledger:
        ledger.record_unit(uow)
        clock.armed = True
        lease = ledger.acquire_lease(uow.uow_id, "w1", 60)
        assert clock.killed == 1 and lease.acquired
        clock.armed = True
        attempt = ledger.begin_attempt(uow.uow_id, holder="w1")
        assert clock.killed == 2 and attempt.number == 1
        assert [a.number for a in ledger.attempts(uow.uow_id)] == [1]  # recorded once
        stored = ledger.lease(uow.uow_id)
        assert stored is not None and stored.token == lease.token


@pytest.mark.postgres
def test_postgres_connection_lost_while_committing_is_not_repeated(postgres_url: str) -> None:
    uow = make_uow()
    with Ledger.open(postgres_url) as ledger:
        ledger.record_unit(uow)
        killed = []

        @event.listens_for(ledger._engine, "commit")
        def _kill_at_commit(_conn: Any) -> None:
            if not killed:
                killed.append(_terminate_ledger_backends(postgres_url))

        with pytest.raises(LedgerCommitUnknownError) as caught:  # a LedgerUnavailableError
            ledger.begin_attempt(uow.uow_id, holder="w1")
        event.remove(ledger._engine, "commit", _kill_at_commit)
        assert killed == [1]
        assert "while committing begin_attempt(): it may or may not have been recorded" in str(
            caught.value)
        assert len(ledger.attempts(uow.uow_id)) <= 1  # never twice


@pytest.mark.postgres
def test_postgres_cut_off_for_longer_than_the_window_is_unavailable(postgres_url: str) -> None:
    uow = make_uow()
    with Ledger.open(postgres_url) as ledger:
        ledger.record_unit(uow)

    class AlwaysKilling(KillingClock):
        def __call__(self) -> datetime:
            self.armed = True  # every try is cut off mid-transaction
            return super().__call__()

    clock = AlwaysKilling(postgres_url)
    with Ledger.open(postgres_url, retry_seconds=0.6) as ledger:
        ledger._clock = clock  # opened with the system clock; cut off from now on
        started = time.monotonic()
        with pytest.raises(LedgerUnavailableError) as caught:
            ledger.begin_attempt(uow.uow_id, holder="w1")
        assert 0.5 <= time.monotonic() - started < 10
    message = str(caught.value)
    assert clock.killed >= 2  # it was tried again
    assert "is unavailable: connection terminated by an administrator" in message
    assert "gave up on begin_attempt() after" in message and "pg_isready" in message
    assert "twice:***@" in message and "twice:twice" not in message
    with Ledger.open(postgres_url) as ledger:
        assert ledger.attempts(uow.uow_id) == []


@pytest.mark.parametrize("command", ["status", "update", "explain x", "run"])
def test_a_damaged_ledger_file_is_a_storage_error_not_a_traceback(
    tmp_path: Path, command: str
) -> None:
    """Found by a probe: a ledger whose pages were damaged (its header intact) ended every
    report in a Python traceback ("database disk image is malformed"), unclassified."""
    import subprocess
    import sys

    from tests.ledger.ledger_helpers import make_uow

    ledger = tmp_path / "l.db"
    with Ledger.open(f"sqlite:///{ledger}") as opened:
        for day in range(1, 30):
            opened.record_unit(make_uow(day))
    with sqlite3.connect(ledger) as conn:  # the units table's first page is overwritten
        [(root, size)] = conn.execute(
            "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master "
            "WHERE name = 'twice_units_of_work'").fetchall()
    conn.close()
    data = bytearray(ledger.read_bytes())
    data[(root - 1) * size:root * size] = b"\xa5" * size
    ledger.write_bytes(bytes(data))
    pipeline = tmp_path / "p.py"
    pipeline.write_text("from twice import Pipeline, Schedule\n"
                        "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'))\n"
                        "@pipeline.task(safe_repeat=True)\ndef t(ctx):\n    pass\n")
    args = {"run": ["run", str(pipeline), "--interval", "2026-11-01", "--deadline", "none"]}
    done = subprocess.run([sys.executable, "-m", "twice", *args.get(command, command.split()),
                           "--ledger", str(ledger)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode != 0
    said = done.stdout + done.stderr  # run: the unit is blocked, nothing ran
    assert "Traceback" not in said, said
    assert "damaged" in said and ".recover" in said, said


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_ledger_file_deleted_or_replaced_in_use_is_written_no_more(tmp_path: Path,
                                                                      how: str) -> None:
    """Found by a probe: a run whose SQLite ledger was deleted or replaced went on writing
    into the unlinked file through its open connection, said "(all recorded)" and exited 0;
    nothing of it survived, and the next run repeated the side effects."""
    import sys

    ledger = tmp_path / "l.db"
    pipeline = tmp_path / "p.py"
    pipeline.write_text(
        "import os, shutil\n"
        "from twice import Pipeline, Schedule\n"
        "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'))\n"
        "@pipeline.task(safe_repeat=True)\n"
        "def t(ctx):\n"
        f"    if ctx.interval.start.day == 2:\n"
        f"        path = {str(ledger)!r}\n"
        "        for suffix in ('', '-wal', '-shm'):\n"
        "            if os.path.exists(path + suffix):\n"
        "                os.unlink(path + suffix)\n"
        f"        if {how == 'replaced'!r}:\n"
        "            open(path, 'wb').close()\n"
    )
    runs = [subprocess.run([sys.executable, "-m", "twice", "run", str(pipeline), "--start",
                            "2026-11-01", "--end", "2026-11-04", "--deadline", "none",
                            "--ledger", str(ledger), *extra], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path) for extra in ((), ("--json",))]
    for done in runs:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
    assert "not all recorded: the ledger failed under 2 unit(s)" in " ".join(
        runs[0].stdout.split())
    import json

    units = json.loads(runs[1].stdout)["units"]
    assert [u["ledger_failed"] for u in units] == [False, True, True]
    assert all(f"was {how} while this process used it" in u["error"] for u in units[1:])
    with Ledger.open(f"sqlite:///{tmp_path / 'other.db'}") as other:  # an untouched ledger
        other.record_unit(make_uow(1))
        (tmp_path / "other.db").rename(tmp_path / "moved.db")  # renamed: same file, moved
        with pytest.raises(LedgerStorageError, match="was deleted while this process"):
            other.record_unit(make_uow(2))


@pytest.mark.postgres
def test_postgres_pooled_connection_killed_while_idle_is_replaced_before_use(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection idle in the pool past ``PING_AFTER_IDLE_SECONDS`` is pinged at checkout and
    replaced if dead, so even a ``transaction()`` block (whose body is not retried) works after
    the server dropped it; one checked in just now is not pinged (no round trip per
    transaction)."""
    monkeypatch.setattr(ledger_engine, "PING_AFTER_IDLE_SECONDS", 0.2)
    uow = make_uow()
    with Ledger.open(postgres_url) as ledger:
        pings: list[object] = []
        ping = ledger._engine.dialect.do_ping
        monkeypatch.setattr(ledger._engine.dialect, "do_ping",
                            lambda conn: pings.append(conn) or ping(conn))
        ledger.record_unit(uow)
        for _ in range(5):
            ledger.record_observation(uow.uow_id, "running", source="probe")
        assert pings == []
        assert _terminate_ledger_backends(postgres_url) >= 1  # pooled, idle, now dead
        time.sleep(0.3)
        with ledger.transaction():
            ledger.record_observation(uow.uow_id, "succeeded", source="probe")
        assert len(pings) == 1
        assert [o.state for o in ledger.observations(uow.uow_id)][-1] == "succeeded"
