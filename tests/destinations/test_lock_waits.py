"""A writer waiting for another writer's lock waits a bounded time, and not at all behind a
stopped process: found by a probe, a takeover sealing a slice hung for ever (renewing a lease
nobody else could take) while the earlier holder was SIGSTOPped inside its PostgreSQL write
(an advisory lock) or its Parquet swap (the dataset's flock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import date

import psycopg
import pytest
from dest_helpers import day_interval

from twice.destinations import DestinationUnavailableError, open_destination
from twice.destinations import parquet as parquet_module
from twice.destinations import postgres as postgres_module
from twice.destinations.commits import COMMITS_TABLE, FencedWriteError, WriteStamp

DAY = date(2026, 11, 28)
STAMP = WriteStamp(uow_id="u", fence_key="p/t/2026-11-28", generation=1, attempt=1, token=5)


def _rows() -> list[dict[str, object]]:
    return [{"day": DAY, "id": 1}]


def _holding(path: str) -> subprocess.Popen[bytes]:
    """A process that takes an exclusive flock on ``path`` and keeps it."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"h = open({path!r}, 'a+b'); fcntl.flock(h.fileno(), fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(120)\n")], stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    return holder


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux /proc/locks")
def test_a_parquet_lock_held_by_a_stopped_process_is_refused_at_once(engines) -> None:
    dest = open_destination(engines.spec("parquet", "ds"))
    dest.replace_partition(_rows(), day_interval(DAY, 1))
    holder = _holding(str(engines.tmp / "ds" / parquet_module.LOCK_FILE))
    try:
        holder.send_signal(signal.SIGSTOP)
        began = time.monotonic()
        with pytest.raises(DestinationUnavailableError, match=f"kill -CONT {holder.pid}"):
            dest.seal(STAMP)
        with pytest.raises(DestinationUnavailableError, match="stopped"):
            dest.commit_records()
        assert time.monotonic() - began < 10
    finally:
        holder.kill()
        holder.wait()
    assert dest.seal(STAMP)  # free again


def test_a_parquet_writer_waits_for_a_running_holder(engines) -> None:
    """Writers of one dataset take turns, each for its whole write: a writer that is running
    (not stopped) is waited for however long it takes (found by a probe: a cap of 300 s made
    a backfill's queued writers fail permanently)."""
    import threading

    dest = open_destination(engines.spec("parquet", "ds"))
    dest.replace_partition(_rows(), day_interval(DAY, 1))
    holder = _holding(str(engines.tmp / "ds" / parquet_module.LOCK_FILE))
    threading.Timer(1.5, holder.kill).start()
    began = time.monotonic()
    try:
        assert dest.seal(STAMP)
        assert time.monotonic() - began >= 1.0
    finally:
        holder.kill()
        holder.wait()


def test_a_postgresql_slot_lock_held_too_long_is_given_up(engines, monkeypatch) -> None:
    monkeypatch.setattr(postgres_module, "ADVISORY_WAIT_SECONDS", 1.0)
    spec = engines.spec("postgresql", "t")
    dest = open_destination(spec)
    dest.replace_partition(_rows(), day_interval(DAY, 1))
    key = f"{COMMITS_TABLE}|{dest.table_label}|{STAMP.fence_key}"
    with psycopg.connect(engines.pg_url) as other:  # a writer stopped inside its transaction
        other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])
        began = time.monotonic()
        with pytest.raises(DestinationUnavailableError, match="for over 1 s"):
            dest.seal(STAMP)
        assert time.monotonic() - began < 10
    assert dest.seal(STAMP)  # the other writer ended: the slot is free
    dest.replace_partition(_rows(), day_interval(DAY, 1))  # table locks are unaffected


def test_the_holders_of_the_fenced_token_are_those_asked_about() -> None:
    """Found by a probe: on Iceberg the newest token may come from the table property, newer
    than every record still reachable (a rolled back or expired snapshot); the holders were
    then those of an older token, another unit's, and an attempt's own second write was
    refused as a token handed out twice."""
    from twice.destinations.commits import CommitRecord, check_fence
    from twice.destinations.iceberg import _holders

    older = CommitRecord.fence(WriteStamp("uow-a", STAMP.fence_key, 1, 1, 5), table="t")
    mine = WriteStamp("uow-b", STAMP.fence_key, 1, 1, 7)
    check_fence(mine, 7, "t", _holders([older], STAMP.fence_key))  # no record of 7: allowed
    other = CommitRecord.fence(WriteStamp("uow-c", STAMP.fence_key, 1, 1, 7), table="t")
    with pytest.raises(FencedWriteError, match="second time"):
        check_fence(mine, 7, "t", _holders([older, other], STAMP.fence_key))
