"""Real processes killed or paused mid-attempt: the commit record settles the outcome and the
fencing token keeps a paused (zombie) writer from overwriting a newer run. Final tables are
compared row by row with an expectation computed without twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lifecycle.story import (
    DAYS,
    build,
    count_calls,
    default_rows,
    expected_scaled,
    spec,
    table_rows,
    write_source,
)
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
DAY = Schedule.daily("UTC").interval_for(DAYS[0])
TTL = 1.0

CHILD = """
import os, signal, sys, threading
from pathlib import Path
from tests.lifecycle.story import build, DAYS
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.define.schedule import Schedule

root, engine, mode, pg = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] or None
hooks = {}
if mode == "kill-before-write":
    hooks["transform"] = lambda ctx: os.kill(os.getpid(), signal.SIGKILL)
elif mode == "kill-after-write":
    hooks["transform_after"] = lambda ctx: os.kill(os.getpid(), signal.SIGKILL)
elif mode == "stop-before-write":
    def pause(ctx):
        (root / "paused").write_text(str(ctx.attempt))
        # to this thread: it stops before its next instruction (a kill() to the process may
        # let it run on into the write while the group stop is delivered)
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    hooks["transform"] = pause
pipeline = build(root, engine, pg, hooks=hooks)
with Ledger.open(f"sqlite:///{root / 'ledger.db'}") as ledger:
    result = Executor(pipeline, ledger, holder="child", lease_ttl=%(ttl)s).run(
        Schedule.daily("UTC").interval_for(DAYS[0]))
    print({u.task: u.outcome for u in result.units})
"""


def _child(root: Path, engine: str, mode: str, pg: str | None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD % {"ttl": TTL}, str(root), engine, mode, pg or ""],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _day_rows(root: Path) -> list[tuple[str, int, int]]:
    return [r for r in expected_scaled(root) if r[0] == DAYS[0].isoformat()]


@pytest.mark.parametrize("mode", ["kill-before-write", "kill-after-write"])
def test_sigkill_mid_attempt_without_reconcile_is_settled(
    root: Path, engine: str, pg: str | None, ledger: Ledger, mode: str
) -> None:
    child = _child(root, engine, mode, pg)
    child.wait(timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    time.sleep(TTL + 0.2)  # the killed holder's lease expires
    result = Executor(build(root, engine, pg), ledger, holder="parent").run(DAY)
    assert result.ok, result.to_dict()
    transform = result.unit("transform")
    outcomes = [a.outcome for a in ledger.attempts(transform.uow_id or "")]
    if mode == "kill-after-write":
        assert outcomes == ["succeeded"]  # the commit record proved it; not re-executed
        assert count_calls(root)["transform"] == 1
    else:
        assert outcomes == ["failed-transient", "succeeded"]  # no record: safe to retry
        assert count_calls(root)["transform"] == 2
    assert table_rows(spec(engine, root, "scaled", pg)) == _day_rows(root)


def test_paused_writer_is_fenced_after_a_takeover(
    root: Path, engine: str, pg: str | None, ledger: Ledger
) -> None:
    """SIGSTOP a worker inside its attempt; the source changes and another holder runs the
    new unit and writes; SIGCONT: the paused writer's older token is refused, nothing of its
    stale rows lands."""
    child = _child(root, engine, "stop-before-write", pg)
    try:
        deadline = time.monotonic() + 120
        while not (root / "paused").exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(TTL + 0.2)
        write_source(root, DAYS[0], default_rows(DAYS[0], bump=11))
        result = Executor(build(root, engine, pg), ledger, holder="parent").run(DAY)
        assert result.ok, [(u.task, u.outcome, u.reason, u.error) for u in result.units]
        assert table_rows(spec(engine, root, "scaled", pg)) == _day_rows(root)
    finally:
        os.kill(child.pid, signal.SIGCONT)
    out, err = child.communicate(timeout=120)
    assert "Traceback" not in err, err
    # Before judging transform's slot, the parent settled the zombie's unit (another unit of
    # the slot, its lease run out: twice.engine.siblings): no commit record, so the slot was
    # sealed and the attempt closed as not written. The zombie, resumed, is refused by the
    # seal's newer token and finds its attempt closed by another holder.
    assert "'transform': 'leased-elsewhere'" in out, out + err
    stale = [unit for unit in ledger.units(pipeline="lifecycle", task="transform")
             if ledger.latest_attempt(unit.uow_id) is not None
             and ledger.latest_attempt(unit.uow_id).holder != "parent"]
    assert [ledger.latest_attempt(unit.uow_id).outcome for unit in stale] == ["failed-transient"]
    # the zombie wrote nothing: the table still holds the newer run's rows
    assert table_rows(spec(engine, root, "scaled", pg)) == _day_rows(root)
    errors = [
        e for unit in ledger.units(pipeline="lifecycle", task="transform")
        for e in ledger.errors(unit.uow_id)
    ]
    assert any("FencedWriteError" in e.error_class for e in errors)
