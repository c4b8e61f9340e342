"""A REAL faulted run for the health tests: a small pipeline of our own executed by the engine.

Nothing here writes the ledger by hand: ``twice.engine.executor.Executor`` and
``twice.drivers.backfill.run_backfill`` run the tasks (on a manual clock, so backoff is instant and
the times are exact), and the engine records every attempt, verification, refusal and hold. The only
other record is an operator's resolution (``Ledger.record_resolution``, what ``twice resolve``
calls). Two business days, seven tasks each, one unit in each of these health states:

=========  ==========================  ==========================================
task       2026-11-30                  2026-12-01
=========  ==========================  ==========================================
extract    verified (after a transient verified
           error and a retry)
check      refused (acceptance)        refused (acceptance)
notify     held (forced rerun, not     unverified (no destination, no
           safe_repeat)                acceptance: executed, not checked)
publish    unknown (lost               asserted (an operator resolved it)
           acknowledgement)
report     failed (permanent error)    failed (permanent error)
archive    blocked (report failed)     blocked (report failed)
flaky      waiting (the caller owns    failed (attempts exhausted)
           the retry loop)
=========  ==========================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.executor.helpers import ManualClock

from twice.core.interval import Interval
from twice.core.policy import RetryPolicy
from twice.define.acceptance import AcceptanceCriteria
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule
from twice.errors import OutcomeUnknownError

PIPELINE = "ops"
DAYS = (date(2026, 11, 30), date(2026, 12, 1))
START = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)
TASKS = ("extract", "check", "notify", "publish", "report", "archive", "flaky")
EXPECTED: dict[tuple[str, date], str] = {
    ("extract", DAYS[0]): "verified", ("extract", DAYS[1]): "verified",
    ("check", DAYS[0]): "refused", ("check", DAYS[1]): "refused",
    ("notify", DAYS[0]): "held", ("notify", DAYS[1]): "unverified",
    ("publish", DAYS[0]): "unknown", ("publish", DAYS[1]): "asserted",
    ("report", DAYS[0]): "failed", ("report", DAYS[1]): "failed",
    ("archive", DAYS[0]): "blocked", ("archive", DAYS[1]): "blocked",
    ("flaky", DAYS[0]): "waiting", ("flaky", DAYS[1]): "failed",
}
NOTE = "checked the partner API by hand: the message for 2026-12-01 was delivered once"


def interval(day: date) -> Interval:
    return Schedule.daily("UTC").interval_for(day)


def build(root: Path) -> Pipeline:
    """The pipeline over ``root`` (a DuckDB warehouse and a log of side effects)."""
    import pyarrow as pa

    warehouse = root / "warehouse.duckdb"
    raw = f"duckdb://{warehouse}?partition_column=day#raw"
    checked = f"duckdb://{warehouse}?partition_column=day#checked"
    calls: dict[str, int] = {}
    pipeline = Pipeline(PIPELINE, schedule=Schedule.daily("UTC"))
    quick = {"initial_delay": 1.0, "max_delay": 2.0}

    def rows(ctx: TaskContext) -> Any:
        day = ctx.interval.start.date()
        return pa.table({"day": pa.array([day] * 3, pa.date32()),
                         "id": pa.array([1, 2, 3], pa.int64())})

    @pipeline.task(destination=raw, write="replace", safe_repeat=True,
                   retry=RetryPolicy(max_attempts=3, transient=(ConnectionError,), **quick))
    def extract(ctx: TaskContext) -> Any:
        key = f"extract {ctx.interval.start.date()}"
        calls[key] = calls.get(key, 0) + 1
        if ctx.interval.start.date() == DAYS[0] and calls[key] == 1:
            raise ConnectionError("source share reset the connection (injected)")
        return rows(ctx)

    @pipeline.task(depends_on=extract, destination=checked, write="replace", safe_repeat=True,
                   acceptance=AcceptanceCriteria(min_rows=100))
    def check(ctx: TaskContext) -> Any:
        return rows(ctx)  # 3 rows: the acceptance criteria want at least 100

    @pipeline.task
    def notify(ctx: TaskContext) -> None:  # a side effect, not safe_repeat
        with (root / "notify.log").open("a") as log:
            log.write(f"{ctx.interval.start.date()} {ctx.job_id}\n")

    @pipeline.task(safe_repeat=True)
    def publish(ctx: TaskContext) -> None:
        raise OutcomeUnknownError("partner API: connection closed after the request was sent")

    @pipeline.task(safe_repeat=True)
    def report(ctx: TaskContext) -> None:
        raise ValueError("column account_id missing")

    @pipeline.task(depends_on=report, safe_repeat=True)
    def archive(ctx: TaskContext) -> None:
        return None

    @pipeline.task(safe_repeat=True,
                   retry=RetryPolicy(max_attempts=3, transient=(ConnectionError,), **quick))
    def flaky(ctx: TaskContext) -> None:
        raise ConnectionError("upstream API unavailable (injected)")

    return pipeline


@dataclass(frozen=True)
class FaultedRun:
    """The ledger a faulted run wrote, its clock's final time, and each unit's id."""

    url: str
    path: Path
    root: Path
    as_of: datetime
    uow: dict[tuple[str, date], str]

    def expected(self) -> dict[str, str]:
        """Health by unit of work id."""
        return {self.uow[key]: state for key, state in EXPECTED.items()}


def run_faulted(root: Path) -> FaultedRun:
    """Run the faults through the engine into ``root/ledger.db`` (see the module docstring)."""
    from twice.drivers.backfill import run_backfill
    from twice.engine.executor import Executor
    from twice.ledger import Ledger

    root.mkdir(parents=True, exist_ok=True)
    path = root / "ledger.db"
    url = f"sqlite:///{path}"
    clock = ManualClock(START)
    pipeline = build(root)
    days = [interval(day) for day in DAYS]
    common: dict[str, Any] = {"clock": clock, "sleep": clock.sleep, "max_workers": 1}
    with Ledger.open(url, clock=clock) as ledger:
        main = Executor(pipeline, ledger, holder="worker-1", **common)
        main.run(days, [t for t in TASKS if t != "flaky"])
        clock.advance(30)
        # The caller owns the retry loop (as under Airflow): one attempt, then the planner's
        # next step is recorded for the caller; the other day gets the whole budget.
        Executor(pipeline, ledger, holder="worker-2", attempts_per_call=1,
                 **common).run(days[0], ["flaky"])
        main.run(days[1], ["flaky"])
        clock.advance(60)
        # An operator asks for notify to run again on day 1: it is not safe_repeat, so held.
        run_backfill(pipeline, ledger, [days[0]], tasks=["notify"], force=True,
                     holder="backfill-1", clock=clock, sleep=clock.sleep)
        clock.advance(60)
        units = {(u.task, u.interval.start.date()): u.uow_id
                 for u in ledger.units(pipeline=PIPELINE)}
        ledger.record_resolution(units[("publish", DAYS[1])], outcome="succeeded",
                                 operator="alice", note=NOTE)
        clock.advance(120)
        as_of = clock()
    return FaultedRun(url, path, root, as_of, units)


def later(run: FaultedRun, **delta: float) -> datetime:
    return run.as_of + timedelta(**delta)
