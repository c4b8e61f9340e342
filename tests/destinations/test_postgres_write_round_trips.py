"""An owned ``replace`` on PostgreSQL reads the table's columns and the clock in the round trip
that locks the table, and whether ``twice_commits`` exists in the one that takes the slot's
fence (issue 38: a small write is mostly round trips).

A later replace of the table in the same process reads no columns before its transaction: it
conforms its rows to those the last write saw under its lock, and its own lock checks them
(``twice.destinations.base.SqlDestination._replace``); ``test_postgres_known_schema.py`` changes
the table between writes.

What must still hold: a column another session adds after the write first read the table, and
before it locked it, is in the commit record's fingerprint (the columns are those under the
lock, not the earlier read's), and the record matches a fingerprint taken afterwards.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from dest_helpers import day_interval

from twice.destinations import open_destination
from twice.destinations.commits import WriteStamp, stamped
from twice.destinations.fingerprint import fingerprint
from twice.destinations.postgres import _KNOWN_SCHEMAS, PostgresDestination

pytestmark = pytest.mark.postgres

DAY = date(2026, 11, 3)


def _rows(n: int) -> pa.Table:
    return pa.table({"day": pa.array([DAY] * n, pa.date32()),
                     "v": pa.array(range(n), pa.int64())})


def _stamp(token: int) -> WriteStamp:
    return WriteStamp(uow_id="u", fence_key="p/t/2026-11-03", generation=1, attempt=token,
                      token=token, ledger="ledger-a")


def test_a_column_added_before_the_lock_is_in_the_commit_record(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = f"{postgres_url}?partition_column=day#public.raced"
    with open_destination(spec) as dest, stamped(_stamp(1)):
        dest.replace_partition(_rows(3), day_interval(DAY))
    fence = PostgresDestination._lock_fence

    def alter_then_fence(self: PostgresDestination, tx: Any, stamp: WriteStamp) -> None:
        # the write has read the table's columns (before its transaction); another session
        # adds one before the write locks the table
        with psycopg.connect(postgres_url, autocommit=True) as other:
            other.execute("ALTER TABLE public.raced ADD COLUMN note text DEFAULT 'x'")
        fence(self, tx, stamp)

    monkeypatch.setattr(PostgresDestination, "_lock_fence", alter_then_fence)
    _KNOWN_SCHEMAS.clear()  # a first write of the table in this process: it reads the columns
    with open_destination(spec) as dest, stamped(_stamp(2)):
        result = dest.replace_partition(_rows(4), day_interval(DAY))
    monkeypatch.undo()
    commit = result.commit
    assert commit is not None
    assert "note" in commit.columns
    assert result.schema is not None and "note" in result.schema
    with open_destination(spec) as dest:
        after = fingerprint(dest, day_interval(DAY))
    assert (after.row_count, after.checksum, tuple(after.columns)) == (
        commit.row_count, commit.checksum, tuple(commit.columns))


def test_a_later_owned_replace_is_nine_round_trips(postgres_url: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    spec = f"{postgres_url}?partition_column=day#public.trips"
    with open_destination(spec) as dest, stamped(_stamp(1)):
        dest.replace_partition(_rows(3), day_interval(DAY))  # tables made
    sent: list[str] = []
    execute, copy = psycopg.Cursor.execute, psycopg.Cursor.copy

    def counted_execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, *args, **kw)

    def counted_copy(self: psycopg.Cursor[Any], statement: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(statement))
        return copy(self, statement, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)
    monkeypatch.setattr(psycopg.Cursor, "copy", counted_copy)
    with open_destination(spec) as dest, stamped(_stamp(2)):
        dest.replace_partition(_rows(10), day_interval(DAY))
    monkeypatch.undo()
    # the fence batch, the newest token with the ledger owner, the lock batch (which reads the
    # columns the rows were conformed to, kept from the first write), DELETE, COPY in, the
    # fingerprint's COPY out, the record: 7 statements, BEGIN and COMMIT besides
    assert len(sent) == 7, sent
    assert sum("pg_attribute" in query for query in sent) == 1, sent  # the lock batch's
