"""Per-attempt timeouts with real sleeping threads and real child processes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import policy_workers as workers
import pytest

from twice.engine.timeouts import (
    AttemptCrashed,
    AttemptTimeout,
    Deadline,
    WorkflowTimeout,
    run_in_process,
    run_with_timeout,
)

# -- thread-based -------------------------------------------------------------------------------


def test_thread_returns_result_before_timeout() -> None:
    def slow_add(a: int, b: int) -> int:
        time.sleep(0.05)
        return a + b

    assert run_with_timeout(slow_add, 1.0, 2, b=3) == 5


def test_thread_propagates_the_attempts_own_exception() -> None:
    def broken() -> None:
        raise KeyError("schema changed")

    with pytest.raises(KeyError, match="schema changed"):
        run_with_timeout(broken, 1.0)


def test_thread_timeout_is_unknown_and_the_work_keeps_running() -> None:
    finished = threading.Event()

    def load() -> None:
        time.sleep(0.3)
        finished.set()  # the side effect still happens after the caller gave up

    started = time.monotonic()
    with pytest.raises(AttemptTimeout) as caught:
        run_with_timeout(load, 0.05)
    assert time.monotonic() - started < 0.25
    assert caught.value.outcome == "unknown"
    assert caught.value.terminated is False
    assert "may still be running" in str(caught.value)
    assert not finished.is_set()
    assert finished.wait(2.0), "the abandoned attempt should complete in the background"


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True])
def test_timeout_must_be_a_positive_finite_number(timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        run_with_timeout(lambda: None, timeout)


# -- process-based ------------------------------------------------------------------------------


def test_process_returns_result() -> None:
    assert run_in_process(workers.add, 10.0, 2, 3) == 5


def test_process_with_fork_start_method_returns_result() -> None:
    assert run_in_process(workers.add, 10.0, 4, b=5, start_method="fork") == 9


def test_process_propagates_exception_with_child_traceback() -> None:
    with pytest.raises(ValueError, match="bad input") as caught:
        run_in_process(workers.fail, 10.0, "bad input")
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "policy_workers.py" in notes and "in fail" in notes


def test_process_timeout_kills_a_busy_loop(tmp_path: Path) -> None:
    """The child would write 'finished' 1 s after starting; killed at the timeout, it never does."""
    with pytest.raises(AttemptTimeout) as caught:
        run_in_process(workers.busy_then_write, 0.8, str(tmp_path), 1.0)
    assert caught.value.terminated is True
    assert caught.value.outcome == "unknown"
    assert "remote work" in str(caught.value)
    started = tmp_path / "started"
    assert started.exists(), "the child must have been running when it was stopped"
    # Wait past the moment the loop would have finished (1 s after its own start), plus margin.
    time.sleep(max(0.0, float(started.read_text()) + 1.3 - time.time()))
    assert not (tmp_path / "finished").exists()


def test_process_that_ignores_sigterm_is_killed() -> None:
    started = time.monotonic()
    with pytest.raises(AttemptTimeout):
        run_in_process(workers.ignore_sigterm_and_sleep, 0.6, 30.0, grace=0.2)
    assert time.monotonic() - started < 5.0


def test_process_dying_without_a_result_is_a_crash_with_unknown_outcome() -> None:
    with pytest.raises(AttemptCrashed) as caught:
        run_in_process(workers.exit_abruptly, 10.0, 3)
    assert caught.value.exitcode == 3
    assert caught.value.outcome == "unknown"


# -- workflow deadline --------------------------------------------------------------------------


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_deadline_remaining_check_and_cap() -> None:
    clock = FakeClock()
    deadline = Deadline(40, clock=clock)
    assert deadline.started == 1000.0 and deadline.ends == 1040.0
    clock.now = 1015.0
    assert deadline.remaining() == 25.0
    assert deadline.elapsed() == 15.0
    deadline.check(needed=25.0)  # exactly fits, like the lab's load task at the deadline
    with pytest.raises(WorkflowTimeout, match="needs 26 s but only 25 s remain"):
        deadline.check(needed=26.0)
    assert deadline.cap(60.0) == 25.0
    assert deadline.cap(10.0) == 10.0
    assert deadline.cap(None) == 25.0
    clock.now = 1040.0
    assert deadline.expired() and deadline.remaining() == 0.0
    with pytest.raises(WorkflowTimeout, match="passed"):
        deadline.check()
    with pytest.raises(WorkflowTimeout):
        deadline.cap(5.0)


def test_deadline_with_explicit_start_on_the_real_monotonic_clock() -> None:
    deadline = Deadline(0.2, started=time.monotonic() - 0.1)
    assert 0 < deadline.remaining() <= 0.1
    time.sleep(0.15)
    with pytest.raises(WorkflowTimeout):
        deadline.check()


def test_deadline_refuses_a_nonsense_timeout() -> None:
    with pytest.raises(ValueError, match="timeout"):
        Deadline(0)


ORPHAN_PARENT = """
import sys
sys.path[:0] = sys.argv[2:]
from twice.engine.timeouts import run_in_process
from policy_workers import send_later
run_in_process(send_later, 30, sys.argv[1])
"""


@pytest.mark.parametrize("processes_mode", ["linux", "portable"])
def test_an_attempt_child_does_not_outlive_its_killed_holder(tmp_path: Path,
                                                             processes_mode: str) -> None:
    """Found by a probe: a holder killed with ``kill -9`` left its process-isolated attempt
    running; the next holder saw the holder gone, heard "not found" from the service, sent
    again, and the orphan sent too. The child now dies with the process that started it:
    by ``PR_SET_PDEATHSIG`` on Linux, by a thread watching its parent elsewhere (forced by
    ``TWICE_PROCESSES=portable``)."""
    import os
    import signal
    import subprocess
    import sys

    from twice.core import processes

    root = Path(__file__).resolve().parents[2]
    if processes_mode == "linux" and not Path("/proc/self").exists():
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    env = {**os.environ, "TWICE_PROCESSES": processes_mode}
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN_PARENT, str(tmp_path),
                               str(Path(__file__).parent), str(root / "src")], cwd=root,
                              env=env)
    deadline = time.monotonic() + 30
    while not (tmp_path / "child.pid").exists():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    child = int((tmp_path / "child.pid").read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    time.sleep(3)  # past the moment the child would have sent
    assert not (tmp_path / "sent").exists()
    assert processes.gone(child)


def test_a_forkserver_child_runs_and_returns() -> None:
    """Found by a probe: the check that the child's parent is its holder failed under
    forkserver (the fork server is the parent), so every such child exited at once."""
    from twice.engine.timeouts import run_in_process

    assert run_in_process(workers.add, 30, 1, 2, start_method="forkserver") == 3
