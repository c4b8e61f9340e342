"""Issue 19: pool slots stay held while a remote job that took them may still run.

A heavy task (2 slots of a 2-slot pool) submits a FakeBigQuery job and returns while it is
RUNNING. Its slots are kept -- in this process while the run observes the job, and in the
ledger, keyed by the unit's attempt, after the run ends -- until a reconcile observes the job
ended (or an operator resolves the attempt). A light task (1 slot) of the same pool never
starts beside the running heavy job.

"Another run" here is a second ``Executor`` in another thread with its OWN ledger connection
(``Ledger.open`` on the same SQLite file), sharing the one ``ManualClock`` the fake service
runs on (a manual clock cannot be shared across processes); the cross-process case, where the
process that took the slots dies, is ``tests/workers/test_worker_pool_remote_job.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.executor.helpers import ManualClock, day, observed

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline
from twice.define.schedule import Schedule
from twice.engine.executor import Executor
from twice.ledger import Ledger
from twice.ledger.lease import job_holder
from twice.remote import JobState, reconcile_job, submit_or_inspect
from twice.testing.fake_bigquery import FakeBigQuery

HEAVY_JOB_SECONDS = 600.0


class Witness:
    """What the light task saw when it started: the heavy job's state and the pool's use."""

    def __init__(self, bq: FakeBigQuery, ledger_url: str, clock: ManualClock) -> None:
        self.bq, self.url, self.clock = bq, ledger_url, clock
        self.heavy_job: str | None = None
        self.light_starts: list[dict[str, Any]] = []
        self.peak = 0
        self.submitted = threading.Event()

    def heavy_running(self) -> bool:
        if self.heavy_job is None or self.heavy_job not in self.bq.jobs:
            return False
        return self.bq.get(self.heavy_job).state is not JobState.DONE

    def light_started(self) -> None:
        with Ledger.open(self.url, clock=self.clock) as ledger:
            held = sum(h.slots for h in ledger.pool_holdings("warehouse"))
        running = self.heavy_running()
        # slots really in use: the light one, plus 2 if the heavy job is still running
        use = 1 + (2 if running else 0)
        self.peak = max(self.peak, use)
        self.light_starts.append({"heavy_running": running, "ledger_slots": held})


def pipeline_for(w: Witness, *, reconcile_sleep: float = 0.0) -> Pipeline:
    pipeline = Pipeline("pools", schedule=Schedule.daily("UTC"))
    pipeline.pool("warehouse", slots=2)

    def reconciler(job_id: str, ctx: Any) -> Any:
        time.sleep(reconcile_sleep)  # real time, so a concurrent light task could slip in
        return reconcile_job(w.bq, job_id)

    @pipeline.task(pool="warehouse", slots=2, timeout=5, safe_repeat=True,
                   retry=RetryPolicy(max_attempts=2, initial_delay=1, jitter="none"),
                   reconcile=reconciler, destination="bq:warehouse.heavy")
    def heavy(ctx):  # type: ignore[no-untyped-def]
        w.heavy_job = ctx.job_id
        status = submit_or_inspect(w.bq, ctx.job_id, {"query": "heavy"})
        w.submitted.set()
        return status  # RUNNING: the executor records an unknown outcome and observes it

    @pipeline.task(pool="warehouse", slots=1, timeout=5)
    def light(ctx):  # type: ignore[no-untyped-def]
        w.light_started()

    return pipeline


def executor(pipeline: Pipeline, ledger: Ledger, clock: ManualClock, *,
             observe_timeout: float = 3.0, shared_pools: bool = True) -> Executor:
    return Executor(pipeline, ledger, clock=clock, sleep=clock.sleep, poll_interval=1.0,
                    observe_timeout=observe_timeout, pool_poll_interval=0.01,
                    shared_pools=shared_pools)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # surfaced by the test
            box["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, box


def leave_heavy_running(ledger: Ledger, ledger_url: str, clock: ManualClock,
                        ) -> tuple[Witness, Pipeline, str]:
    """Run 1: the heavy job is still RUNNING when the run ends; its slots stay in the ledger."""
    bq = FakeBigQuery(clock=clock, duration=HEAVY_JOB_SECONDS)
    w = Witness(bq, ledger_url, clock)
    pipeline = pipeline_for(w)
    first = executor(pipeline, ledger, clock).run(day(), ["heavy"]).unit("heavy")
    assert first.outcome == "unknown-needs-reconcile" and "still running" in first.reason
    assert w.heavy_running()
    assert first.uow_id is not None
    return w, pipeline, first.uow_id


def test_a_light_task_of_a_later_run_waits_until_the_heavy_job_is_observed_done(
    ledger: Ledger, ledger_url: str, clock: ManualClock
) -> None:
    w, pipeline, heavy_uow = leave_heavy_running(ledger, ledger_url, clock)
    held = ledger.pool_holdings("warehouse")
    assert [(h.holder, h.slots) for h in held] == [(job_holder(heavy_uow, 1), 2)]
    assert held[0].expires_at.year == 9999  # no expiry: only a confirmed end releases it
    assert "pool-held" in observed(ledger, heavy_uow, "executor")  # visible in explain

    # Run 2, another executor with its own ledger connection: the light task waits.
    with Ledger.open(ledger_url, clock=clock) as other:
        second = executor(pipeline, other, clock, observe_timeout=30)
        thread, box = in_thread(lambda: second.run(day(), ["light"]))
        time.sleep(0.5)
        assert w.light_starts == [], "the light task started beside the running heavy job"
        clock.advance(HEAVY_JOB_SECONDS)  # the job ends, but nobody has observed it yet
        time.sleep(0.3)
        assert w.light_starts == []
        # Run 3 observes the heavy job DONE: its slots are released, the light task runs.
        third = executor(pipeline, ledger, clock).run(day(), ["heavy"]).unit("heavy")
        assert third.outcome == "succeeded" and third.attempts == 0
        thread.join(20)
        assert not thread.is_alive() and "error" not in box
    assert box["result"].unit("light").outcome == "succeeded"
    assert w.light_starts == [{"heavy_running": False, "ledger_slots": 1}]
    assert w.peak <= 2
    assert ledger.pool_holdings("warehouse") == []
    assert observed(ledger, heavy_uow, "reconcile")[-1] == "succeeded"
    assert "pool-released" in observed(ledger, heavy_uow, "executor")
    assert len(w.bq.jobs) == 1  # never resubmitted


def test_a_light_task_is_refused_with_a_recorded_reason_while_nobody_observes_the_job(
    ledger: Ledger, ledger_url: str, clock: ManualClock
) -> None:
    w, pipeline, heavy_uow = leave_heavy_running(ledger, ledger_url, clock)
    refused = executor(pipeline, ledger, clock, observe_timeout=0.3).run(day(), ["light"])
    light = refused.unit("light")
    assert light.outcome == "blocked" and w.light_starts == []
    assert job_holder(heavy_uow, 1) in light.reason and "twice resolve" in light.reason
    assert light.uow_id is not None
    [blocked] = [o for o in ledger.observations(light.uow_id) if o.state == "blocked"]
    assert blocked.detail["cause"] == "pool-held-by-job"
    assert blocked.detail["jobs"] == [job_holder(heavy_uow, 1)]

    clock.advance(HEAVY_JOB_SECONDS)
    assert executor(pipeline, ledger, clock).run(day(), ["heavy"]).unit("heavy").ok
    assert executor(pipeline, ledger, clock).run(day(), ["light"]).unit("light").ok
    assert w.light_starts == [{"heavy_running": False, "ledger_slots": 1}] and w.peak <= 2


def test_an_operators_resolution_releases_the_slots_of_a_job_never_observed_again(
    ledger: Ledger, ledger_url: str, clock: ManualClock
) -> None:
    _, pipeline, heavy_uow = leave_heavy_running(ledger, ledger_url, clock)
    ledger.record_resolution(heavy_uow, outcome="succeeded", note="checked the console: DONE",
                             operator="ana")
    # the next acquisition of the pool sees the attempt closed and releases its holding
    assert executor(pipeline, ledger, clock).run(day(), ["light"]).unit("light").ok
    assert ledger.pool_holdings("warehouse") == []


@pytest.mark.parametrize("shared", [True, False], ids=["ledger-pool", "local-pool"])
def test_within_one_run_the_slots_stay_held_while_the_job_is_observed(
    ledger: Ledger, ledger_url: str, clock: ManualClock, shared: bool
) -> None:
    """One executor, two concurrent runs on its (in-process) pool: the heavy attempt returns
    with its job RUNNING and the executor observes it; the light task waits meanwhile."""
    bq = FakeBigQuery(clock=clock, duration=5)
    w = Witness(bq, ledger_url, clock)
    pipeline = pipeline_for(w, reconcile_sleep=0.05)
    x = executor(pipeline, ledger, clock, observe_timeout=30, shared_pools=shared)
    heavy_thread, heavy_box = in_thread(lambda: x.run(day(), ["heavy"]))
    assert w.submitted.wait(10)
    light_thread, light_box = in_thread(lambda: x.run(day(), ["light"]))
    heavy_thread.join(30)
    light_thread.join(30)
    assert "error" not in heavy_box and "error" not in light_box
    assert heavy_box["result"].unit("heavy").outcome == "succeeded"
    assert light_box["result"].unit("light").outcome == "succeeded"
    [start] = w.light_starts
    assert start["heavy_running"] is False and w.peak <= 2
    assert ledger.pool_holdings("warehouse") == []
