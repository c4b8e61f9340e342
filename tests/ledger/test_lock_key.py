"""``lock_key`` on PostgreSQL: one statement that inserts the lock's row or locks it when it
exists (``ON CONFLICT DO UPDATE ... WHERE false``), held until the transaction ends, and
excluding the two statements earlier releases took the same lock with (a fleet of mixed
releases still serialises); the versions it numbers stay unique under racing writers."""

from __future__ import annotations

import threading

import psycopg
import pytest
from sqlalchemy import create_engine, event, text

from twice.ledger import Ledger
from twice.ledger.engine import lock_key

pytestmark = pytest.mark.postgres

#: How releases before the single statement took the lock.
EARLIER_LOCK = [
    "INSERT INTO twice_locks (kind, name) VALUES ('fingerprint', %s) ON CONFLICT DO NOTHING",
    "SELECT 1 FROM twice_locks WHERE kind = 'fingerprint' AND name = %s FOR NO KEY UPDATE",
]


def _earlier_lock(conn: psycopg.Connection[tuple[object, ...]], name: str) -> None:
    conn.execute("SET lock_timeout = '200ms'")
    for statement in EARLIER_LOCK:
        conn.execute(statement, [name])


def _sqlalchemy_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.mark.parametrize("existing", [False, True], ids=["new-row", "existing-row"])
def test_a_held_key_blocks_another_transaction_until_it_ends(postgres_url: str,
                                                             existing: bool) -> None:
    Ledger.open(postgres_url).close()  # the ledger's tables, twice_locks among them
    engine = create_engine(_sqlalchemy_url(postgres_url))
    try:
        if existing:  # the row is there from an earlier transaction: the conflict path
            with engine.begin() as conn:
                lock_key(conn, "fingerprint", "d\x1fp")
        sent: list[str] = []
        event.listen(engine, "before_cursor_execute",
                     lambda conn, cursor, statement, *rest: sent.append(statement))
        with engine.connect() as holder, psycopg.connect(postgres_url) as other:
            with holder.begin():
                lock_key(holder, "fingerprint", "d\x1fp")
                assert len(sent) == 1  # one round trip, whether the row is new or not
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    _earlier_lock(other, "d\x1fp")
                other.rollback()
                other.execute("SET lock_timeout = '200ms'")  # another key is not held
                other.execute("SELECT 1 FROM twice_locks WHERE kind = 'pool' FOR UPDATE")
                other.rollback()
            _earlier_lock(other, "d\x1fp")  # ended: the other transaction takes it at once
            with engine.connect() as third, third.begin():  # and excludes this release's
                third.execute(text("SET LOCAL lock_timeout = '200ms'"))
                with pytest.raises(Exception, match="lock timeout"):
                    lock_key(third, "fingerprint", "d\x1fp")
            other.rollback()
        with engine.connect() as conn:  # locking updates nothing: one row, never rewritten
            rows = conn.execute(text("SELECT count(*) FROM twice_locks")).scalar()
            updated = conn.execute(text(
                "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'twice_locks'"
            )).scalar()
        assert rows == 1
        assert updated == 0
    finally:
        engine.dispose()


def test_racing_fingerprints_of_one_partition_take_distinct_versions(postgres_url: str) -> None:
    writers, each = 6, 5
    Ledger.open(postgres_url).close()
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def record(n: int) -> None:
        try:
            with Ledger.open(postgres_url) as ledger:
                barrier.wait()
                for i in range(each):
                    ledger.record_fingerprint("warehouse.t", "2026-11-01", n, f"{n}-{i}")
        except BaseException as exc:  # collected: the assertion shows them all
            errors.append(exc)

    threads = [threading.Thread(target=record, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    with Ledger.open(postgres_url) as ledger:
        versions = [r.version for r in ledger.fingerprints("warehouse.t", "2026-11-01")]
    assert versions == list(range(1, writers * each + 1))
