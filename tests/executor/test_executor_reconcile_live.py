"""A reconciler's "not found" settles nothing while the attempt can still make its request.

A task that is not ``safe_repeat`` and has ``reconcile=`` sends its request itself. When its
attempt timed out in a thread (Python cannot stop it) or its holder is paused past its lease,
"no such job" only means "not yet": the request may still be sent. Closing the attempt as
"never arrived" and running it again sends the effect twice. So twice waits for a thread of its
own, and leaves the outcome unknown while the attempt's thread or holder process still exists;
once they are gone, the service's answer settles it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.executor.helpers import day, outcomes

from twice.define.pipeline import Pipeline, RemoteState, TaskContext
from twice.define.schedule import Schedule
from twice.engine.executor import Executor, UnitResult
from twice.ledger import Ledger


def slow_sender(log: Path, *, first_takes: float) -> Pipeline:
    """``send`` appends its job id to ``log`` (the effect); attempt 1 takes ``first_takes`` s."""
    pipeline = Pipeline("live_send", schedule=Schedule.daily("UTC"))

    def reconcile(job_id: str, ctx: TaskContext) -> RemoteState:
        sent = log.exists() and job_id in log.read_text().split()
        return RemoteState.SUCCEEDED if sent else RemoteState.NOT_FOUND

    @pipeline.task(timeout=0.2, reconcile=reconcile)
    def send(ctx: TaskContext) -> None:
        if ctx.attempt == 1:
            time.sleep(first_takes)
        with log.open("a") as out:
            out.write(f"{ctx.job_id}\n")

    return pipeline


def run_once(pipeline: Pipeline, ledger: Ledger, observe_timeout: float) -> UnitResult:
    """The day's one unit, run by an executor that observes for ``observe_timeout`` s."""
    executor = Executor(pipeline, ledger, observe_timeout=observe_timeout, poll_interval=0.05)
    return executor.run(day()).units[0]


@pytest.mark.parametrize(("first_takes", "observe", "first_outcome"), [
    (0.8, 10.0, "succeeded"),  # the thread ends within the observe budget: waited for
    (1.5, 0.2, "unknown-needs-reconcile"),  # it outlives it: "not found" settles nothing
])
def test_a_timed_out_thread_is_waited_for_and_its_not_found_settles_nothing(
    tmp_path: Path, ledger_url: str, first_takes: float, observe: float, first_outcome: str
) -> None:
    log = tmp_path / "sent.log"
    pipeline = slow_sender(log, first_takes=first_takes)
    with Ledger.open(ledger_url) as ledger:
        unit = run_once(pipeline, ledger, observe)
        assert unit.outcome == first_outcome, unit.reason
        if first_outcome != "succeeded":
            assert "still runs" in unit.reason
            assert outcomes(ledger, unit.uow_id) == ["unknown"]  # not "failed-transient"
            assert not log.exists()
            deadline = time.monotonic() + 10
            while not log.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        settled = run_once(pipeline, ledger, observe)
        assert settled.outcome == "succeeded", settled.reason
        assert outcomes(ledger, unit.uow_id) == ["succeeded"]
    assert len(log.read_text().split()) == 1  # sent once, by attempt 1's late thread


PAUSING = textwrap.dedent('''
    import os, signal, time
    from pathlib import Path
    from twice import Pipeline, RemoteState, Schedule
    HERE = Path(__file__).parent
    LOG = HERE / "sent.log"
    pipeline = Pipeline("live_pause", schedule=Schedule.daily("UTC"))

    def reconcile(job_id, ctx):
        sent = LOG.exists() and job_id in LOG.read_text().split()
        return RemoteState.SUCCEEDED if sent else RemoteState.NOT_FOUND

    @pipeline.task(reconcile=reconcile)
    def send(ctx):
        if os.environ.get("PAUSE_BEFORE_SENDING"):
            (HERE / "started").write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)  # paused past its lease, before the effect
            time.sleep(0.5)  # a process-wide stop lands asynchronously in a threaded process
        with LOG.open("a") as out:
            out.write(ctx.job_id + "\\n")
''')

CHILD = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[1])
    import pausing
    from tests.executor.helpers import day
    from twice.engine.executor import Executor, UnitResult
    from twice.ledger import Ledger
    with Ledger.open(sys.argv[2]) as ledger:
        Executor(pausing.pipeline, ledger, lease_ttl=1).run(day())
''')


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_not_found_while_the_paused_holder_still_exists_leaves_the_outcome_unknown(
    tmp_path: Path, ledger_url: str
) -> None:
    (tmp_path / "pausing.py").write_text(PAUSING)
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), ledger_url],
        env={**os.environ, "PAUSE_BEFORE_SENDING": "1",
             "PYTHONPATH": os.pathsep.join([str(root), str(root / "src")])},
        cwd=root,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            (tmp_path / "started").exists() and _state(child.pid) == "T"
        ):
            assert child.poll() is None, "the child ended before pausing"
            time.sleep(0.05)
        time.sleep(1.5)  # past the paused holder's 1 s lease
        sys.path.insert(0, str(tmp_path))
        sys.modules.pop("pausing", None)
        import pausing  # type: ignore[import-not-found]

        with Ledger.open(ledger_url) as ledger:
            taken = Executor(pausing.pipeline, ledger, lease_ttl=5).run(day()).units[0]
            assert taken.outcome == "unknown-needs-reconcile", taken.reason
            assert f"{child.pid}" in taken.reason and "still exists" in taken.reason
            assert outcomes(ledger, taken.uow_id) == ["unknown"]
            assert not (tmp_path / "sent.log").exists()
            from twice.reports import gather  # reports name the live process as the cause

            health = gather(ledger).unit(taken.uow_id).status
            assert str(health.state) == "unknown" and f"{child.pid}" in health.text
            os.kill(child.pid, signal.SIGCONT)  # the paused holder sends, late
            child.wait(timeout=60)
            settled = Executor(pausing.pipeline, ledger, lease_ttl=5).run(day()).units[0]
            assert settled.outcome == "succeeded", settled.reason
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    assert len((tmp_path / "sent.log").read_text().split()) == 1
