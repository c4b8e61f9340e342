"""A first writer that finds the tables another writer created while it waited takes no lock on
them, on PostgreSQL.

Found by the workers benchmark (``bench/bench_workers.py``, 8 workers on fresh tables, about one
fleet in six): a unit recorded failed-permanent with ``deadlock detected``. Two first writes of
one table both saw no table (and no ``twice_commits``); the second queued on the creation's
advisory lock and, once the first committed, still ran ``CREATE ... IF NOT EXISTS``. On an
existing table PostgreSQL skips the creation, but ``CREATE INDEX IF NOT EXISTS`` first takes
SHARE on the table, held to the end of the transaction: the late writer then held SHARE on
``twice_commits`` (blocking every other writer's commit record, ``RowExclusiveLock``) while it
waited for a lock one of those writers held. The server's log:

    Process A waits for ShareLock on relation bench_w_t0; blocked by process B.
    Process B waits for RowExclusiveLock on relation twice_commits; blocked by process A.
    Process A: CREATE INDEX IF NOT EXISTS "twice_ix_..." ON "public"."bench_w_t0" ("day")
"""

from __future__ import annotations

import threading
from datetime import date, timedelta
from typing import Any

import psycopg
from tests.destinations.pg_writes import (
    DAILY,
    STRONG,
    record_locks_in_write,
    rows,
    stamp,
    wait_until_waiting,
    write_in_thread,
)

from twice.destinations import open_destination
from twice.destinations.base import SqlDestination


def test_a_late_first_writer_takes_no_lock_on_what_it_finds_created(postgres_url: str) -> None:
    spec = f"{postgres_url}?partition_column=day#public.late"
    first_day, late_day = date(2026, 11, 1), date(2026, 11, 2)
    with open_destination(spec) as first:
        first.replace_partition(rows(first_day), DAILY.interval_for(first_day),
                                stamp=stamp(first_day, 1))
    held: list[tuple[str, str]] = []
    with open_destination(spec) as late:
        # As the late writer saw them before the first one committed: no table, and no
        # twice_commits when its fence was taken.
        real_schema, real_seen = late.schema, late._commits_table_exists
        calls = {"schema": 0, "seen": 0}

        def schema() -> Any:
            calls["schema"] += 1
            return None if calls["schema"] == 1 else real_schema()

        def commits_seen() -> bool:
            calls["seen"] += 1
            return False if calls["seen"] == 1 else real_seen()

        late.schema = schema  # type: ignore[method-assign]
        late._commits_table_exists = commits_seen  # type: ignore[method-assign]
        record_locks_in_write(late, postgres_url, held)
        result = late.replace_partition(rows(late_day), DAILY.interval_for(late_day),
                                        stamp=stamp(late_day, 2))
    assert result.commit is not None and held
    strong = {(table, mode) for table, mode in held
              if table in ("late", "twice_commits") and mode in STRONG}
    assert strong == set(), held


def test_concurrent_stamped_first_writes_of_several_tables_all_commit(postgres_url: str) -> None:
    """Writers of three new tables at once, each with its commit record (the benchmark's
    pattern): every write commits, none is refused by a deadlock."""
    writers = 12
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []
    days = [date(2026, 11, 1) + timedelta(days=i) for i in range(writers // 3)]

    def write(table: str, day: date, token: int) -> None:
        with open_destination(f"{postgres_url}?partition_column=day#public.{table}") as dest:
            dest.schema()  # connected before the barrier, so the writes overlap
            barrier.wait()
            try:
                dest.replace_partition(rows(day), DAILY.interval_for(day),
                                       stamp=stamp(day, token))
            except BaseException as exc:  # collected: the assertion shows them all
                errors.append(exc)

    threads = [threading.Thread(target=write, args=(f"t{n % 3}", days[n // 3], n + 1))
               for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM twice_commits").fetchone() == (writers,)


def test_a_writer_that_looked_for_twice_commits_in_its_transaction_sees_it_created_meanwhile(
        postgres_url: str) -> None:
    """The server's own look, not a stub's: the write's fence step asks the server whether
    ``twice_commits`` exists (in the write's transaction, before the creation lock). Found by
    the workers benchmark again (8 workers, about one fleet in five): PostgreSQL remembered
    that answer for the rest of the transaction (a negative entry of its catalog cache, which
    waiting for an advisory lock does not refresh), so a writer that queued on the creation
    lock while another created the table still found no table after the wait, sent
    ``CREATE INDEX IF NOT EXISTS`` and held SHARE on ``twice_commits`` (the same deadlock as
    above). Here the other creator is a plain session that holds the creation lock, creates
    the table and commits while the writer waits."""
    spec = f"{postgres_url}?partition_column=day#public.waited"
    day = date(2026, 11, 3)
    with psycopg.connect(postgres_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE public.waited (day date, n bigint)")
    held: list[tuple[str, str]] = []
    with open_destination(spec) as late, psycopg.connect(postgres_url) as creator:
        late.schema()
        creator.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                        ["twice_commits|create|public"])
        record_locks_in_write(late, postgres_url, held)
        writer, errors = write_in_thread(late, day, 1)
        wait_until_waiting(postgres_url, late.connection.info.backend_pid, "advisory")
        # created the way twice creates it, by the session holding the creation lock
        with creator.cursor() as cursor:
            SqlDestination._create_commits_table(late, cursor)  # type: ignore[arg-type]
        creator.commit()
        writer.join(60)
    assert errors == [] and held, errors
    strong = {(table, mode) for table, mode in held
              if table in ("waited", "twice_commits") and mode in STRONG}
    assert strong == set(), held
