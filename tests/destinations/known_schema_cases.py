"""What the known-schema tests of every engine share (importable as ``known_schema_cases``):
a table of one day's rows, the stamps of its writes, and the two writes around another
connection's change (``test_postgres_known_schema``, ``test_sqlite_known_schema``)."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
from dest_helpers import day_interval

from twice.destinations import open_destination
from twice.destinations.commits import CommitRecord, WriteStamp, stamped
from twice.destinations.fingerprint import fingerprint

DAY = date(2026, 11, 5)


def day_rows(n: int, **extra: pa.Array) -> pa.Table:
    """``n`` rows of ``DAY`` (``v`` 0 to n-1), with ``extra`` columns."""
    return pa.table({"day": pa.array([DAY] * n, pa.date32()),
                     "v": pa.array(range(n), pa.int64()), **extra})


def day_stamp(token: int) -> WriteStamp:
    return WriteStamp(uow_id="u", fence_key="p/t/2026-11-05", generation=1, attempt=token,
                      token=token, ledger="ledger-a")


def first_write(spec: str) -> None:
    """The write before the other connection's change: three rows of ``DAY``, token 1."""
    first = pa.table({"day": pa.array([DAY] * 3, pa.date32()),
                      "v": pa.array([7, 8, 9], pa.int64())})
    with open_destination(spec) as dest, stamped(day_stamp(1)):
        dest.replace_partition(first, day_interval(DAY))


def second_write(spec: str, rows: pa.Table) -> tuple[str, CommitRecord | None]:
    """The write after it, token 2: its refusal (``type: message``, no record), or
    ``"written"`` and its commit record, which must match a fresh fingerprint of the slice."""
    with open_destination(spec) as dest, stamped(day_stamp(2)):
        try:
            result = dest.replace_partition(rows, day_interval(DAY))
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}", None
        commit = result.commit
        assert commit is not None
        after = fingerprint(dest, day_interval(DAY))
        assert (after.row_count, after.checksum, tuple(after.columns)) == (
            commit.row_count, commit.checksum, tuple(commit.columns))
    return "written", commit
