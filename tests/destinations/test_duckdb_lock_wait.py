"""Two processes on one DuckDB warehouse take turns: DuckDB lets one process open a file, and
a write that finds it held waits for it (as SQLite's busy timeout does) instead of failing the
attempt; past the wait it is a clear unavailable error."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from twice.core.interval import Interval
from twice.destinations import open_destination
from twice.destinations.errors import DestinationUnavailableError

HOLD = textwrap.dedent("""\
    import sys, time, duckdb
    conn = duckdb.connect(sys.argv[1])
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.close()
""")


def hold(path: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def day_rows(day: date) -> pa.Table:
    return pa.table({"day": pa.array([day, day], pa.date32()), "qty": pa.array([1, 2])})


def test_a_write_waits_for_another_process_to_release_the_file(tmp_path: Path) -> None:
    path = tmp_path / "wh.duckdb"
    holder = hold(path, 1.5)
    started = time.monotonic()
    interval = Interval.parse("2026-11-30T00:00:00+00:00/2026-12-01T00:00:00+00:00")
    with open_destination(f"duckdb://{path}?partition_column=day#positions") as dest:
        dest.replace_partition(day_rows(date(2026, 11, 30)), interval)
        assert dest.read_partition(interval).num_rows == 2
    assert time.monotonic() - started >= 1.0  # it did wait for the other process
    assert holder.wait(timeout=10) == 0


def test_past_the_wait_the_destination_is_unavailable(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from twice.destinations import duckdb as duck

    monkeypatch.setattr(duck, "LOCK_WAIT_SECONDS", 0.3)
    path = tmp_path / "wh.duckdb"
    holder = hold(path, 5)
    try:
        interval = Interval.parse("2026-11-30T00:00:00+00:00/2026-12-01T00:00:00+00:00")
        with pytest.raises(DestinationUnavailableError, match="cannot open"):
            with open_destination(f"duckdb://{path}?partition_column=day#positions") as dest:
                dest.replace_partition(day_rows(date(2026, 11, 30)), interval)
    finally:
        holder.kill()
        holder.wait()


def test_a_stopped_holder_is_named_at_once_instead_of_waited_for(tmp_path: Path) -> None:
    """A process stopped while it holds the file (SIGSTOP, Ctrl-Z) holds it until resumed:
    waiting the full minute helps nobody, so the error says who and how to resume it."""
    import signal

    path = tmp_path / "wh.duckdb"
    holder = hold(path, 60)
    holder.send_signal(signal.SIGSTOP)
    try:
        interval = Interval.parse("2026-11-30T00:00:00+00:00/2026-12-01T00:00:00+00:00")
        started = time.monotonic()
        with pytest.raises(DestinationUnavailableError) as caught:
            with open_destination(f"duckdb://{path}?partition_column=day#positions") as dest:
                dest.replace_partition(day_rows(date(2026, 11, 30)), interval)
        assert time.monotonic() - started < 10  # not the 60 s lock wait
        message = str(caught.value)
        assert f"{holder.pid} python" in message and "(stopped)" in message, message
        assert f"kill -CONT {holder.pid}" in message
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait()
