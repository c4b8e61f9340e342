"""Portability (issue 37): every Linux-only call of twice is in ``twice.core.processes``, behind
a portable fallback (``ps``, ``lsof``, ``os.kill(pid, 0)``, a thread watching the parent).

The fallback is forced here on Linux (``processes.PORTABLE``, ``TWICE_PROCESSES=portable`` in
child processes), and its answers are compared with ``/proc``'s for the same processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from twice.core import processes
from twice.ledger import lease_holders, lock_holders

REPO = Path(__file__).resolve().parents[2]
LINUX = Path("/proc/self/stat").exists()


def _wait_for(condition: object, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "PORTABLE", True)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(["sleep", "60"])
    # past its exec (until then it is a copy of this Python) and asleep
    assert _wait_for(lambda: (processes.program(child.pid), processes.state(child.pid))
                     == ("sleep", "S"))
    yield child
    child.kill()
    child.wait()


def test_the_fallback_never_reads_proc(portable: None, tmp_path: Path) -> None:
    """Forced portable, a /proc that says otherwise is not read (macOS has none)."""
    fake = tmp_path / "proc"
    (fake / str(os.getpid())).mkdir(parents=True)
    (fake / str(os.getpid()) / "comm").write_text("not-me\n")
    (fake / str(os.getpid()) / "stat").write_text(f"{os.getpid()} (not-me) T 1 2 3\n")
    assert processes.program(os.getpid(), proc=fake) != "not-me"
    assert processes.state(os.getpid(), proc=fake) in ("R", "S")
    assert not processes.stopped(os.getpid(), proc=fake)


@pytest.mark.skipif(not LINUX, reason="compares the fallback with Linux's /proc")
def test_the_fallback_agrees_with_proc(sleeper: subprocess.Popen[bytes],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pid = sleeper.pid
    from_proc = (processes.state(pid), processes.program(pid), processes.started_at(pid))
    monkeypatch.setattr(processes, "PORTABLE", True)
    state, program, started = (processes.state(pid), processes.program(pid),
                               processes.started_at(pid))
    assert (state, program) == from_proc[:2] == ("S", "sleep")
    assert started is not None and from_proc[2] is not None
    assert abs(started - from_proc[2]) < 2  # ps says it to the second
    assert processes.command_mentions(pid, "sleep 60") is True
    assert processes.command_mentions(pid, "/elsewhere") is False


def test_a_stopped_process_is_seen_stopped(portable: None,
                                           sleeper: subprocess.Popen[bytes]) -> None:
    os.kill(sleeper.pid, signal.SIGSTOP)
    try:
        assert _wait_for(lambda: processes.stopped(sleeper.pid))
        assert processes.look(sleeper.pid).describe() == f"{sleeper.pid} sleep (stopped)"
    finally:
        os.kill(sleeper.pid, signal.SIGCONT)
    assert _wait_for(lambda: not processes.stopped(sleeper.pid))


def test_exited_processes_are_gone_zombies_included(portable: None) -> None:
    child = subprocess.Popen(["true"])
    assert _wait_for(lambda: processes.state(child.pid) == "Z")  # exited, not yet reaped
    assert processes.gone(child.pid)
    child.wait()
    assert processes.gone(child.pid) and processes.state(child.pid) is None
    assert not processes.gone(os.getpid())


def test_a_lease_holder_is_told_alive_then_exited(portable: None,
                                                  sleeper: subprocess.Popen[bytes]) -> None:
    import socket

    holder = f"{socket.gethostname()}:{sleeper.pid}:abcd1234"
    assert lease_holders.running_elsewhere(holder, datetime.now(UTC)) == sleeper.pid
    assert not lease_holders.exited(holder)
    sleeper.kill()
    sleeper.wait()
    assert lease_holders.running_elsewhere(holder) is None and lease_holders.exited(holder)


def test_a_pid_reused_after_the_holder_began_is_not_the_holder(
        portable: None, sleeper: subprocess.Popen[bytes]) -> None:
    import socket
    from datetime import timedelta

    holder = f"{socket.gethostname()}:{sleeper.pid}:abcd1234"
    began = datetime.now(UTC) - timedelta(hours=1)  # the holder began before this process
    assert lease_holders.running_elsewhere(holder, began) is None


@pytest.mark.skipif(not processes.shutil.which("lsof"), reason="the fallback names holders by lsof")
def test_who_has_a_ledger_open_is_named_by_lsof(portable: None, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    ledger.write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "f = open(sys.argv[1], 'rb'); print('ok', flush=True)\n"
                               "time.sleep(60)", str(ledger)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"ok"
        found = lock_holders.holders(str(ledger))
        assert [(h.pid, h.stopped) for h in found] == [(holder.pid, False)]
        assert "Processes with the ledger open" in lock_holders.holders_advice(str(ledger))
    finally:
        holder.kill()
        holder.wait()


def test_a_flock_holder_cannot_be_told_without_proc(portable: None, tmp_path: Path) -> None:
    with open(tmp_path / "f", "w") as handle:
        assert processes.flock_holder(handle.fileno()) is None


ORPHAN = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
print(child.pid, flush=True)
time.sleep(60)
"""

CHILD = """
import sys, threading, time
from twice.core import processes
processes.die_with_parent(int(sys.argv[1]))
watching = any(t.name == "twice-parent-watch" for t in threading.enumerate())
open(sys.argv[2], "w").write("watching" if watching else "pdeathsig")
time.sleep(60)
"""


@pytest.mark.parametrize("mode", ["portable", "linux"])
def test_a_child_dies_with_its_killed_parent(tmp_path: Path, mode: str) -> None:
    """kill -9 of the parent ends the child: through PR_SET_PDEATHSIG on Linux, through the
    thread watching the parent where it is missing (forced here)."""
    if mode == "linux" and not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"),
           "TWICE_PROCESSES": "portable" if mode == "portable" else ""}
    marker = tmp_path / "armed"
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN, CHILD, str(marker)], env=env,
                              stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert _wait_for(marker.exists, 30)
        assert _wait_for(lambda: marker.read_text() != "")
        assert marker.read_text() == ("watching" if mode == "portable" else "pdeathsig")
        assert not processes.gone(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait_for(lambda: processes.gone(child), 5)
    finally:
        if not processes.gone(child):
            os.kill(child, signal.SIGKILL)


def test_parquet_commits_with_two_renames_where_renameat2_is_missing(
        portable: None, tmp_path: Path) -> None:
    from datetime import date

    from twice.destinations import open_destination

    assert not processes.can_exchange()
    assert processes.exchange(tmp_path / "a", tmp_path / "b") is False
    dest = open_destination(f"parquet://{tmp_path}/ds?partition_column=day")
    assert dest.use_exchange is False  # type: ignore[attr-defined]
    day = date(2026, 11, 23)
    dest.replace_partition([{"day": day, "tag": "v1"}], day)
    dest.replace_partition([{"day": day, "tag": "v2"}], day)  # the swap: two renames
    assert [r["tag"] for r in dest.read_partition(day).to_pylist()] == ["v2"]
    assert not [p for p in (tmp_path / "ds").iterdir() if p.name.startswith(".twice-")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_renameat2_swaps_on_linux(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "from-a").touch()
    assert processes.can_exchange() and processes.exchange(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b" / "from-a").exists()
