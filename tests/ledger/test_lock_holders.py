"""A write that gives up on a SQLite ledger's lock names the processes holding the file, and
says which are stopped: a process paused inside a write transaction holds the lock until it
is resumed or ended, and SQLite itself cannot say who it is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from twice.core.processes import Process
from twice.core.unit import UnitOfWork
from twice.define.schedule import Schedule
from twice.ledger import Ledger, LedgerUnavailableError
from twice.ledger.lock_holders import holders

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")

# Holds the ledger's write lock until killed; its command line carries a password that no
# message may repeat.
HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(120)
"""
SECRET_ARG = "postgresql://etl:hunter2@db.example/warehouse"


def _unit(day: int) -> UnitOfWork:
    interval = Schedule.daily("UTC").interval_for(date(2026, 11, day))
    return UnitOfWork("locks", "load", interval, "", "1")


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    path = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        ledger.record_unit(_unit(1))
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), SECRET_ARG],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        yield path, child
    finally:
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait(timeout=10)


def _refused_write(path: Path) -> str:
    with Ledger.open(f"sqlite:///{path}", busy_timeout=0.05, retry_seconds=0.3) as ledger:
        with pytest.raises(LedgerUnavailableError) as caught:
            ledger.record_unit(_unit(2))
    return str(caught.value)


def test_a_stopped_holder_is_named_with_how_to_resume_it(
        locked: tuple[Path, subprocess.Popen[str]]) -> None:
    path, child = locked
    child.send_signal(signal.SIGSTOP)
    message = _refused_write(path)
    assert f"Stopped with the ledger open: {child.pid} python" in message, message
    assert f"kill -CONT {child.pid}" in message
    assert "hunter2" not in message and "etl:" not in message  # never the command line


def test_a_running_holder_is_named_without_being_called_stopped(
        locked: tuple[Path, subprocess.Popen[str]]) -> None:
    path, child = locked
    message = _refused_write(path)
    assert f"Processes with the ledger open: {child.pid} python" in message, message
    assert "stopped)" not in message and "kill -CONT" not in message


def test_holders_reads_proc(tmp_path: Path) -> None:
    """The /proc layout as Linux writes it; a program name may hold spaces and parentheses."""
    ledger = tmp_path / "l.db"
    ledger.touch()
    proc = tmp_path / "proc"

    def process(pid: int, comm: str, state: str, *links: Path) -> None:
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
        (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) {state} 1 1 1 0 -1\n")
        for number, target in enumerate(links):
            (proc / str(pid) / "fd" / str(number)).symlink_to(target)

    process(40, "a (b) c", "T", Path("/dev/null"), Path(str(ledger) + "-wal"))
    process(41, "python3", "S", ledger)
    process(42, "other", "T", Path("/dev/null"))
    (proc / "self").mkdir()
    assert holders(str(ledger), proc=proc) == [Process(40, "a (b) c", True),
                                               Process(41, "python3", False)]
    assert holders(str(tmp_path / "absent.db"), proc=proc) == []
    assert holders(str(ledger), proc=tmp_path / "no-proc") == []
    assert os.getpid() not in [h.pid for h in holders(str(ledger))]
