"""A lease whose holder is a process of this host that has exited holds nothing: the unit is
taken over at once (a rerun right after ``kill -9`` need not wait out the lease), recorded as a
takeover like an expiry, with the earlier attempt's outcome unknown. A live holder, a holder on
another host and a holder id twice did not make keep their lease until it expires."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from twice.core.unit import UnitOfWork
from twice.ledger import LEASE_TAKEOVER_STATE, Ledger, LedgerError
from twice.ledger.lease_holders import exited, new_holder

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux")


def _holder(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:0123abcd"


@pytest.fixture
def running() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


def _gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # exited and reaped: no process has this pid now (short of reuse)
    return child.pid


def test_exited_only_for_a_process_of_this_host_that_is_gone(
        running: subprocess.Popen[bytes]) -> None:
    assert not exited(new_holder())  # this process
    assert not exited(_holder(running.pid))
    assert exited(_holder(_gone_pid()))
    assert exited(f"{socket.gethostname()}:{_gone_pid()}")  # a worker's default name
    assert not exited(f"{socket.gethostname()}:{running.pid}")
    assert not exited(f"another-host.example:{_gone_pid()}:0123abcd")
    assert not exited("worker-1") and not exited(f"{socket.gethostname()}:1:not-hex!")
    # an Airflow try (found by a probe: named without its process, a killed try held the
    # unit for the whole lease, and Airflow's retries ran out waiting on it)
    assert exited(f"{socket.gethostname()}:{_gone_pid()}:airflow:d.t:run_1:try-1")
    assert not exited(f"{socket.gethostname()}:{running.pid}:airflow:d.t:run_1:try-1")
    running.kill()
    for _ in range(100):  # killed, not yet reaped by its parent (us): a zombie holds nothing
        if exited(_holder(running.pid)):
            break
        time.sleep(0.02)
    assert exited(_holder(running.pid))


def test_the_lease_of_an_exited_holder_is_taken_over_at_once(
        ledger: Ledger, uow: UnitOfWork) -> None:
    dead = _holder(_gone_pid())
    first = ledger.acquire_lease(uow.uow_id, dead, 300)
    assert first.acquired
    ledger.begin_attempt(uow.uow_id, holder=dead)
    taken = ledger.acquire_lease(uow.uow_id, "rerun", 300)  # long before the lease expires
    assert taken.acquired and taken.taken_over_from == dead and taken.token > first.token
    assert [a.outcome for a in ledger.attempts(uow.uow_id)] == ["unknown"]
    (takeover,) = [o for o in ledger.observations(uow.uow_id)
                   if o.state == LEASE_TAKEOVER_STATE]
    assert takeover.detail["holder_exited"] is True
    assert "has exited" in ledger.timeline(uow.uow_id)[-1].summary


def test_a_live_holder_keeps_its_lease(ledger: Ledger, uow: UnitOfWork,
                                       running: subprocess.Popen[bytes]) -> None:
    alive = _holder(running.pid)
    assert ledger.acquire_lease(uow.uow_id, alive, 300).acquired
    refused = ledger.acquire_lease(uow.uow_id, "rerun", 300)
    assert not refused.acquired and refused.holder == alive
    with pytest.raises(LedgerError, match="is leased by"):
        ledger.begin_attempt(uow.uow_id, holder="rerun")


PIPELINE = """
import time
from pathlib import Path
import pyarrow as pa
from twice import Pipeline, Schedule, TaskContext

ROOT = Path({root!r})
pipeline = Pipeline("killed", schedule=Schedule.daily("UTC"))

@pipeline.task(destination="sqlite://{root}/wh.db?partition_column=day#loaded",
               write="replace", safe_repeat=True)
def load(ctx: TaskContext):
    marker = ROOT / "started"
    if not marker.exists():
        marker.write_text("1")
        time.sleep(60)  # the first attempt is killed here
    day = ctx.interval.start.date()
    return pa.table({{"day": pa.array([day] * 3, pa.date32()), "id": [1, 2, 3]}})
"""


def test_a_rerun_right_after_kill_9_takes_the_unit_over(tmp_path: Path) -> None:
    (tmp_path / "pipeline.py").write_text(textwrap.dedent(PIPELINE.format(root=str(tmp_path))))
    command = [sys.executable, "-m", "twice", "run", str(tmp_path / "pipeline.py"),
               "--interval", "2026-11-30", "--ledger", str(tmp_path / "ledger.db"),
               "--deadline", "none"]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        if (tmp_path / "started").exists():
            break
        time.sleep(0.05)
    first.kill()
    first.wait()
    again = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    (unit_run,) = json.loads(again.stdout)["units"]
    assert any(note.startswith("took over the lease of exited process")
               for note in unit_run["notes"]), unit_run
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", read_only=True) as ledger:
        (unit,) = ledger.units()
        assert [a.outcome for a in ledger.attempts(unit.uow_id)] == ["failed-transient",
                                                                     "succeeded"]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_process_that_reused_a_holders_pid_is_not_the_holder() -> None:
    """Found by a probe: a holder id whose pid another process took later (pid 1 here, or a
    reused pid) counted as the holder still running, so its unit stayed unknown for as long
    as that process lived. A process that started after the holder began is another one."""
    from datetime import UTC, datetime, timedelta

    from twice.ledger.lease_holders import running_elsewhere

    host = socket.gethostname()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        began = datetime.now(UTC)
        holder = f"{host}:{child.pid}:0123abcd"
        assert running_elsewhere(holder, began) == child.pid  # started before: the holder
        assert running_elsewhere(holder) == child.pid
        long_ago = began - timedelta(days=365 * 30)
        assert running_elsewhere(holder, long_ago) is None  # started after: another process
        assert running_elsewhere(f"{host}:1:0123abcd", long_ago) is None
    finally:
        child.kill()
        child.wait()
    assert running_elsewhere(holder, began) is None  # gone
