"""Dependency order, bounded concurrency, pool slots, leases held by someone else."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from tests.executor.helpers import ManualClock, day, observed
from tests.executor.helpers import planner_decisions as planner

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, PipelineError
from twice.define.schedule import Schedule, ScheduleError
from twice.engine.executor import Executor
from twice.ledger import Ledger


class Spans:
    """Start/end times of each task's execution, and the most slots ever held at once."""

    def __init__(self, slots: dict[str, int]) -> None:
        self.slots = slots
        self.spans: dict[str, tuple[float, float]] = {}
        self.in_use = 0
        self.peak = 0
        self._lock = threading.Lock()

    def run(self, name: str, seconds: float) -> None:
        with self._lock:
            self.in_use += self.slots[name]
            self.peak = max(self.peak, self.in_use)
        start = time.monotonic()
        time.sleep(seconds)
        end = time.monotonic()
        with self._lock:
            self.in_use -= self.slots[name]
            self.spans[name] = (start, end)

    def overlap(self, a: str, b: str) -> bool:
        (a0, a1), (b0, b1) = self.spans[a], self.spans[b]
        return a0 < b1 and b0 < a1


@pytest.mark.parametrize("shared", [True, False], ids=["ledger-pool", "local-pool"])
def test_heavy_two_slot_task_blocks_light_tasks(real_ledger: Ledger, shared: bool) -> None:
    spans = Spans({"heavy": 2, "light_a": 1, "light_b": 1})
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    pipeline.pool("positions_db", slots=2)
    for name, slots in spans.slots.items():
        def body(ctx, name=name):  # type: ignore[no-untyped-def]
            spans.run(name, 0.25)
        pipeline.task(name=name, pool="positions_db", slots=slots, timeout=5)(body)

    # Four workers for three tasks: free workers must not create free slots.
    executor = Executor(pipeline, real_ledger, max_workers=4, shared_pools=shared,
                        pool_poll_interval=0.01)
    result = executor.run(day())
    assert result.ok
    assert spans.peak <= 2
    assert not spans.overlap("heavy", "light_a") and not spans.overlap("heavy", "light_b")
    # (whether the two light tasks overlap depends on arrival order: the pool is strictly
    # first come, first served, so a light task arriving after the heavy one waits for it)
    holdings = real_ledger.pool_holdings("positions_db", active_only=False)
    if shared:
        assert sorted(h.slots for h in holdings) == [1, 1, 2]
        assert all(h.released_at is not None for h in holdings)
    else:
        assert holdings == []


@pytest.mark.parametrize(("capacity", "overlap"), [(2, True), (1, False)])
def test_light_tasks_share_a_pool_up_to_its_capacity(real_ledger: Ledger, capacity: int,
                                                      overlap: bool) -> None:
    spans = Spans({"light_a": 1, "light_b": 1})
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    pipeline.pool("api", slots=capacity)
    for name in spans.slots:
        def body(ctx, name=name):  # type: ignore[no-untyped-def]
            spans.run(name, 0.25)
        pipeline.task(name=name, pool="api", timeout=5)(body)
    assert Executor(pipeline, real_ledger, max_workers=4, pool_poll_interval=0.01).run(day()).ok
    assert spans.overlap("light_a", "light_b") is overlap
    assert spans.peak == capacity


def test_dependency_order_and_blocked_dependents(ledger: Ledger, clock: ManualClock,
                                                 ledger_url: str) -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    order: list[str] = []

    @pipeline.task(timeout=5)
    def extract(ctx):  # type: ignore[no-untyped-def]
        order.append("extract")
        return 7

    @pipeline.task(depends_on=[extract], timeout=5)
    def transform(ctx):  # type: ignore[no-untyped-def]
        order.append("transform")
        assert ctx.upstream == {"extract": 7}
        raise KeyError("account_id")

    @pipeline.task(depends_on=[transform], timeout=5)
    def load(ctx):  # type: ignore[no-untyped-def]
        order.append("load")

    @pipeline.task(depends_on=[extract], timeout=5)
    def audit(ctx):  # type: ignore[no-untyped-def]
        order.append("audit")

    result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep, max_workers=1).run(day())
    assert order == ["extract", "transform", "audit"]
    assert [u.outcome for u in result.units] == [
        "succeeded", "failed-permanent", "blocked", "succeeded"
    ]
    blocked = result.unit("load")
    assert "transform (failed-permanent)" in blocked.reason
    assert ledger.attempts(blocked.uow_id) == []
    assert observed(ledger, blocked.uow_id) == ["blocked"]
    assert not result.ok
    rows = planner(ledger_url, clock())
    assert rows["transform"]["decision"] == "repair-cause"
    # the note says when: a later run may block a unit whose earlier attempt succeeded (found
    # by a probe: the note then read as if the unit were blocked now)
    blocked_at = observed_at(ledger, blocked.uow_id)
    assert rows["load"]["note"].startswith(
        f"blocked at {blocked_at}: dependency did not succeed")


def test_selected_tasks_need_their_dependencies_succeeded_in_the_ledger(
    ledger: Ledger, clock: ManualClock
) -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

    @pipeline.task(timeout=5)
    def extract(ctx):  # type: ignore[no-untyped-def]
        return 1

    @pipeline.task(depends_on=[extract], timeout=5)
    def load(ctx):  # type: ignore[no-untyped-def]
        return 2

    executor = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep)
    alone = executor.run(day(), tasks=["load"]).unit("load")
    assert alone.outcome == "blocked" and "not selected" in alone.reason
    executor.run(day(), tasks="extract")
    assert executor.run(day(), tasks=["load"]).unit("load").outcome == "succeeded"
    with pytest.raises(PipelineError, match="did you mean 'load'"):
        executor.run(day(), tasks=["lod"])


def test_leased_elsewhere_is_not_run_and_says_who_until_when(
    ledger: Ledger, clock: ManualClock, ledger_url: str
) -> None:
    calls: list[int] = []
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))

    @pipeline.task(timeout=5)
    def extract(ctx):  # type: ignore[no-untyped-def]
        calls.append(1)

    unit = pipeline.unit_of_work("extract", day())
    ledger.record_unit(unit)
    held = ledger.acquire_lease(unit.uow_id, "worker-7", ttl_seconds=120)
    result = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep).run(day())
    outcome = result.unit("extract")
    assert outcome.outcome == "leased-elsewhere" and calls == []
    assert outcome.holder == "worker-7" and outcome.lease_expires_at == held.expires_at
    assert "worker-7" in outcome.reason and ledger.attempts(unit.uow_id) == []
    clock.advance(121)  # the lease expired: another holder may take over
    assert Executor(pipeline, ledger, clock=clock).run(day()).ok and calls == [1]


def test_intervals_run_in_order_and_bad_intervals_are_refused(
    ledger: Ledger, clock: ManualClock
) -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    seen: list[str] = []

    @pipeline.task(timeout=5)
    def extract(ctx):  # type: ignore[no-untyped-def]
        seen.append(ctx.interval.start.date().isoformat())

    # 2026-12-01 and -02 have not ended at the test morning: allowed explicitly.
    executor = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep, allow_open=True)
    result = executor.run(pipeline.schedule.intervals(day().start, day(3).start))
    assert seen == ["2026-11-30", "2026-12-01", "2026-12-02"] and len(result.units) == 3
    from twice.core.interval import Interval

    skewed = Interval(day().start + timedelta(hours=1), day().end + timedelta(hours=1))
    with pytest.raises(ScheduleError):
        executor.run(skewed)
    assert len(seen) == 3  # nothing ran


def test_executor_rejects_bad_settings(ledger: Ledger) -> None:
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    pipeline.task(name="noop", retry=RetryPolicy())(lambda ctx: None)
    with pytest.raises(ValueError, match="max_workers"):
        Executor(pipeline, ledger, max_workers=0)
    with pytest.raises(ValueError, match="process"):
        Executor(pipeline, ledger, isolation="process")


def test_a_failing_deadline_function_blocks_only_that_unit(ledger: Ledger,
                                                           clock: ManualClock) -> None:
    def due(interval):  # type: ignore[no-untyped-def]
        raise LookupError("no calendar entry for this day")

    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"), deadline=due)
    pipeline.task(name="load", timeout=5)(lambda ctx: 1)
    unit = Executor(pipeline, ledger, clock=clock).run(day()).unit("load")
    assert unit.outcome == "blocked" and "no calendar entry" in unit.reason
    assert ledger.attempts(unit.uow_id) == []


@pytest.mark.parametrize("shared", [True, False], ids=["ledger-pool", "local-pool"])
def test_an_attempt_that_waited_for_slots_is_not_started_past_the_deadline(
    real_ledger: Ledger, shared: bool
) -> None:
    """The deadline checks are made again after the pool wait: ``late`` can finish in time
    when it asks for the pool, not once ``first`` has held both slots for 0.8 s (found by the
    adversarial probe: it started anyway, and finished after the deadline)."""
    from datetime import UTC, datetime, timedelta

    ran: list[str] = []
    deadline = datetime.now(UTC) + timedelta(seconds=1.2)
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"), deadline=lambda _: deadline)
    pipeline.pool("positions_db", slots=2)

    @pipeline.task(pool="positions_db", slots=2, estimated_duration=0.1, safe_repeat=True)
    def first(ctx):  # type: ignore[no-untyped-def]
        ran.append("first")
        time.sleep(0.8)

    @pipeline.task(safe_repeat=True, estimated_duration=0.05)
    def gate(ctx):  # type: ignore[no-untyped-def]
        time.sleep(0.2)  # ``first`` takes the pool before ``late`` asks for it

    @pipeline.task(pool="positions_db", slots=2, estimated_duration=0.6, depends_on=gate,
                   safe_repeat=True)
    def late(ctx):  # type: ignore[no-untyped-def]
        ran.append("late")

    executor = Executor(pipeline, real_ledger, max_workers=4, shared_pools=shared,
                        pool_poll_interval=0.01)
    result = executor.run(day())
    assert result.unit("late").outcome == "deadline-infeasible", result.unit("late")
    assert "late" not in ran and result.unit("first").ok
    decided = [d.decision for d in real_ledger.decisions(result.unit("late").uow_id or "")]
    assert decided[-1] == "deadline-infeasible"


def test_a_timed_out_thread_keeps_its_shared_slots_after_reconcile_finds_no_job(
    ledger_url: str,
) -> None:
    """``reconcile=`` answers NOT_FOUND for a timed-out attempt whose thread still runs: the
    work goes on in this process, so the answer settles nothing, the job's slots stay held in
    the ledger, and another process's task does not take them (found by the adversarial
    probe: the ledger released them at once, and a second executor doubled the load on the
    pool's dependency). Once the thread has ended, the next run's NOT_FOUND is final and the
    slots are free."""
    import threading

    from twice import RemoteState
    from twice.ledger import Ledger

    spans: dict[str, list[float]] = {}
    pipeline = Pipeline("funds", schedule=Schedule.daily("UTC"))
    pipeline.pool("positions_db", slots=2)

    def look(job_id: str, ctx: object) -> RemoteState:
        return RemoteState.NOT_FOUND

    @pipeline.task(destination="bq:proj.ds.t", pool="positions_db", slots=2, timeout=0.3,
                   reconcile=look, retry=RetryPolicy(max_attempts=1))
    def submit(ctx):  # type: ignore[no-untyped-def]
        if ctx.attempt == 1:  # the request that outlives its timeout
            spans["submit"] = [time.monotonic()]
            time.sleep(1.2)
            spans["submit"].append(time.monotonic())

    @pipeline.task(destination="bq:proj.ds.u", pool="positions_db", slots=2, reconcile=look,
                   retry=RetryPolicy(max_attempts=1))
    def other(ctx):  # type: ignore[no-untyped-def]
        spans["other"] = [time.monotonic()]

    def executor(ledger: Ledger) -> Executor:  # observes briefly: the thread outlives it
        return Executor(pipeline, ledger, pool_poll_interval=0.01, observe_timeout=0.05,
                        poll_interval=0.01)

    with Ledger.open(ledger_url) as first, Ledger.open(ledger_url) as second:
        ran = executor(first).run(day(), tasks=["submit"]).units[0]
        assert ran.outcome == "unknown-needs-reconcile" and "still runs" in ran.reason
        assert any(t.name.startswith("twice-attempt") for t in threading.enumerate())
        assert [h.slots for h in first.pool_holdings("positions_db")] == [2]
        executor(second).run(day(), tasks=["other"])
        assert "other" not in spans  # the job's slots were not free
        seen = [o.state for o in first.observations(ran.uow_id)]
        assert seen[-3:] == ["unknown", "not-found", "unknown"]  # asked, and left unknown
        assert [a.outcome for a in first.attempts(ran.uow_id)] == ["unknown"]
        while "submit" in spans and len(spans["submit"]) < 2:
            time.sleep(0.05)
        time.sleep(0.1)
        settled = executor(first).run(day(), tasks=["submit"]).units[0]
        assert settled.outcome == "succeeded", settled.reason  # "not found" is final now
        assert first.pool_holdings("positions_db") == []  # the job is settled: released
        executor(second).run(day(), tasks=["other"])
        assert spans["other"][0] >= spans["submit"][1]  # it ran once the thread had ended


def observed_at(ledger: Ledger, uow_id: str) -> str:
    """When the unit's latest observation was made, as reports write instants."""
    from twice.engine.evidence import iso

    latest = ledger.observations(uow_id)[-1]
    return str(iso(latest.observed_at))
