"""SQLite destinations: idle connections reused by the next unit of the process (issue 38: a
new connection, its schema read and its cold page cache were a fifth of a small unit's time).

A kept connection must never write into a file that is no longer the one at the path (deleted,
or replaced by another file), must hold no lock while it is idle (other processes write the
same file between units), and is kept only when nothing of its last user can be on it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from datetime import date
from pathlib import Path

import pytest
from dest_helpers import day_interval

from twice.destinations import open_destination
from twice.destinations import sqlite as sqlite_module
from twice.destinations.sqlite import IDLE

DAY = date(2026, 1, 1)


def rows(day: date, value: str = "a") -> list[dict[str, object]]:
    return [{"day": day, "x": value}, {"day": day, "x": value + "2"}]


def write(spec: str, day: date, value: str = "a") -> sqlite3.Connection:
    """Replace ``day``'s slice; the connection the write used."""
    with open_destination(spec) as dest:
        dest.replace_partition(rows(day, value), day_interval(day), stamp=None)
        return dest.connection  # type: ignore[attr-defined,no-any-return]


def stored(path: Path) -> list[tuple[str, str]]:
    """The table's rows, read by a connection of its own."""
    with sqlite3.connect(path) as conn:
        return sorted(conn.execute("SELECT day, x FROM t").fetchall())


@pytest.fixture
def spec(tmp_path: Path) -> str:
    IDLE.clear()
    return f"sqlite:///{tmp_path / 'w.db'}?partition_column=day#t"


def test_the_next_destination_reuses_the_closed_ones_connection(spec: str) -> None:
    first = write(spec, DAY)
    assert write(spec, date(2026, 1, 2)) is first
    # another thread of the process takes it too (an executor's pool thread)
    taken: list[object] = []
    worker = threading.Thread(target=lambda: taken.append(write(spec, date(2026, 1, 3))))
    worker.start()
    worker.join()
    assert taken == [first]
    assert len(stored(Path(spec.split("///")[1].split("?")[0]))) == 6


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_write_after_the_file_changed_lands_in_the_file_at_the_path(
        spec: str, tmp_path: Path, how: str) -> None:
    """The kept connection still holds the old file open: reused, it would write there, and
    the rows would be lost with it."""
    path = tmp_path / "w.db"
    first = write(spec, DAY)
    if how == "deleted":
        path.unlink()
    else:  # another file moved over it (a restore, a rebuild)
        other = tmp_path / "other.db"
        with sqlite3.connect(other) as conn:
            conn.execute("CREATE TABLE t (day DATE_TEXT, x TEXT)")
            conn.execute("INSERT INTO t VALUES ('2025-12-31', 'restored')")
        os.replace(other, path)
    second = write(spec, date(2026, 1, 2), "b")
    assert second is not first
    expected = [("2026-01-02", "b"), ("2026-01-02", "b2")]
    if how == "replaced":
        expected.insert(0, ("2025-12-31", "restored"))
    assert stored(path) == expected


def test_an_idle_connection_holds_no_lock_after_a_read_left_midway(
        spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cursor left with rows unread keeps SQLite's shared lock: kept idle like that, the
    connection would block every other process's commit to the file."""
    monkeypatch.setattr(sqlite_module, "_FINGERPRINT_BATCH_ROWS", 100)
    many = [{"day": DAY, "x": str(i)} for i in range(1000)]
    with open_destination(spec) as dest:
        dest.replace_partition(many, day_interval(DAY), stamp=None)
    with open_destination(spec) as dest:
        batches = dest._fingerprint_batches(  # type: ignore[attr-defined]
            "1 = 1", (), list(dest.schema().items()))  # type: ignore[union-attr]
        next(batches)  # the first batch only: the statement is still stepping
        kept = dest.connection  # type: ignore[attr-defined]
    other = sqlite3.connect(tmp_path / "w.db", timeout=0)
    other.execute("BEGIN EXCLUSIVE")  # fails with "database is locked" if a lock is held
    other.execute("ROLLBACK")
    other.close()
    assert write(spec, date(2026, 1, 2)) is kept


def test_a_connection_left_in_a_transaction_is_closed_not_kept(spec: str) -> None:
    dest = open_destination(spec)
    tx = dest._transaction()  # type: ignore[attr-defined]  # a write interrupted midway
    tx.__enter__()
    held = dest.connection  # type: ignore[attr-defined]
    dest.close()
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        held.execute("SELECT 1")
    assert write(spec, DAY) is not held


def test_a_connection_closed_by_another_thread_is_not_kept(spec: str) -> None:
    dest = open_destination(spec)
    held = dest.connection  # type: ignore[attr-defined]
    closer = threading.Thread(target=dest.close)
    closer.start()
    closer.join()
    with pytest.raises(sqlite3.ProgrammingError):
        held.execute("SELECT 1")


def test_the_lock_wait_in_force_applies_to_a_reused_connection(
        spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write(spec, DAY)
    monkeypatch.setattr(sqlite_module, "LOCK_WAIT_SECONDS", 0.25)
    with open_destination(spec) as dest:
        assert dest.connection is first  # type: ignore[attr-defined]
        assert dest.connection.execute(  # type: ignore[attr-defined]
            "PRAGMA busy_timeout").fetchone() == (250,)


def test_idle_connections_are_bounded_across_files(tmp_path: Path) -> None:
    """One kept connection per file a process ever wrote would exhaust its file descriptors
    (and keep deleted files' space): the oldest are closed past the bound."""
    IDLE.clear()
    kept = [write(f"sqlite:///{tmp_path / f'f{n}.db'}?partition_column=day#t", DAY)
            for n in range(IDLE.max_total + 5)]
    closed = 0
    for conn in kept:
        try:
            conn.execute("SELECT 1")
        except sqlite3.ProgrammingError:
            closed += 1
    assert closed == 5


def test_a_single_thread_sqlite_build_keeps_no_connection(
        spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept connection may be taken by another thread: a SQLite library built without
    thread support (DB-API threadsafety 0) must not share one."""
    monkeypatch.setattr(sqlite_module, "_SHARED_ACROSS_THREADS", False)
    first = write(spec, DAY)
    with pytest.raises(sqlite3.ProgrammingError):  # closed, not kept
        first.execute("SELECT 1")
    assert write(spec, date(2026, 1, 2)) is not first
