"""An operator's resolution means one thing for the next run, with no second step (issue 36).

A ``notify`` task whose effect twice cannot see (no owned write, no ``reconcile=``, not
``safe_repeat``) is cut off three ways: its attempt times out, its code calls ``sys.exit``,
and its process is killed with SIGKILL mid-attempt. Each leaves an unknown outcome that only a
person can settle with ``twice resolve``. The receiver is a file the task appends one line to
per notification, so the test counts what really went out, independently of the ledger.

- ``--as failed`` (the effect did not happen): the next ``twice run`` executes the task,
  without ``--repeat``, and the notification goes out exactly once.
- ``--as succeeded`` (it happened): the next run does not execute it.
- ``--as failed-after-acting`` (it acted, then failed: a partial effect): the next run holds
  it until the operator names it with ``--repeat``.

Everything runs through the real CLI in subprocesses, on a real SQLite ledger.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAY = "2026-11-30"
OPERATOR = "alice"

PIPELINE = '''\
"""Notify the desk that a day's numbers are out: an effect twice cannot see into."""
import os
import sys
import time
from datetime import date
from pathlib import Path

from twice import Pipeline, Schedule, TaskContext

pipeline = Pipeline("desk_notify", schedule=Schedule.daily("UTC"))
HERE = Path(__file__).parent


@pipeline.task(timeout=1)
def notify(ctx: TaskContext) -> None:
    """Deliver one notification per call to the receiver (the outbox file)."""
    fault = os.environ.get("NOTIFY_FAULT", "")
    (HERE / "started").write_text(ctx.job_id)
    if fault == "timeout":
        time.sleep(5)  # past the 1 s attempt timeout, before anything is sent
    elif fault == "exit":
        sys.exit(3)  # task code gives up before sending
    elif fault == "kill":
        time.sleep(60)  # the test kills the process here, before anything is sent
    with (HERE / "outbox").open("a") as outbox:
        outbox.write(ctx.job_id + "\\n")
'''


def twice(root: Path, *args: str, fault: str = "", columns: int = 200
          ) -> subprocess.CompletedProcess[str]:
    """``twice ARGS`` through the real CLI in ``root``, the ledger there."""
    return subprocess.run(
        [sys.executable, "-m", "twice", *args, "--ledger", str(root / "ledger.db")],
        cwd=root, env=_env(fault, columns), capture_output=True, text=True, timeout=120,
        check=False,
    )


def _env(fault: str, columns: int = 200) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TWICE_", "NOTIFY_"))}
    env["PYTHONPATH"] = f"{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["COLUMNS"] = str(columns)
    if fault:
        env["NOTIFY_FAULT"] = fault
    return env


def run_day(root: Path, *extra: str, fault: str = "") -> subprocess.CompletedProcess[str]:
    return twice(root, "run", str(root / "notify.py"), "--interval", DAY, "--deadline", "none",
                 "--lease-ttl", "1", *extra, fault=fault)


def sent(root: Path) -> list[str]:
    """What the receiver got, one job id a notification."""
    outbox = root / "outbox"
    return outbox.read_text().splitlines() if outbox.exists() else []


def unit_outcome(root: Path) -> tuple[str, str]:
    """(unit id, latest attempt outcome) from ``twice status --json``."""
    done = twice(root, "status", "--json")
    assert done.returncode in (0, 1), done.stderr
    (unit,) = json.loads(done.stdout)["units"]
    return unit["id"], unit["outcome"]


def cut_off(root: Path, how: str) -> str:
    """Run the day with the attempt cut off ``how``; return the unit id left unknown."""
    if how == "kill":
        child = subprocess.Popen(
            [sys.executable, "-m", "twice", "run", str(root / "notify.py"), "--interval", DAY,
             "--deadline", "none", "--lease-ttl", "1", "--ledger", str(root / "ledger.db")],
            cwd=root, env=_env("kill"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )
        try:
            waited = time.monotonic()
            while not (root / "started").exists():
                assert child.poll() is None, child.communicate()
                assert time.monotonic() - waited < 60, "the attempt never started"
                time.sleep(0.05)
            child.send_signal(signal.SIGKILL)  # mid-attempt, before it sends anything
        finally:
            child.kill()
            child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL
        time.sleep(1.5)  # the killed run's 1 s lease expires
        # Nothing settles an effect twice cannot see: the next run finds it unknown.
        after = run_day(root)
        assert after.returncode == 1, after.stdout + after.stderr
    else:
        done = run_day(root, fault=how)
        assert done.returncode == 1, done.stdout + done.stderr
    assert sent(root) == []
    uow, outcome = unit_outcome(root)
    assert outcome == "unknown", outcome
    return uow


def resolve(root: Path, uow: str, asserted: str, note: str) -> subprocess.CompletedProcess[str]:
    done = twice(root, "resolve", uow, "--as", asserted, "--note", note,
                 "--operator", OPERATOR)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "notify.py").write_text(PIPELINE)
    return tmp_path


CUTS = ["timeout", "exit", "kill"]


@pytest.mark.parametrize("how", CUTS)
def test_resolved_failed_runs_again_without_repeat(root: Path, how: str) -> None:
    uow = cut_off(root, how)
    resolve(root, uow, "failed", "receiver log has no notification for that job id")

    again = run_day(root)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "held" not in again.stdout
    assert len(sent(root)) == 1  # executed once more: the one notification goes out
    assert unit_outcome(root)[1] == "succeeded"

    settled = run_day(root)  # and not again: it succeeded
    assert settled.returncode == 0, settled.stdout + settled.stderr
    assert len(sent(root)) == 1


DRIVERS = {
    "backfill": ("backfill", "--interval", DAY),
    "worker": ("worker", "--interval", DAY, "--deadline", "none", "--once", "--lease-ttl", "1"),
}


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_every_driver_executes_after_resolved_failed(root: Path, driver: str) -> None:
    """``twice backfill`` and ``twice worker`` claim units the way ``twice run`` does: the
    resolution means the same to them."""
    command, *options = DRIVERS[driver]
    uow = cut_off(root, "exit")
    resolve(root, uow, "failed", "receiver log has no notification for that job id")

    again = twice(root, command, str(root / "notify.py"), *options)
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(sent(root)) == 1
    assert unit_outcome(root)[1] == "succeeded"


@pytest.mark.parametrize("how", CUTS)
def test_resolved_succeeded_is_not_run_again(root: Path, how: str) -> None:
    uow = cut_off(root, how)
    resolve(root, uow, "succeeded", "receiver log shows the notification for that job id")

    again = run_day(root)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sent(root) == []  # the operator said it went out: not sent a second time
    assert "asserted by operator alice" in again.stdout


@pytest.mark.parametrize("how", CUTS)
def test_resolved_failed_after_acting_is_held_until_repeat(root: Path, how: str) -> None:
    uow = cut_off(root, how)
    resolve(root, uow, "failed-after-acting", "receiver got 40 of the 90 recipients, then an error")

    held = run_day(root)
    assert held.returncode == 1, held.stdout + held.stderr
    assert "held" in held.stdout and "--repeat notify" in held.stdout
    assert sent(root) == []

    repeated = run_day(root, "--repeat", "notify")
    assert repeated.returncode == 0, repeated.stdout + repeated.stderr
    assert len(sent(root)) == 1


def test_an_invalid_resolution_names_the_field_and_exits_2(root: Path) -> None:
    uow = cut_off(root, "exit")
    done = twice(root, "resolve", uow, "--as", "maybe", "--note", "n")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--as" in done.stderr and "failed-after-acting" in done.stderr
    assert "Traceback" not in done.stderr
    assert unit_outcome(root)[1] == "unknown"  # nothing recorded


@pytest.mark.parametrize(("asserted", "health"), [("failed", "waiting"),
                                                   ("failed-after-acting", "held")])
def test_reports_show_which_resolution_was_asserted(
    root: Path, asserted: str, health: str
) -> None:
    """Both failures close the attempt failed-transient; only the operator's words say whether
    the next run executes it, so every report shows them, as asserted, never as verified."""
    uow = cut_off(root, "exit")
    note = "checked the receiver log"
    said = f"asserted by an operator ({OPERATOR}), --as {asserted} ("
    done = resolve(root, uow, asserted, note)
    assert said in done.stdout
    expected_next = {"failed": "Next run: executed, no --repeat needed.",
                     "failed-after-acting": "Next run: held until --repeat names the task."}
    assert expected_next[asserted] in done.stdout

    status = twice(root, "status", "--json")
    (unit,) = json.loads(status.stdout)["units"]
    assert (unit["asserted"], unit["asserted_by"], unit["health"]) == (asserted, OPERATOR, health)
    assert unit["health_basis"] == "asserted" and said in unit["health_reason"]
    assert said in twice(root, "status", columns=500).stdout

    explain = twice(root, "explain", uow).stdout
    assert f"[asserted] resolved-{asserted} (attempt 1)" in explain
    assert f"[asserted] attempt 1 resolved as failed-transient (--as {asserted}:" in explain

    handover = twice(root, "handover").stdout
    assert f"| 1 | {asserted} | asserted by an operator ({OPERATOR}) | {note} |" in handover

    update = twice(root, "update").stdout
    assert said in update
    for text in (explain, handover, update):
        assert "verified" not in " ".join(line for line in text.splitlines() if said in line)


def test_an_airflow_try_after_the_task_is_cleared_executes_it(root: Path) -> None:
    """The Airflow runner (no Airflow needed: it only maps a unit's result to a verdict) claims
    through the same executor. A notify cut off in its try fails the try (not retried by
    Airflow); the operator resolves it ``--as failed`` and clears the task, which opens a new
    retry budget, and that try executes the notification."""
    from twice.define.load import load_pipeline
    from twice.define.schedule import Schedule
    from twice.drivers.airflow.runner import first_try_of_budget, run_try
    from twice.ledger import Ledger

    pipeline = load_pipeline(root / "notify.py")
    interval = Schedule.daily("UTC").interval_for(date.fromisoformat(DAY))
    with Ledger.open(root / "ledger.db") as ledger, pytest.MonkeyPatch.context() as env:
        env.setenv("NOTIFY_FAULT", "exit")
        first = run_try(pipeline, "notify", ledger, interval, holder="airflow-try-1",
                        continue_run=not first_try_of_budget(1, 1, 0))
        assert (first.verdict, first.unit.outcome) == ("fail", "unknown-needs-reconcile")
        env.delenv("NOTIFY_FAULT")
        ledger.record_resolution(first.unit.uow_id, outcome="failed", operator=OPERATOR,
                                 note="receiver log has no notification for that job id")
        # cleared: try 2 of max_tries 2 (1 + retries 0 raised by the clear) opens a budget
        cleared = run_try(pipeline, "notify", ledger, interval, holder="airflow-try-2",
                          continue_run=not first_try_of_budget(2, 2, 0))
    assert cleared.verdict == "succeeded", cleared.message
    assert len(sent(root)) == 1


def test_switching_the_rule_off_brings_the_second_step_back(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for a simulation: the engine asks ``twice.core.resolution.next_run_after``
    and nothing else, so replacing it with "always hold" brings today's failure back."""
    from twice.core import resolution
    from twice.define.load import load_pipeline
    from twice.define.schedule import Schedule
    from twice.engine.executor import Executor
    from twice.ledger import Ledger

    uow = cut_off(root, "exit")
    resolve(root, uow, "failed", "receiver log has no notification for that job id")
    monkeypatch.setattr(resolution, "next_run_after", lambda _: resolution.NextRun.HOLD)
    interval = Schedule.daily("UTC").interval_for(date.fromisoformat(DAY))
    with Ledger.open(root / "ledger.db") as ledger:
        unit = Executor(load_pipeline(root / "notify.py"), ledger).run(interval).unit("notify")
    assert unit.outcome == "held" and "resolved by operator alice as failed" in unit.reason
    assert sent(root) == []
