"""What the PostgreSQL destination's lock tests share: a small stamped write (also run in a
thread of its own, to block on a test's locks), and a look at another session's locks
(``pg_locks``) from a connection of its own."""

from __future__ import annotations

import threading
from datetime import date
from typing import Any

import psycopg
import pyarrow as pa

from twice.define.schedule import Schedule
from twice.destinations.commits import WriteStamp

DAILY = Schedule.daily("UTC")

#: Lock modes that block a commit record's INSERT (ROW EXCLUSIVE) or stronger.
STRONG = {"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"}
#: How long a test waits for a session to start waiting (a hang guard only: nothing is timed).
STUCK = 30.0


def rows(day: date) -> pa.Table:
    return pa.table({"day": pa.array([day] * 2, pa.date32()), "n": pa.array([1, 2], pa.int64())})


def stamp(day: date, token: int) -> WriteStamp:
    return WriteStamp(uow_id=f"u{token}", fence_key=f"f/{day}", generation=1, attempt=1,
                      token=token, input_version="v1", ledger="L1", ledger_at="sqlite:///l")


def write_in_thread(dest: Any, day: date, token: int
                    ) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``dest``'s stamped replace of ``day``'s slice in a thread of its own; what it
    raises is collected in the list (the test asserts on it after joining the thread)."""
    errors: list[BaseException] = []

    def write() -> None:
        try:
            dest.replace_partition(rows(day), DAILY.interval_for(day), stamp=stamp(day, token))
        except BaseException as exc:  # collected: the test asserts on it
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    return thread, errors


def granted_locks(url: str, pid: int) -> list[tuple[str, str]]:
    """(relation, mode) of every relation lock backend ``pid`` holds now."""
    with psycopg.connect(url) as watcher:
        return [(str(name), str(mode)) for name, mode in watcher.execute(
            "SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = %s AND l.granted", [pid]).fetchall()]


def record_locks_in_write(dest: Any, url: str, held: list[tuple[str, str]]) -> None:
    """Make ``dest``'s writes add the relation locks they hold to ``held`` right after their
    creation step (at ``_add_columns``, inside the write's transaction)."""
    real = dest._add_columns

    def add_columns(tx: Any, added: Any) -> Any:
        held.extend(granted_locks(url, dest.connection.info.backend_pid))
        return real(tx, added)

    dest._add_columns = add_columns


def wait_until_waiting(url: str, pid: int, locktype: str) -> None:
    """Return once backend ``pid`` waits for a lock of ``locktype`` ('advisory', 'relation')."""
    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(int(STUCK / 0.05)):
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = %s "
                "AND NOT granted", [pid, locktype]).fetchone()
            if waiting and waiting[0]:
                return
            threading.Event().wait(0.05)
    raise AssertionError(f"backend {pid} never waited for a lock of type {locktype!r}")
