"""Every public name of twice, used as a pipeline author would: checked by mypy, never run.

``tests/typing/test_public_api.py`` runs ``mypy --strict`` on this file, so a public name that
disappears, moves out of ``twice.__all__`` or changes its signature fails the tests. Only
``twice``, ``twice.testing`` and ``twice.drivers.airflow`` are imported here: every other module
path is internal. Importing this module defines a pipeline (pure, no I/O); everything that
touches a ledger, a destination or a service is inside functions that are never called.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, time, timedelta
from typing import assert_type

import twice
from twice import (
    AcceptanceCriteria,
    ConflictError,
    CostModel,
    Decision,
    DecisionReport,
    DecisionResult,
    DecisionWindow,
    DestinationError,
    Executor,
    FencedWriteError,
    InputError,
    Intermediate,
    Interrupted,
    Interval,
    JobFailed,
    JobStatus,
    Ledger,
    LedgerError,
    NonFatal,
    OutcomeUnknownError,
    Pipeline,
    PipelineError,
    RemoteJobService,
    RemoteState,
    RetryDeadlineExceeded,
    RetryPolicy,
    Schedule,
    TaskContext,
    TaskEvidence,
    TaskState,
    TwiceError,
    UnavailableError,
    UnitOfWork,
    decide,
    fingerprint,
    load_pipeline,
    materialize_or_reuse,
    open_destination,
    reconcile_job,
    retry,
    run_backfill,
    run_job,
    submit_or_inspect,
    wait_for_job,
)
from twice.drivers.airflow import (
    TaskSettings,
    TimetableSpec,
    describe,
    task_settings,
    timetable_spec,
)
from twice.testing import FakeBigQuery, ManualClock, no_sleep

WAREHOUSE = "duckdb:///tmp/wh.duckdb?partition_column=day"

# -- defining a pipeline -------------------------------------------------------------------------

pipeline = Pipeline(
    "funds_positions",
    schedule=Schedule.daily("Europe/Lisbon"),
    deadline=time(6, 0),
    workflow_timeout=timedelta(minutes=30),
    description="Daily funds positions",
)
pool: str = pipeline.pool("positions_db", slots=2)
policy = RetryPolicy(
    max_attempts=4, initial_delay=0.5, max_delay=30.0, jitter="full",
    transient=(ConnectionError, TimeoutError, JobFailed),
)
bigquery = FakeBigQuery(name="bigquery", duration=0.1)


@pipeline.task(retry=policy, timeout=60, pool=pool, destination=f"{WAREHOUSE}#raw_positions",
               safe_repeat=True, input_partition="positions_{start:%Y-%m-%d}.csv")
def extract(ctx: TaskContext) -> dict[str, int]:
    interval: Interval = ctx.interval
    day: date = interval.start.date()
    with open_destination(ctx.destination) as dest:
        table = dest.read_partition(interval, ["line"])
    if day.weekday() == 6:
        ctx.nonfatal("Sunday file has no trades", count=1)
    recorded: tuple[NonFatal, ...] = ctx.nonfatals
    return {"rows": table.num_rows, "nonfatal": len(recorded)}


def reconcile_load(job_id: str, ctx: TaskContext) -> RemoteState:
    state = reconcile_job(bigquery, job_id)
    assert_type(state, RemoteState)
    return RemoteState.SUCCEEDED if state is RemoteState.SUCCEEDED else RemoteState.NOT_FOUND


@pipeline.task(depends_on=extract, timeout=timedelta(minutes=5), reconcile=reconcile_load,
               destination=f"{WAREHOUSE}#positions",
               acceptance=AcceptanceCriteria(min_rows=1, max_rejected_rows=1,
                                             max_nonfatal_errors=1))
def load(ctx: TaskContext) -> JobStatus:
    try:
        status = run_job(bigquery, ctx.job_id, {"day": ctx.interval.label}, poll_interval=0.5,
                         timeout=600.0)
    except ConnectionError as exc:
        raise OutcomeUnknownError(f"{ctx.job_id}: acknowledgement lost") from exc
    assert_type(status, JobStatus)
    return status


@pipeline.task(depends_on=[load], timeout=120, estimated_duration=5)
def notify(ctx: TaskContext) -> None:
    service: RemoteJobService = bigquery
    submitted: JobStatus = submit_or_inspect(service, ctx.job_id, {"notify": True})
    if not submitted.done:
        finished = wait_for_job(service, ctx.job_id, poll_interval=1.0, timeout=60.0,
                                sleep=no_sleep)
        assert_type(finished.succeeded, bool)


@pipeline.task(depends_on=extract, destination=f"{WAREHOUSE}#enriched",
               timeout=60, estimated_duration=5,
               intermediate=Intermediate(owner="team-funds", retention=timedelta(days=7)))
def enriched(ctx: TaskContext) -> list[dict[str, object]]:
    return [{"day": ctx.interval.start.date(), "fund_id": 1}]


problems: list[str] = pipeline.validate()
order: list[str] = pipeline.topological_order()


# -- running it ----------------------------------------------------------------------------------


def run_one_day(ledger_url: str) -> bool:
    clock = ManualClock(datetime(2026, 11, 30, 6, tzinfo=UTC))
    with Ledger.open(ledger_url, clock=clock) as ledger:
        assert_type(ledger, Ledger)
        executor = Executor(pipeline, ledger, clock=clock, sleep=clock.sleep,
                            rng=random.Random(7), max_workers=2)
        interval = pipeline.schedule.interval_for(date(2026, 11, 29))
        result = executor.run(interval, tasks=["extract", "load"])
        ok: bool = result.ok
        counts: dict[str, int] = result.counts()
        return ok and bool(counts)


def backfill_month(path: str, ledger_url: str) -> dict[str, int]:
    loaded = load_pipeline(path, attribute="pipeline")
    assert_type(loaded, Pipeline)
    intervals: list[Interval] = loaded.schedule.intervals(date(2026, 10, 1), date(2026, 11, 1))
    with Ledger.open(ledger_url) as ledger:
        result = run_backfill(loaded, ledger, intervals, tasks=["transform"], concurrency=2,
                              force=True)
        if not result.ok:
            raise TwiceError(result.refusal or "backfill failed")
        return result.counts()


def keep_intermediate(ledger: Ledger, unit: UnitOfWork, spec: str) -> bool:
    used = materialize_or_reuse(
        ledger, "enriched", unit, compute=lambda: [{"day": date(2026, 11, 29), "id": 1}],
        store=spec, owner="team-funds", retention=timedelta(days=7),
        cost=CostModel(storage_usd_per_gb_month=0.02),
    )
    reused: bool = used.reused
    return reused and used.tradeoff.recommendation == "keep"


def compare(spec: str, day: Interval) -> bool:
    with open_destination(spec, partition_column="day", key_columns=["fund_id"]) as dest:
        before = fingerprint(dest, day)
        after = fingerprint(dest, day, columns=["fund_id", "market_value"])
    return before.row_count == after.row_count and before.checksum == after.checksum


def unit_of_work() -> str:
    day = Interval(datetime(2026, 11, 29, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC))
    unit = UnitOfWork(pipeline="funds_positions", task="load", interval=day,
                      destination=f"{WAREHOUSE}#positions", transform_version="1")
    ctx = TaskContext(unit, attempt=2, generation=1)
    job: str = unit.job_id(generation=2)
    return f"{unit.uow_id} {ctx.job_id} {job} {day.duration}"


# -- errors: one root, kinds to branch on ---------------------------------------------------------


def classify(error: BaseException) -> str:
    if isinstance(error, PipelineError):
        listed: list[str] = error.problems
        return f"definition: {len(listed)} problem(s)"
    if isinstance(error, FencedWriteError):
        assert isinstance(error, ConflictError) and isinstance(error, DestinationError)
        return "fenced"
    if isinstance(error, LedgerError | InputError):
        return "input"
    if isinstance(error, UnavailableError):
        return "unavailable"
    if isinstance(error, Interrupted | OutcomeUnknownError):
        return "unknown"
    if isinstance(error, JobFailed):
        status: JobStatus = error.status
        return f"job {status.job_id} failed"
    if isinstance(error, RetryDeadlineExceeded):
        return "deadline"
    return "twice" if isinstance(error, TwiceError) else "other"


# -- retrying plain calls ------------------------------------------------------------------------


@retry(policy, on=(OSError,), deadline=30.0, attempt_duration=5.0, sleep=no_sleep)
def fetch_prices(day: date) -> list[float]:
    return [1.0, 2.0]


prices: list[float] = fetch_prices(date(2026, 11, 30))


def fetch_with_context() -> int:
    calls = 0
    for attempt in retry(RetryPolicy(max_attempts=3), on=lambda exc: "429" in str(exc)):
        with attempt:
            calls += 1
    return calls


# -- the pure planner ----------------------------------------------------------------------------


def plan() -> list[DecisionResult]:
    window = DecisionWindow(as_of=1000, deadline=4600, max_observation_age=300, policy=policy)
    evidence = [
        TaskEvidence("load", TaskState.RETRYABLE, safe_repeat=True, attempts=1,
                     observed_at=990, last_finished_at=980, duration=120, validation=30),
        TaskEvidence("notify", TaskState.UNKNOWN, safe_repeat=False, attempts=1,
                     observed_at=995, last_finished_at=None, duration=10, validation=0),
    ]
    report = decide(window, evidence)
    assert_type(report, DecisionReport)
    retry_now = [r for r in report.tasks if r.decision is Decision.RETRY_ELIGIBLE]
    return retry_now if not report.deadline_passed else []


# -- Airflow, without importing Airflow ----------------------------------------------------------


def airflow_translation() -> str:
    text: str = describe(pipeline, dag_id="funds")
    settings: TaskSettings = task_settings(pipeline, pipeline.get_task("load"))
    schedule: TimetableSpec = timetable_spec(pipeline.schedule)
    return f"{text}{settings.task}{schedule.kind}"


version: str = twice.__version__
