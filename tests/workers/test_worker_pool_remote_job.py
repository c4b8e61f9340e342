"""Issue 19 across real processes: slots kept for a remote job survive the process that took
them, and are released only when a later process observes the job ended.

A child process runs the heavy task (2 slots of a 2-slot pool); its remote job is RUNNING and
the child is killed (SIGKILL) while it observes the job. The ledger (a SQLite file shared by the
processes on this host) still holds the 2 slots for that job after the pool's TTL has passed, so
a light task of another process is refused with a recorded reason. Once the job is DONE, a
process that takes the heavy unit over observes it, the slots are released and the light task
runs. The "remote service" is a state file both processes read (a FakeBigQuery lives in one
process's memory).
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

from twice.define.load import load_pipeline
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.ledger.lease import job_holder

ROOT = Path(__file__).resolve().parents[2]
TODAY = "2026-11-30"

PIPELINE = textwrap.dedent('''
    import os
    from datetime import UTC, datetime
    from pathlib import Path

    from twice import Pipeline
    from twice.define.pipeline import RemoteState
    from twice.define.schedule import Schedule
    from twice.remote import JobState, JobStatus

    SERVICE = Path(os.environ["POOL_JOB_DIR"])
    pipeline = Pipeline("pooljob", schedule=Schedule.daily("UTC"))
    pipeline.pool("warehouse", slots=2)


    def observe(job_id, ctx):
        (SERVICE / "observing").write_text(job_id)
        return RemoteState((SERVICE / "state").read_text().strip())


    @pipeline.task(pool="warehouse", slots=2, timeout=5, safe_repeat=True, reconcile=observe,
                   destination="bq:warehouse.heavy")
    def heavy(ctx):
        (SERVICE / "state").write_text("running")
        return JobStatus(ctx.job_id, JobState.RUNNING, datetime.now(UTC), service="fake")


    @pipeline.task(pool="warehouse", slots=1, timeout=5)
    def light(ctx):
        (SERVICE / "light-started").write_text((SERVICE / "state").read_text())
''')

CHILD = textwrap.dedent('''
    import sys
    from twice.define.load import load_pipeline
    from twice.engine.executor import Executor
    from twice.ledger import Ledger

    path, url = sys.argv[1], sys.argv[2]
    pipeline = load_pipeline(path)
    interval = pipeline.schedule.interval_for(__import__("datetime").date(2026, 11, 30))
    with Ledger.open(url) as ledger:
        Executor(pipeline, ledger, lease_ttl=1.0, pool_ttl=0.3, poll_interval=0.05,
                 observe_timeout=600, holder="child").run(interval, ["heavy"])
''')


def _wait_for(path: Path, seconds: float) -> None:
    ends = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < ends, f"{path.name} never appeared"
        time.sleep(0.02)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_slots_kept_for_a_job_outlive_a_killed_process_until_the_job_is_observed_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = tmp_path / "service"
    service.mkdir()
    monkeypatch.setenv("POOL_JOB_DIR", str(service))
    monkeypatch.setattr(sys, "path", list(sys.path))
    pipeline_file = tmp_path / "pooljob.py"
    pipeline_file.write_text(PIPELINE)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    paths = [p for p in (os.environ.get("PYTHONPATH"), str(ROOT / "src")) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(pipeline_file), url], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(service / "observing", 60)  # the job is RUNNING and the child observes it
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, err
    time.sleep(0.6)  # well past the pool TTL (0.3 s) the child's ledger leases had

    pipeline = load_pipeline(pipeline_file)
    interval = pipeline.schedule.interval_for(__import__("datetime").date(2026, 11, 30))
    heavy_uow = pipeline.unit_of_work("heavy", interval).uow_id
    with Ledger.open(url) as ledger:
        held = ledger.pool_holdings("warehouse")
        assert [(h.holder, h.slots) for h in held] == [(job_holder(heavy_uow, 1), 2)]
        assert ledger.job_pool_holdings(heavy_uow) == held

        def run(task: str, observe_timeout: float = 0.3) -> object:
            return Executor(pipeline, ledger, poll_interval=0.05, pool_poll_interval=0.01,
                            observe_timeout=observe_timeout, lease_ttl=1.0).run(interval, [task])

        light = run("light").unit("light")  # type: ignore[attr-defined]
        assert light.outcome == "blocked" and job_holder(heavy_uow, 1) in light.reason
        assert not (service / "light-started").exists()

        (service / "state").write_text("succeeded")  # the job ends; nobody has seen it yet
        time.sleep(1.1)  # the dead child's unit lease (1 s) expires
        heavy = run("heavy", observe_timeout=5).unit("heavy")  # type: ignore[attr-defined]
        assert heavy.outcome == "succeeded" and heavy.attempts == 0
        assert any("took over" in note for note in heavy.notes)
        assert ledger.pool_holdings("warehouse") == []
        assert run("light").unit("light").ok  # type: ignore[attr-defined]
        assert (service / "light-started").read_text() == "succeeded"
