"""Commit records and fencing (twice.destinations.commits) on every engine, real databases.

A stamped write commits one record with its rows, in the same transaction, whose fingerprint is
the one ``twice.destinations.fingerprint.fingerprint`` computes afterwards; an older fencing token
for the same fence key is refused with nothing written; a stamped append happens once per unit of
work and generation; a failure or a SIGKILL inside the transaction leaves neither rows nor record.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from dest_helpers import day_interval, sorted_rows

from twice.destinations import DestinationError, open_destination
from twice.destinations.commits import (
    ACTIVE,
    NO_FINGERPRINT,
    PARQUET_COMMIT_FILE,
    CommitRecord,
    FencedWriteError,
    WriteStamp,
    resolve_stamp,
    stamped,
)
from twice.destinations.fingerprint import fingerprint

D1, D2, D3 = (date(2026, 11, 28) + timedelta(days=i) for i in range(3))
DAY = D3
WEEK = day_interval(D1, 3)
FENCE = "pipe/task/2026-11-30"

SCHEMA = pa.schema([
    ("day", pa.date32()), ("id", pa.int64()), ("name", pa.string()),
    ("amount", pa.decimal128(12, 2)), ("at", pa.timestamp("us", tz="UTC")),
    ("score", pa.float64()),  # fingerprinted too (twice-fp-v3: every column, floats included)
])


def rows(tag: str, n: int = 4, days: tuple[date, ...] = (DAY,), start: int = 0) -> pa.Table:
    data = [
        {"day": d, "id": start + i + 100 * k, "name": f"{tag}-{i}",
         "amount": Decimal(f"{i}.{k}5"),
         "at": datetime(2026, 11, 30, i, tzinfo=UTC), "score": i / 3}
        for k, d in enumerate(days) for i in range(n)
    ]
    return pa.Table.from_pylist(data, schema=SCHEMA)


def stamp(token: int, *, uow: str = "uow-a", fence: str = FENCE, generation: int = 1,
          attempt: int = 1) -> WriteStamp:
    return WriteStamp(uow_id=uow, fence_key=fence, generation=generation, attempt=attempt,
                      token=token, input_version="v1")


def assert_fingerprint_matches(record: CommitRecord, dest: Any, partition: Any) -> None:
    fresh = fingerprint(dest, partition)
    assert (record.row_count, record.checksum, record.columns, record.algorithm) == (
        fresh.row_count, fresh.checksum, fresh.columns, fresh.algorithm
    )


# --------------------------------------------------------------------------- records


def test_stamped_replace_commits_one_record_matching_a_fresh_fingerprint(engine, engines
                                                                         ) -> None:
    with open_destination(engines.spec(engine)) as dest:
        assert dest.commit_records() == []
        result = dest.replace_partition(rows("v1"), DAY, stamp=stamp(5))
        record = result.commit
        assert record is not None
        assert (record.uow_id, record.fence_key, record.generation, record.attempt,
                record.token, record.input_version) == ("uow-a", FENCE, 1, 1, 5, "v1")
        assert record.mode == "replace" and record.rows_written == 4
        assert record.slice == "day=2026-11-30"
        assert record.columns == tuple(sorted(SCHEMA.names))  # every column, the float too
        assert record.algorithm == "twice-fp-v3"
        assert record.committed_at.endswith("Z")
        datetime.fromisoformat(record.committed_at.replace("Z", "+00:00"))
        assert_fingerprint_matches(record, dest, DAY)
        assert dest.commit_records() == [record]
        assert dest.commit_records("uow-a") == [record]
        assert dest.commit_records("uow-other") == []
        assert record.matches(stamp(5))
    with open_destination(engines.spec(engine, _name(dest))) as again:  # read back from disk
        assert again.commit_records() == [record]


def test_slot_records_are_the_records_of_one_fence_key(engine, engines) -> None:
    """What a dependent's pinned inputs read (twice.engine.inputs): one slot's records, the
    same as filtering all of them, read on the SQL engines' (table, fence_key) index."""
    other = "pipe/task/2026-11-29"
    with open_destination(engines.spec(engine)) as dest:
        assert dest.slot_records(FENCE) == []
        dest.replace_partition(rows("a"), DAY, stamp=stamp(5))
        dest.replace_partition(rows("b", days=(D2,)), day_interval(D2, 1),
                               stamp=stamp(6, uow="uow-b", fence=other))
        dest.replace_partition(rows("c"), DAY, stamp=stamp(7))
        every = dest.commit_records()
        for key in (FENCE, other, "pipe/task/none"):
            assert dest.slot_records(key) == [r for r in every if r.fence_key == key]
        assert [r.token for r in dest.slot_records(FENCE)] == [5, 7]


def _name(dest: Any) -> str:
    return getattr(dest, "table", None) or dest.root.name


def test_unstamped_writes_leave_no_record(engine, engines) -> None:
    with open_destination(engines.spec(engine)) as dest:
        result = dest.replace_partition(rows("v1"), DAY)
        assert result.commit is None
        dest.append(rows("more", start=50), partition=DAY, stamp=None)
        assert dest.row_count(DAY) == 8
        assert dest.commit_records() == []


def test_stamped_context_stamps_writes_without_the_argument(engine, engines) -> None:
    with open_destination(engines.spec(engine)) as dest:
        with stamped(stamp(7)):
            result = dest.replace_partition(rows("v1"), DAY)
            unstamped = dest.replace_partition(rows("v2"), DAY, stamp=None)
        assert result.commit is not None and result.commit.token == 7
        assert unstamped.commit is None
        dest.replace_partition(rows("v3"), DAY)  # outside the context: unstamped again
        assert [r.token for r in dest.commit_records()] == [7]


def test_stamped_append_and_upsert_fingerprints_match(sql_engine, engines) -> None:
    spec = engines.spec(sql_engine, key_columns=("id",))
    with open_destination(spec) as dest:
        dest.replace_partition(rows("v1"), DAY, stamp=stamp(1))
        appended = dest.append(rows("new", start=10), partition=DAY, stamp=stamp(2, uow="u2"))
        assert appended.commit is not None and appended.commit.mode == "append"
        # every column, not only the key columns: a changed value must change the checksum
        assert appended.commit.columns == tuple(sorted(SCHEMA.names))
        assert_fingerprint_matches(appended.commit, dest, DAY)
        upserted = dest.upsert(rows("upd", n=2), stamp=stamp(3, uow="u3"))  # all rows
        assert upserted.commit is not None and upserted.commit.slice == "all rows"
        assert upserted.commit.row_count == 8
        assert_fingerprint_matches(upserted.commit, dest, None)
        assert [r.uow_id for r in dest.commit_records()] == ["uow-a", "u2", "u3"]


def test_parquet_multi_partition_replace_and_dynamic_mode(engines) -> None:
    spec = engines.spec("parquet", "ds")
    root = engines.tmp / "ds"
    dest = open_destination(spec)
    first = dest.replace_partition(rows("v1", days=(D1, D2, D3)), WEEK, stamp=stamp(1))
    assert first.commit is not None
    assert_fingerprint_matches(first.commit, dest, WEEK)
    for day in (D1, D2, D3):
        assert (root / f"day={day.isoformat()}" / PARQUET_COMMIT_FILE).exists()
    assert dest.commit_records() == [first.commit]  # one record, though three directories
    dynamic = dest.replace_partition(rows("v2", days=(D2,)), WEEK, overwrite="dynamic",
                                     stamp=stamp(2))
    assert dynamic.commit is not None and dynamic.commit.row_count == 12  # D1, D3 kept
    assert_fingerprint_matches(dynamic.commit, dest, WEEK)
    # static, only D2 receives rows: D1 and D3 are emptied but keep their records
    static = dest.replace_partition(rows("v3", days=(D2,)), WEEK, stamp=stamp(3))
    assert static.partitions_removed == ("day=2026-11-28", "day=2026-11-30")
    assert static.commit is not None and static.commit.row_count == 4
    assert_fingerprint_matches(static.commit, dest, WEEK)
    assert dest.row_count() == 4 and dest.row_count(D1) == 0
    assert ds.dataset(root, partitioning="hive").count_rows() == 4  # the JSON is invisible
    assert [r.token for r in dest.commit_records()] == [1, 2, 3]
    # an unstamped rewrite keeps the records (history travels with the partition)
    dest.replace_partition(rows("v4", days=(D1, D2, D3)), WEEK)
    assert [r.token for r in dest.commit_records()] == [1, 2, 3]
    # a zero-row write that changes no partition still records itself
    empty = dest.replace_partition(rows("none", n=0), date(2026, 12, 5), stamp=stamp(4))
    assert empty.commit is not None and empty.commit.row_count == 0
    assert [r.token for r in dest.commit_records()] == [1, 2, 3, 4]


def test_parquet_partial_multi_partition_write_reads_as_absent(engines, monkeypatch) -> None:
    dest = open_destination(engines.spec("parquet", "ds"))
    calls: list[str] = []

    def fail_on_second(self: Any, name: str) -> None:
        calls.append(name)
        if len(calls) == 2:
            raise RuntimeError("crash between partitions")

    monkeypatch.setattr(type(dest), "_before_swap", fail_on_second)
    with pytest.raises(RuntimeError):
        dest.append(rows("a", days=(D1, D2)), partition=WEEK, stamp=stamp(3))
    monkeypatch.undo()
    assert dest.row_count() == 4  # the first partition committed, alone
    assert dest.commit_records() == []  # its record is incomplete: reconcile reads "absent"
    retry = dest.append(rows("a", days=(D1, D2)), partition=WEEK, stamp=stamp(4, attempt=2))
    assert retry.rows_written == 4 and retry.partitions_written == ("day=2026-11-29",)
    assert dest.row_count() == 8  # the retry completed the missing partition only
    assert retry.commit is not None
    assert_fingerprint_matches(retry.commit, dest, WEEK)
    assert dest.commit_records() == [retry.commit]
    again = dest.append(rows("a", days=(D1, D2)), partition=WEEK, stamp=stamp(5, attempt=3))
    assert again.rows_written == 0 and again.commit == retry.commit


def test_float_only_table_is_fingerprinted(sql_engine, engines) -> None:
    with open_destination(engines.spec(sql_engine, partition_column=None)) as dest:
        result = dest.append([{"x": 1.5}, {"x": 2.5}], stamp=stamp(1))
        assert result.commit is not None
        assert (result.commit.row_count, result.commit.algorithm, result.commit.columns) == (
            2, "twice-fp-v3", ("x",))
        assert result.commit.algorithm != NO_FINGERPRINT
        assert_fingerprint_matches(result.commit, dest, None)


def test_looking_creates_nothing(engines) -> None:
    for engine in ("sqlite", "duckdb", "parquet"):
        with open_destination(engines.spec(engine, "nothing")) as dest:
            assert dest.commit_records() == []
            assert dest.commit_records("u") == []
    assert sorted(p.name for p in engines.tmp.iterdir()) == []


def test_commit_records_without_commits_table(sql_engine, engines) -> None:
    with open_destination(engines.spec(sql_engine)) as dest:
        dest.replace_partition(rows("v1"), DAY, stamp=None)  # the data table, no records
        assert dest.commit_records() == []


def test_stamp_argument_resolution() -> None:
    assert resolve_stamp(ACTIVE) is None
    with stamped(stamp(3)):
        assert resolve_stamp(ACTIVE) == stamp(3)
        assert resolve_stamp(None) is None
    with pytest.raises(TypeError):
        resolve_stamp("uow-a")  # type: ignore[arg-type]


def test_record_round_trip() -> None:
    record = CommitRecord.create(stamp(2), table="t", slice="all rows", mode="append",
                                 rows_written=1, row_count=1, checksum="00", algorithm="x",
                                 columns=("a", "b"), extra={"k": [1]})
    assert CommitRecord.from_row(record.to_row()) == record
    assert CommitRecord.from_dict(record.to_dict()).extra == {"k": [1]}


def test_record_to_dict_is_asdict_with_columns_as_a_list_and_a_copy_of_extra() -> None:
    record = CommitRecord.create(stamp(2), table="t", slice="all rows", mode="append",
                                 rows_written=1, row_count=1, checksum="00", algorithm="x",
                                 columns=("a", "b"), extra={"k": [1], "n": {"m": 2}})
    data = record.to_dict()
    assert data == {**dataclasses.asdict(record), "columns": ["a", "b"]}  # every field
    data["extra"]["k"].append(2)
    data["extra"]["n"]["m"] = 3
    assert record.extra["k"] == [1] and record.extra["n"] == {"m": 2}


# --------------------------------------------------------------------------- fencing


def test_fencing_refuses_an_older_token_and_writes_nothing(engine, engines) -> None:
    with open_destination(engines.spec(engine)) as dest:
        dest.replace_partition(rows("t5"), DAY, stamp=stamp(5))
        before = sorted_rows(dest.read_partition(DAY))
        with pytest.raises(FencedWriteError) as caught:
            dest.replace_partition(rows("t4", n=2), DAY, stamp=stamp(4, uow="uow-old"))
        assert caught.value.newer_token == 5 and caught.value.stamp.token == 4
        for write in (
            lambda: dest.append(rows("t4", start=9), partition=DAY, stamp=stamp(4)),
            lambda: dest.replace_partition(rows("t4"), DAY, stamp=stamp(4, attempt=2)),
        ):
            with pytest.raises(FencedWriteError):
                write()
        assert sorted_rows(dest.read_partition(DAY)) == before
        assert [r.token for r in dest.commit_records()] == [5]
        dest.replace_partition(rows("t5-again"), DAY, stamp=stamp(5))  # same lease: allowed
        newer = dest.replace_partition(rows("t6", n=3), DAY, stamp=stamp(6, uow="uow-new"))
        assert sorted_rows(dest.read_partition(DAY)) == sorted_rows(rows("t6", n=3))
        assert newer.commit is not None
        # another slot (fence key) is not fenced by this one's tokens
        other = dest.replace_partition(rows("other", n=1), DAY,
                                       stamp=stamp(2, fence="pipe/other/2026-11-30"))
        assert other.commit is not None and other.commit.token == 2
        assert [r.token for r in dest.commit_records()] == [2, 5, 5, 6]


def test_a_token_handed_out_twice_is_refused_to_another_attempt(engine, engines) -> None:
    """Found by probes: a ledger restored from a copy older than a write (or another
    ledger) hands the same token out again, and an equal token passed the fence as "the same
    lease": the restored ledger repeated every side effect and append. A ledger hands each
    attempt its own token, so an equal token from another unit, generation or attempt is a
    token handed out twice, and is refused; the same attempt may write again."""
    with open_destination(engines.spec(engine)) as dest:
        dest.append(rows("t5"), partition=DAY, stamp=stamp(5))
        before = sorted_rows(dest.read_partition(DAY))
        for other in (stamp(5, uow="uow-b"), stamp(5, generation=2), stamp(5, attempt=2)):
            with pytest.raises(FencedWriteError) as caught:
                dest.append(rows("again", start=9), partition=DAY, stamp=other)
            assert caught.value.reissued == ("uow-a", 1, 1)
            assert "handed this token out a second time" in str(caught.value)
            with pytest.raises(FencedWriteError):
                dest.seal(other)
        assert sorted_rows(dest.read_partition(DAY)) == before
        dest.replace_partition(rows("t5-again"), DAY, stamp=stamp(5))  # the same attempt
        assert dest.seal(stamp(6, attempt=0)) is not False  # a newer token: as before


def test_a_seal_fences_an_earlier_holder_before_anything_is_written(engine, engines) -> None:
    """``seal`` (a takeover's, before it concludes the earlier holder never committed) makes
    its token the slot's newest with no rows: a paused earlier holder's write is refused
    from then on, in every mode; newer writes and other slots pass."""
    with open_destination(engines.spec(engine)) as dest:
        if engine in ("iceberg", "delta"):  # a table must exist to seal (metadata-only commit)
            assert dest.seal(stamp(7, attempt=0)) is False
        other = dest.replace_partition(rows("o", n=1), DAY,
                                       stamp=stamp(3, fence="pipe/other/2026-11-30"))
        assert other.commit is not None
        assert dest.seal(stamp(7, attempt=0)) is True
        fence = dest.commit_records()[-1]
        assert (fence.mode, fence.token, fence.attempt, fence.rows_written) == (
            "fence", 7, 0, 0)
        for write in (
            lambda: dest.replace_partition(rows("paused"), DAY, stamp=stamp(6)),
            lambda: dest.append(rows("paused"), partition=DAY, stamp=stamp(6)),
        ):
            with pytest.raises(FencedWriteError) as caught:
                write()
            assert caught.value.newer_token == 7
        with pytest.raises(FencedWriteError):  # an older seal cannot move the fence back
            dest.seal(stamp(5, attempt=0))
        written = dest.replace_partition(rows("taker"), DAY, stamp=stamp(8, attempt=2))
        assert written.commit is not None
        assert sorted_rows(dest.read_partition(DAY)) == sorted_rows(rows("taker"))
        modes = [(r.mode, r.token) for r in dest.commit_records()]
        assert modes == [("replace", 3), ("fence", 7), ("replace", 8)]


@pytest.mark.parametrize("table_format", ["iceberg", "delta"])
def test_a_seal_between_a_writers_fence_check_and_its_commit_fences_it(table_format, engines
                                                                      ) -> None:
    """The table formats commit optimistically: a paused writer has read the table and passed
    the fence before the taker seals. Its commit then loses to the seal's (the catalog's
    metadata swap; Delta's conflict on the fence app id), and on the reload the fence refuses
    it: nothing of it lands."""
    spec = engines.spec(table_format)
    with open_destination(spec) as paused, open_destination(spec) as taker:
        paused.replace_partition(rows("v1"), DAY, stamp=stamp(5))
        sealed: list[bool] = []

        def seal_now() -> None:
            if not sealed:
                sealed.append(taker.seal(stamp(7, attempt=0)))

        paused._before_commit = seal_now  # type: ignore[method-assign]
        with pytest.raises(FencedWriteError) as caught:
            paused.replace_partition(rows("stale"), DAY, stamp=stamp(6, attempt=2))
        assert sealed == [True] and caught.value.newer_token == 7
        assert sorted_rows(taker.read_partition(DAY)) == sorted_rows(rows("v1"))


def test_key_columns_are_a_key_within_each_slice_on_every_engine(engine, engines) -> None:
    """``key_columns=id`` with ``partition_column=day``: the same ids every day (a fund's
    position each day) are one row per day. SQLite and PostgreSQL once declared the table's
    key on ``id`` alone and refused the second day with the engine's raw IntegrityError,
    while DuckDB, Parquet and the table formats took it."""
    with open_destination(engines.spec(engine, key_columns=("id",))) as dest:
        dest.replace_partition(rows("d1", days=(D1,)), day_interval(D1, 1), stamp=None)
        dest.replace_partition(rows("d2", days=(D2,)), day_interval(D2, 1), stamp=None)
        for day, tag in ((D1, "d1"), (D2, "d2")):
            assert sorted_rows(dest.read_partition(day_interval(day, 1))) == sorted_rows(
                rows(tag, days=(day,)))


def test_fencing_of_upsert(sql_engine, engines) -> None:
    with open_destination(engines.spec(sql_engine, key_columns=("id",))) as dest:
        dest.upsert(rows("t5"), stamp=stamp(5))
        with pytest.raises(FencedWriteError):
            dest.upsert(rows("t4"), stamp=stamp(4))
        assert {r["name"] for r in dest.read_partition().to_pylist()} == {
            f"t5-{i}" for i in range(4)
        }


def test_concurrent_writers_of_one_slot_are_fenced(sql_engine, engines) -> None:
    """Token 5 is inside its transaction (paused after the delete) when token 4 starts: token 4
    must wait and then be refused, not slip in between (PostgreSQL: the advisory lock)."""
    spec = engines.spec(sql_engine)
    with open_destination(spec) as setup:
        setup.replace_partition(rows("v0"), DAY, stamp=stamp(1))
    paused, release = threading.Event(), threading.Event()
    first, second = open_destination(spec), open_destination(spec)
    errors: dict[str, BaseException] = {}

    def pause() -> None:
        paused.set()
        assert release.wait(30)

    first._after_delete = pause  # type: ignore[method-assign,union-attr]

    def run(name: str, dest: Any, token: int) -> None:
        try:
            with dest:  # SQLite: a connection belongs to the thread that opened it
                dest.replace_partition(rows(f"t{token}"), DAY, stamp=stamp(token, uow=name))
        except BaseException as exc:
            errors[name] = exc

    a = threading.Thread(target=run, args=("a", first, 5))
    b = threading.Thread(target=run, args=("b", second, 4))
    a.start()
    assert paused.wait(30)
    b.start()
    time.sleep(0.5)  # b is now waiting for the lock a holds
    release.set()
    a.join(60)
    b.join(60)
    assert "a" not in errors
    assert isinstance(errors.get("b"), FencedWriteError)
    with open_destination(spec) as after:
        assert sorted_rows(after.read_partition(DAY)) == sorted_rows(rows("t5"))
        assert [r.token for r in after.commit_records()] == [1, 5]


# --------------------------------------------------------------------------- append


def test_stamped_append_happens_once_per_unit_and_generation(engine, engines) -> None:
    with open_destination(engines.spec(engine)) as dest:
        first = dest.append(rows("a"), partition=DAY, stamp=stamp(3))
        assert first.rows_written == 4 and first.commit is not None
        assert_fingerprint_matches(first.commit, dest, DAY)
        repeat = dest.append(rows("a"), partition=DAY, stamp=stamp(4, attempt=2))
        assert repeat.rows_written == 0 and repeat.commit == first.commit
        assert dest.row_count(DAY) == 4
        with stamped(stamp(5, attempt=3)):  # a newer lease of the same unit: still a no-op
            assert dest.append(rows("a"), partition=DAY).rows_written == 0
        regenerated = dest.append(rows("a", start=10), partition=DAY,
                                  stamp=stamp(6, generation=2))
        assert regenerated.rows_written == 4 and dest.row_count(DAY) == 8
        assert regenerated.commit is not None
        assert_fingerprint_matches(regenerated.commit, dest, DAY)
        assert [(r.generation, r.mode) for r in dest.commit_records("uow-a")] == [
            (1, "append"), (2, "append")
        ]


def test_append_checks_the_slice(engine, engines) -> None:
    with open_destination(engines.spec(engine)) as dest:
        with pytest.raises(DestinationError):
            dest.append(rows("a", days=(D1,)), partition=DAY, stamp=stamp(1))
        assert dest.commit_records() == []


# --------------------------------------------------------------------------- atomicity


def _fail(*args: Any) -> None:
    raise RuntimeError("injected failure inside the write")


def test_failure_inside_the_transaction_leaves_no_rows_and_no_record(engine, engines,
                                                                    monkeypatch) -> None:
    with open_destination(engines.spec(engine)) as dest:
        dest.replace_partition(rows("old"), DAY, stamp=stamp(1))
        old_records = dest.commit_records()
        # Delta: one commit (no delete step of its own); the seam before delta-rs writes
        seam = {"parquet": "_before_swap", "delta": "_before_commit"}.get(engine, "_after_delete")
        monkeypatch.setattr(type(dest), seam, _fail)
        with pytest.raises(RuntimeError, match="injected"):
            dest.replace_partition(rows("new", n=6), DAY, stamp=stamp(2))
        monkeypatch.undo()
        assert sorted_rows(dest.read_partition(DAY)) == sorted_rows(rows("old"))
        assert dest.commit_records() == old_records


def test_failure_writing_the_record_rolls_back_the_rows(sql_engine, engines,
                                                        monkeypatch) -> None:
    with open_destination(engines.spec(sql_engine)) as dest:
        dest.replace_partition(rows("old"), DAY, stamp=stamp(1))
        monkeypatch.setattr(type(dest), "_clock", _fail)  # after the rows, before the record
        with pytest.raises(RuntimeError, match="injected"):
            dest.append(rows("new", start=20), partition=DAY, stamp=stamp(2))
        with pytest.raises(RuntimeError, match="injected"):
            dest.replace_partition(rows("new"), DAY, stamp=stamp(2))
        monkeypatch.undo()
        assert sorted_rows(dest.read_partition(DAY)) == sorted_rows(rows("old"))
        assert [r.token for r in dest.commit_records()] == [1]


CHILD = """
import os, signal, sys
from datetime import date
from twice.destinations import open_destination
from twice.destinations.commits import WriteStamp, stamped

spec, seam, exchange = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
dest = open_destination(spec)
if hasattr(dest, "use_exchange"):
    dest.use_exchange = exchange

def die(self, *args):
    os.kill(os.getpid(), signal.SIGKILL)

setattr(type(dest), seam, die)
rows = [{"day": date(2026, 11, 30), "id": 1000 + i, "name": "new"} for i in range(50)]
with stamped(WriteStamp("uow-new", "pipe/task/2026-11-30", 1, 1, 9)):
    dest.replace_partition(rows, date(2026, 11, 30))
print("committed", flush=True)
"""

OLD = [{"day": DAY, "id": i, "name": "old"} for i in range(10)]


def _kill_inside(spec: str, seam: str, exchange: bool = True) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, spec, seam, "1" if exchange else "0"],
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert "committed" not in child.stdout


@pytest.mark.parametrize(
    ("engine_name", "seam", "exchange"),
    [("sqlite", "_after_delete", True), ("duckdb", "_after_delete", True),
     ("postgresql", "_after_delete", True), ("parquet", "_before_swap", True),
     ("parquet", "_between_renames", False)],
    ids=["sqlite", "duckdb", "postgresql", "parquet-staged", "parquet-between-renames"],
)
def test_sigkill_inside_the_write_leaves_old_slice_and_no_record(
    engines, engine_name: str, seam: str, exchange: bool
) -> None:
    spec = engines.spec(engine_name, "killed")
    with open_destination(spec) as dest:
        dest.replace_partition(OLD, DAY, stamp=stamp(1, uow="uow-old"))
        old_records = dest.commit_records()
    _kill_inside(spec, seam, exchange)
    with open_destination(spec) as after:
        assert after.commit_records() == old_records  # no record of uow-new
        assert after.commit_records("uow-new") == []
        assert sorted_rows(after.read_partition(DAY)) == sorted_rows(OLD)
        retry = after.replace_partition(OLD[:3], DAY, stamp=stamp(9, uow="uow-new", attempt=2))
        assert retry.commit is not None
        assert_fingerprint_matches(retry.commit, after, DAY)
    if engine_name == "parquet":
        leftovers = [p.name for p in (engines.tmp / "killed").iterdir()
                     if p.name.startswith(".twice-") and p.name != ".twice.lock"]
        assert leftovers == []


def test_killed_child_really_died_inside(engines) -> None:
    """The child really reached the seam: without the kill it commits (guards the test)."""
    spec = engines.spec("sqlite", "alive")
    child = subprocess.run(
        [sys.executable, "-c", CHILD.replace("os.kill(os.getpid(), signal.SIGKILL)", "pass"),
         spec, "_after_delete", "1"],
        capture_output=True, text=True, timeout=120, env={**os.environ},
    )
    assert child.returncode == 0, child.stderr
    assert "committed" in child.stdout
    with open_destination(spec) as dest:
        assert [r.uow_id for r in dest.commit_records()] == ["uow-new"]
