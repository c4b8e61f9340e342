"""Lease tokens are fencing tokens: one ledger-wide increasing sequence (schema version 3).

Units of work that write the same destination slot compare their lease tokens, so a token is
never per unit: every acquisition that is not a renewal by the active holder takes the next
value of one counter (SQLite: a counter row under the write lock; PostgreSQL: a sequence).
"""

from __future__ import annotations

import multiprocessing
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.ledger import ledger_workers
from tests.ledger.ledger_helpers import FakeClock, make_uow

from twice.ledger import LATEST_VERSION, Ledger
from twice.ledger import migrations as ledger_migrations

CTX = multiprocessing.get_context("spawn")


def test_tokens_increase_across_units_and_takeovers(ledger: Ledger, clock: FakeClock) -> None:
    units = [make_uow(day) for day in (1, 2, 3)]
    for uow in units:
        ledger.record_unit(uow)
    a, b, c = (uow.uow_id for uow in units)
    first = ledger.acquire_lease(a, "w1", 30).token
    second = ledger.acquire_lease(b, "w2", 30).token
    third = ledger.acquire_lease(c, "w1", 30).token
    assert first < second < third  # different units, one sequence
    clock.advance(31)  # every lease expired
    taken = ledger.acquire_lease(a, "w2", 30)  # takeover of w1's expired lease
    assert taken.taken_over_from == "w1" and taken.token > third
    again = ledger.acquire_lease(b, "w2", 30)  # same holder back after its own expiry
    assert again.acquired and again.taken_over_from is None and again.token > taken.token
    stored = ledger.lease(b)
    assert stored is not None and stored.token == again.token


def test_renewal_keeps_the_token_and_a_release_does_not(
    ledger: Ledger, clock: FakeClock
) -> None:
    uow, other = make_uow(1), make_uow(2)
    ledger.record_unit(uow)
    ledger.record_unit(other)
    held = ledger.acquire_lease(uow.uow_id, "w1", 30)
    clock.advance(10)
    assert ledger.acquire_lease(uow.uow_id, "w1", 30).token == held.token  # extended
    assert ledger.renew_lease(uow.uow_id, "w1", 30).token == held.token
    refused = ledger.acquire_lease(uow.uow_id, "w2", 30)  # not acquired: names w1's token
    assert not refused.acquired and refused.token == held.token
    between = ledger.acquire_lease(other.uow_id, "w3", 30).token
    assert ledger.release_lease(uow.uow_id, "w1")
    back = ledger.acquire_lease(uow.uow_id, "w1", 30)  # same holder after its own release
    assert back.acquired and back.token > between > held.token


def _tokens_in_threads(url: str, units: list[str], workers: int, rounds: int) -> list[Any]:
    barrier = threading.Barrier(workers)
    results: queue.Queue[Any] = queue.Queue()
    threads = [
        threading.Thread(
            target=ledger_workers.acquire_tokens,
            args=(url, f"t{n}", units[n:] + units[:n], rounds, barrier, results),
        )
        for n in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return [results.get_nowait() for _ in threads]


def _tokens_in_processes(url: str, units: list[str], workers: int, rounds: int) -> list[Any]:
    barrier = CTX.Barrier(workers)
    results = CTX.Queue()
    processes = [
        CTX.Process(
            target=ledger_workers.acquire_tokens,
            args=(url, f"p{n}", units[n:] + units[:n], rounds, barrier, results),
        )
        for n in range(workers)
    ]
    for process in processes:
        process.start()
    found = []
    try:
        deadline = time.monotonic() + 120
        while len(found) < workers and time.monotonic() < deadline:
            try:
                found.append(results.get(timeout=1))
            except queue.Empty:
                if not any(process.is_alive() for process in processes):
                    break
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
    assert len(found) == workers, found
    return found


def _check_tokens(reports: list[Any]) -> list[int]:
    every = []
    for holder, granted, crashed in reports:
        assert crashed is None, f"{holder} crashed: {crashed}"
        tokens = [token for _, token in granted]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), (holder, tokens)
        every.extend(tokens)
    assert len(every) == len(set(every)), "a fencing token was handed out twice"
    return sorted(every)


@pytest.mark.parametrize("runner", [_tokens_in_threads, _tokens_in_processes],
                         ids=["threads", "processes"])
def test_concurrent_acquisitions_get_unique_increasing_tokens(engine_url: str, runner: Any) -> None:
    units = [make_uow(day) for day in range(1, 7)]
    with Ledger.open(engine_url) as ledger:
        for uow in units:
            ledger.record_unit(uow)
    reports = runner(engine_url, [u.uow_id for u in units], 4, 5)
    tokens = _check_tokens(reports)
    assert len(tokens) >= len(units)  # every unit was acquired at least once per round
    with Ledger.open(engine_url) as ledger:
        after = ledger.acquire_lease(units[0].uow_id, "late", 60).token
        stored = [ledger.lease(u.uow_id) for u in units]
    assert after > tokens[-1]
    assert {lease.token for lease in stored if lease is not None} <= {*tokens, after}
    if engine_url.startswith("sqlite"):
        # SQLite hands tokens out under the write lock, without gaps: 1..n exactly.
        assert [*tokens, after] == list(range(1, len(tokens) + 2))


def _pinned_to_version_2(monkeypatch: pytest.MonkeyPatch) -> Any:
    context = monkeypatch.context()
    pinned = context.__enter__()
    pinned.setattr(ledger_migrations, "MIGRATIONS", ledger_migrations.MIGRATIONS[:2])
    pinned.setattr(ledger_migrations, "LATEST_VERSION", 2)
    return context


def _old_style_lease(url: str, uow_id: str, token: int) -> None:
    """A lease row as version 2 wrote it: a per-unit token."""
    sql = ("INSERT INTO twice_leases (uow_id, holder, token, acquired_at, renewed_at, "
           "expires_at, released_at) VALUES ('{}', 'old', {}, '{}', '{}', '{}', NULL)")
    stamp = "2026-12-02T09:00:00.000000+00:00"
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql.format(uow_id, token, stamp, stamp, stamp))
        conn.close()
    else:
        with psycopg.connect(url) as conn:
            conn.execute(sql.format(uow_id, token, stamp, stamp, stamp))


def test_version_2_ledger_upgrades_and_keeps_its_tokens(
    engine_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    units = [make_uow(day) for day in (1, 2, 3)]
    context = _pinned_to_version_2(monkeypatch)
    try:
        with Ledger.open(engine_url, clock=clock) as old:
            assert old.schema_version == 2
            for uow in units:
                old.record_unit(uow)
        # Per-unit tokens, as version 2 counted them: unit 1 changed hands 7 times.
        _old_style_lease(engine_url, units[0].uow_id, 7)
        _old_style_lease(engine_url, units[1].uow_id, 2)
    finally:
        context.__exit__(None, None, None)
    with Ledger.open(engine_url, clock=clock) as new:
        assert new.schema_version == LATEST_VERSION == 4  # version 4 added the identity
        kept = new.lease(units[0].uow_id)
        assert kept is not None and kept.token == 7  # existing rows keep their tokens
        fresh = new.acquire_lease(units[2].uow_id, "w1", 30)
        assert fresh.token == 8  # the counter starts above the highest existing token
        taken = new.acquire_lease(units[1].uow_id, "w2", 30)  # the old lease expired
        assert taken.taken_over_from == "old" and taken.token == 9
    with Ledger.open(engine_url, clock=clock) as reopened:  # not migrated again
        assert reopened.acquire_lease(units[0].uow_id, "w3", 30).token == 10


def test_sqlite_counter_and_postgres_sequence_exist(engine_url: str, tmp_path: Path) -> None:
    Ledger.open(engine_url).close()
    if engine_url.startswith("sqlite"):
        with sqlite3.connect(engine_url.removeprefix("sqlite:///")) as conn:
            assert conn.execute("SELECT name, value FROM twice_counters").fetchall() == [
                ("lease-token", 0)
            ]
        conn.close()
    else:
        with psycopg.connect(engine_url) as conn:
            row = conn.execute(
                "SELECT cache_size FROM pg_sequences WHERE sequencename = 'twice_lease_tokens'"
            ).fetchone()
        assert row == (1,)  # CACHE 1: sessions never hold private ranges out of order


def test_an_attempt_begun_fenced_takes_the_next_token_of_the_one_sequence(
    ledger: Ledger, engine_url: str
) -> None:
    """``begin_fenced_attempt`` (what the executor begins an attempt with): the attempt and a
    fresh token of the ledger-wide sequence, above the lease's and every earlier attempt's, in
    the statement that inserts the attempt on PostgreSQL (one round trip less a unit)."""
    from sqlalchemy import event

    uow, other = make_uow(1), make_uow(2)
    ledger.record_unit(uow)
    ledger.record_unit(other)
    lease = ledger.acquire_lease(uow.uow_id, "w1", 30).token
    first, token_1 = ledger.begin_fenced_attempt(uow.uow_id, holder="w1", generation=1)
    ledger.finish_attempt(uow.uow_id, first.number, "failed-transient")
    between = ledger.acquire_lease(other.uow_id, "w2", 30).token
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(ledger._session.engine, "before_cursor_execute", seen)
    try:
        second, token_2 = ledger.begin_fenced_attempt(uow.uow_id, holder="w1", generation=1)
    finally:
        event.remove(ledger._session.engine, "before_cursor_execute", seen)
    assert (first.number, second.number) == (1, 2)
    assert lease < token_1 < between < token_2  # one sequence, strictly increasing
    assert ledger.next_fencing_token() == token_2 + 1  # it took exactly one value
    stored = ledger.attempts(uow.uow_id)
    assert [a.number for a in stored] == [1, 2] and stored[1].outcome == "running"
    if engine_url.startswith("postgresql"):
        assert not any("nextval" in s and s.lstrip().upper().startswith("SELECT")
                       for s in statements), statements
        assert any("nextval" in s for s in statements)
