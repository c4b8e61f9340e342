"""Faults: a month-long backfill against a flaky remote job service ends exactly like a clean run.

One task loads 30 daily intervals (November 2026) through jobs on the fake BigQuery, each
submitted under twice's deterministic job id and then waited for. A job that finishes
successfully appends its day's rows to a DuckDB table (``WRITE_APPEND``, like a query job with
a destination table), so a second job for a day shows up as duplicate rows and a job that never
ran as missing rows. Before each request, seeded dice arm one of the fake's own faults: 5xx
answers to a submit (job created or not), lost acknowledgements (at once, or with the request
still in flight), slow responses, 5xx answers to reads, jobs slower than the task waits
(``JobStillRunning``, often still running after the executor's reconcile polls, so a later run
must reconcile them) and jobs DONE with a transient ``errorResult``. ``twice.drivers.backfill`` runs
the month and, as an operator would, is run again until every interval succeeded.

Proven: every partition's rows and twice fingerprint equal a clean run's; exactly one job per
day succeeded and it is the one the ledger's succeeded attempt names; a new job id was taken
only after the previous job was seen failed; every unknown outcome the ledger recorded was
resolved by reconciling the same job id, none is left unknown or running; one more run
executes nothing. A control whose task takes a fresh job id per attempt, under the same faults,
shows duplicate rows: the comparison catches the bug it exists to catch.
"""

from __future__ import annotations

import os
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.executor.helpers import ManualClock
from tests.reliability.conftest import record, scale, unavailable
from twice.core.interval import Interval
from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, RemoteState, TaskContext
from twice.define.schedule import Schedule
from twice.destinations import open_destination
from twice.destinations.fingerprint import Fingerprint, fingerprint
from twice.drivers.backfill import BackfillResult, run_backfill
from twice.ledger import Ledger
from twice.remote import (
    BackendError,
    JobError,
    JobFailed,
    JobStatus,
    reconcile_job,
    submit_or_inspect,
    wait_for_job,
)
from twice.testing.fake_bigquery import FakeBigQuery

SUITE = "faults"
SCHEDULE = Schedule.daily("UTC")
FIRST_DAY = date(2026, 11, 1)
DAYS = 30
INTERVALS = [SCHEDULE.interval_for(FIRST_DAY + timedelta(days=i)) for i in range(DAYS)]
TASK = "load"
KEY_COLUMNS = ["day", "id", "amount"]
MAX_ROUNDS = 10  # "run it again" at most this often before the test gives up
ROUND_GAP = 300.0  # seconds the operator waits before running again
JOB_SECONDS = 3.0  # a normal job: 1 s pending, 3 s running, well inside the task's wait
WAIT = 10.0  # the task waits this long for its job, then raises JobStillRunning
POLL = 1.0  # the task's and the executor's poll interval
OBSERVE = 20.0  # how long the executor's reconcile polls a job before it stops
# JobFailed is transient here because the only job failures are transient reasons (BigQuery:
# backendError and rateLimitExceeded jobs may be retried, as a new job).
POLICY = RetryPolicy(max_attempts=4, initial_delay=2.0, max_delay=30.0, jitter="full",
                     transient=(BackendError, JobFailed))
TRANSIENT_JOB_ERRORS = (
    JobError("backendError", "Backend error. Job aborted."),
    JobError("rateLimitExceeded", "Exceeded rate limits: too many concurrent queries"),
)
FAULT_KINDS = ("submit-5xx", "submit-5xx-created", "lost-ack", "lost-ack-in-flight",
               "slow-response", "get-5xx", "slow-job", "job-error")
FINAL_RECONCILE = ("succeeded", "failed", "not-found")


def rows_for(day: date) -> list[tuple[date, int, int]]:
    """The rows a job for ``day`` appends (deterministic; 3 to 7 rows, amounts vary by day)."""
    base = day.toordinal()
    return [(day, i, (base * 31 + i * 7) % 1000) for i in range(3 + base % 5)]


def job_config(ctx: TaskContext) -> dict[str, Any]:
    day = ctx.interval.start.date()
    return {
        "query": f"SELECT day, id, amount FROM staging.positions WHERE day = '{day}'",
        "destinationTable": "warehouse.positions",
        "writeDisposition": "WRITE_APPEND",
        "day": day.isoformat(),
    }


class FlakyService:
    """The fake BigQuery behind seeded dice: before a request, maybe arm one of its faults.

    Only the fake's own fault injection is used (``fail_next``, ``lose_acknowledgements``,
    ``plan_job``), plus time that passes while a slow answer is on its way. How a job will
    behave (slow, or failing with a transient ``errorResult``) is decided once per job id, on
    its first submit. ``rng=None`` is the clean service.
    """

    def __init__(self, bq: FakeBigQuery, clock: ManualClock, rng: random.Random | None) -> None:
        self.bq, self._clock, self._rng = bq, clock, rng
        self.injected: Counter[str] = Counter()
        self._planned: set[str] = set()

    @property
    def name(self) -> str:
        return self.bq.name

    def _chance(self, probability: float) -> bool:
        return self._rng is not None and self._rng.random() < probability

    def _slow_answer(self) -> None:
        if self._chance(0.05):
            assert self._rng is not None
            self._clock.advance(self._rng.uniform(2.0, 8.0))
            self.injected["slow-response"] += 1

    def _plan(self, job_id: str) -> None:
        if job_id in self._planned or self._rng is None:
            return
        self._planned.add(job_id)
        if self._chance(0.12):
            self.bq.plan_job(job_id, duration=self._rng.uniform(WAIT + 5, 4 * OBSERVE))
            self.injected["slow-job"] += 1
        elif self._chance(0.08):
            self.bq.plan_job(job_id, error_result=self._rng.choice(TRANSIENT_JOB_ERRORS))
            self.injected["job-error"] += 1

    def submit(self, job_id: str, config: Mapping[str, Any]) -> JobStatus:
        self._plan(job_id)
        self._slow_answer()
        if self._rng is not None:
            roll, rng = self._rng.random(), self._rng
            status = rng.choice((500, 502, 503))
            error = rng.choice(("connection", "timeout"))
            if roll < 0.06:
                self.bq.fail_next("submit", status=status, created=False)
                self.injected["submit-5xx"] += 1
            elif roll < 0.12:
                self.bq.fail_next("submit", status=status, created=True)
                self.injected["submit-5xx-created"] += 1
            elif roll < 0.18:
                self.bq.lose_acknowledgements(error=error)  # type: ignore[arg-type]
                self.injected["lost-ack"] += 1
            elif roll < 0.24:
                self.bq.lose_acknowledgements(arrive_after=rng.uniform(0.5, 30.0),
                                              error=error)  # type: ignore[arg-type]
                self.injected["lost-ack-in-flight"] += 1
        return self.bq.submit(job_id, config)

    def get(self, job_id: str) -> JobStatus:
        self._slow_answer()
        if self._chance(0.08):
            assert self._rng is not None
            self.bq.fail_next("get", status=self._rng.choice((500, 503)))
            self.injected["get-5xx"] += 1
        return self.bq.get(job_id)

    def cancel(self, job_id: str) -> JobStatus:
        return self.bq.cancel(job_id)


JobIdFor = Callable[[TaskContext], str]


def twice_job_id(ctx: TaskContext) -> str:
    return ctx.job_id


def build_pipeline(service: FlakyService, clock: ManualClock,
                   job_id_for: JobIdFor = twice_job_id) -> Pipeline:
    """One remote task: submit (or find) the day's job, wait for it, fail on ``errorResult``.

    This is ``twice.remote.run_job`` with the wait on the test's clock (``run_job`` measures
    its timeout on the real monotonic clock).
    """
    pipeline = Pipeline("faults", schedule=SCHEDULE)

    def reconcile(job_id: str, _ctx: TaskContext) -> RemoteState:
        return reconcile_job(service, job_id)

    # No twice destination: the jobs write the warehouse, which the test materializes and
    # fingerprints itself once every job is DONE.
    @pipeline.task(name=TASK, retry=POLICY, safe_repeat=True, timeout=120, reconcile=reconcile)
    def load(ctx: TaskContext) -> JobStatus:
        job_id = job_id_for(ctx)
        status = submit_or_inspect(service, job_id, job_config(ctx))
        if not status.done:
            status = wait_for_job(service, job_id, poll_interval=POLL, timeout=WAIT,
                                  sleep=clock.sleep, clock=lambda: clock().timestamp())
        if status.failed:
            raise JobFailed(status)
        return status

    return pipeline


@dataclass
class Backfill:
    """One faulty (or clean) month: the service, the pipeline and what each round left."""

    bq: FakeBigQuery
    service: FlakyService
    pipeline: Pipeline
    clock: ManualClock
    intervals: list[Interval]
    rounds: list[BackfillResult] = field(default_factory=list)


def backfill(ledger_url: str, seed: str | None, *, days: int = DAYS,
             job_id_for: JobIdFor = twice_job_id) -> Backfill:
    """Run the first ``days`` of the month, then run them again (after ROUND_GAP) until every
    interval succeeded; ``seed=None`` is the clean run."""
    clock = ManualClock()
    rng = None if seed is None else random.Random(seed)
    bq = FakeBigQuery(clock=clock, pending=1.0, duration=JOB_SECONDS)
    service = FlakyService(bq, clock, rng)
    run = Backfill(bq, service, build_pipeline(service, clock, job_id_for), clock,
                   INTERVALS[:days])
    with Ledger.open(ledger_url, clock=clock) as ledger:
        for number in range(1, MAX_ROUNDS + 1):
            result = run_backfill(
                run.pipeline, ledger, run.intervals, clock=clock, sleep=clock.sleep,
                rng=random.Random(f"{seed}-{number}"), holder=f"run-{number}",
                lease_ttl=3600, poll_interval=POLL, observe_timeout=OBSERVE,
            )
            run.rounds.append(result)
            left = {r.outcome for r in result.runs if r.status not in ("succeeded", "skipped")}
            assert left <= {"unknown-needs-reconcile", "attempts-exhausted"}, [
                (r.interval.label, r.outcome, r.reason) for r in result.runs
                if r.status not in ("succeeded", "skipped")
            ]
            if result.ok:
                break
            clock.advance(ROUND_GAP)
        else:
            pytest.fail(f"not converged after {MAX_ROUNDS} runs: {run.rounds[-1].counts()}")
    return run


# -- the warehouse ----------------------------------------------------------------------------

Partitions = dict[str, tuple[list[tuple[Any, ...]], Fingerprint]]


def materialize(bq: FakeBigQuery, now: datetime, path: Path) -> str:
    """The table the jobs wrote: every job DONE without ``errorResult`` appended its rows once.

    Every job must be DONE: one still running could append later.
    """
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE positions (day DATE, id BIGINT, amount BIGINT, job VARCHAR)")
        for job in bq.jobs.values():
            status = job.status(now, bq.name)
            assert status.done, f"job {job.job_id} still {status.state.value} after the backfill"
            if status.succeeded:
                rows = rows_for(date.fromisoformat(job.config["day"]))
                conn.executemany("INSERT INTO positions VALUES (?, ?, ?, ?)",
                                 [(*row, job.job_id) for row in rows])
    return f"duckdb://{path}?partition_column=day#positions"


def partitions(spec: str, intervals: list[Interval] = INTERVALS) -> Partitions:
    """Per day: the sorted key rows and twice's in-engine fingerprint of them."""
    found: Partitions = {}
    with open_destination(spec) as dest:
        for interval in intervals:
            table = dest.read_partition(interval).select(KEY_COLUMNS).to_pylist()
            rows = sorted(tuple(row[c] for c in KEY_COLUMNS) for row in table)
            found[interval.label] = (rows, fingerprint(dest, interval, KEY_COLUMNS))
    return found


def compare(got: Partitions, clean: Partitions) -> tuple[int, list[str]]:
    """Rows compared, and the days whose rows or fingerprint differ from the clean run's."""
    compared = sum(max(len(got[d][0]), len(clean[d][0])) for d in got)
    return compared, [day for day in got if got[day] != clean[day]]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Partitions:
    """The clean run: no faults, one round, one attempt and one job per day."""
    folder = tmp_path_factory.mktemp("clean")
    run = backfill(f"sqlite:///{folder / 'ledger.db'}", None)
    assert len(run.rounds) == 1 and not run.service.injected
    assert all(r.attempts == [(1, "succeeded")] for r in run.rounds[0].runs)
    assert len(run.bq.jobs) == DAYS
    found = partitions(materialize(run.bq, run.clock(), folder / "warehouse.duckdb"))
    assert [rows for rows, _fp in found.values()] == [rows_for(i.start.date()) for i in INTERVALS]
    return found


# -- the ledger ---------------------------------------------------------------------------------


def audit(ledger: Ledger, run: Backfill) -> Counter[str]:
    """What the ledger and the service say about every day (see the module docstring)."""
    figures: Counter[str] = Counter()
    now = run.clock()
    jobs = run.bq.jobs
    by_day: dict[str, list[str]] = defaultdict(list)
    for job in jobs.values():
        by_day[job.config["day"]].append(job.job_id)
    for interval in run.intervals:
        day = interval.start.date().isoformat()
        unit = run.pipeline.unit_of_work(TASK, interval)
        attempts = ledger.attempts(unit.uow_id)
        assert attempts[-1].outcome == "succeeded", (day, [a.outcome for a in attempts])
        stuck = [a.number for a in attempts if a.outcome in ("running", "unknown")]
        assert not stuck, f"{day}: attempts {stuck} left without an outcome"
        winners = [j for j in by_day[day] if jobs[j].status(now, run.bq.name).succeeded]
        assert len(winners) == 1, f"{day}: jobs {winners} all succeeded (duplicate load)"
        assert attempts[-1].job_id == winners[0]
        generations = ledger.job_generations(unit.uow_id)
        assert [g.generation for g in generations] == list(range(1, len(generations) + 1))
        assert [g.job_id for g in generations] == [unit.job_id(g.generation) for g in generations]
        assert generations[-1].state == "succeeded" and generations[-1].job_id == winners[0]
        for earlier in generations[:-1]:  # a new id only after the old job was seen failed
            assert earlier.state == "confirmed-failed"
            assert jobs[earlier.job_id].status(now, run.bq.name).failed
        assert set(by_day[day]) <= {g.job_id for g in generations}, "a job under a foreign id"
        assert all(a.job_id == unit.job_id(a.generation or 0) for a in attempts)
        figures["new_generations"] += len(generations) - 1
        figures.update(reconciliations(ledger, unit.uow_id, attempts))
    return figures


def reconciliations(ledger: Ledger, uow_id: str, attempts: list[Any]) -> Counter[str]:
    """Every attempt once recorded unknown was resolved by a reconcile of its own job id."""
    figures: Counter[str] = Counter()
    finishes = [e for e in ledger.timeline(uow_id) if e.kind == "attempt-finished"]
    looks: dict[int, list[Any]] = defaultdict(list)
    for seen in ledger.observations(uow_id):
        if seen.source == "reconcile" and seen.attempt is not None:
            looks[seen.attempt].append(seen)
    for event in finishes:
        if event.detail.get("outcome") != "unknown":
            continue
        figures["unknown"] += 1
        number = event.attempt
        assert number is not None
        attempt = attempts[number - 1]
        resolved = [e.detail["outcome"] for e in finishes
                    if e.attempt == number and e.detail.get("previous_outcome") == "unknown"]
        answers = [o.state for o in looks[number] if o.state in FINAL_RECONCILE]
        assert len(resolved) == 1 and answers, f"attempt {number} unknown, never reconciled"
        assert {o.detail["job_id"] for o in looks[number]} == {attempt.job_id}
        expected = "succeeded" if answers[-1] == "succeeded" else "failed-transient"
        assert resolved[0] == expected == attempt.outcome
        figures["reconciled"] += 1
        figures[f"reconciled-{answers[-1]}"] += 1
    return figures


# -- the trials ---------------------------------------------------------------------------------


def seed(name: str, trial: int) -> str:
    return f"faults-{name}-{os.environ.get('TWICE_RELIABILITY_SEED', '7')}-{trial}"


def one_trial(folder: Path, ledger_url: str, trial_seed: str, clean: Partitions,
              days: int) -> Counter[str]:
    """A faulty backfill to convergence, one more run, then the data and the ledger checked."""
    run = backfill(ledger_url, trial_seed, days=days)
    figures: Counter[str] = Counter(run.service.injected)
    figures["faults"] = sum(run.service.injected.values())
    figures["carried_over"] = sum(
        u.outcome == "unknown-needs-reconcile" for r in run.rounds[:-1] for u in r.runs
    )
    compared, differing = compare(
        partitions(materialize(run.bq, run.clock(), folder / "warehouse.duckdb"),
                   run.intervals), clean,
    )
    figures.update(trials=1, rows_compared=compared, mismatches=len(differing))
    record(SUITE, **{k: figures[k] for k in ("trials", "faults", "rows_compared", "mismatches")})
    assert not differing, f"{trial_seed}: days differing from the clean run: {differing}"
    calls = len(run.bq.calls)
    with Ledger.open(ledger_url, clock=run.clock) as ledger:
        again = run_backfill(run.pipeline, ledger, run.intervals, clock=run.clock,
                             sleep=run.clock.sleep, holder="last-look")
        assert again.ok and {r.status for r in again.runs} == {"skipped"}
        assert len(run.bq.calls) == calls, "a run after success talked to the service"
        figures.update(audit(ledger, run))
    record(SUITE, reconciled=figures["reconciled"])
    return figures


def trials(tmp_path: Path, clean: Partitions, name: str, count: int, days: int,
           ledger_for: Callable[[Path], str]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for trial in range(count):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        totals.update(one_trial(folder, ledger_for(folder), seed(name, trial), clean, days))
    assert totals["mismatches"] == 0
    assert totals["unknown"] == totals["reconciled"] > 0, "no unknown outcome to reconcile"
    return totals


def test_month_backfill_under_random_faults_equals_a_clean_run(
    tmp_path: Path, clean: Partitions
) -> None:
    totals = trials(tmp_path, clean, "sqlite", 3 * scale(), DAYS,
                    lambda folder: f"sqlite:///{folder / 'ledger.db'}")
    # Not vacuous: every kind of fault happened, and every way out of an unknown outcome.
    missing = [kind for kind in FAULT_KINDS if not totals[kind]]
    assert not missing, f"faults never injected: {missing}"
    for path in ("reconciled-succeeded", "reconciled-failed", "reconciled-not-found",
                 "new_generations", "carried_over"):
        assert totals[path] > 0, f"never happened: {path} ({dict(totals)})"


@pytest.fixture
def postgres_ledgers(request: pytest.FixtureRequest) -> Callable[[], str]:
    """Fresh PostgreSQL databases, one per call (the shared ``postgres_databases`` fixture),
    if a server is configured."""
    if not os.environ.get("TWICE_TEST_POSTGRES_URL"):
        unavailable("TWICE_TEST_POSTGRES_URL is not set: no PostgreSQL ledger to test on")
    create: Callable[[], str] = request.getfixturevalue("postgres_databases")
    return create


@pytest.mark.postgres
def test_backfill_under_random_faults_on_a_postgresql_ledger(
    tmp_path: Path, clean: Partitions, postgres_ledgers: Callable[[], str]
) -> None:
    """The same on a shared PostgreSQL ledger, smaller: ten days, one trial per scale, each
    trial on a ledger of its own (like the SQLite trials: each starts from nothing)."""
    trials(tmp_path, clean, "postgresql", scale(), 10, lambda _folder: postgres_ledgers())


def test_control_a_fresh_job_id_per_attempt_duplicates_rows(
    tmp_path: Path, clean: Partitions
) -> None:
    """The harness is sharp: a task that invents a job id per attempt (instead of twice's id
    for the unit of work) loads some days twice under the same faults, and the comparison
    with the clean run says so."""
    run = backfill(f"sqlite:///{tmp_path / 'ledger.db'}", seed("control", 0),
                   job_id_for=lambda ctx: f"{ctx.job_id}_a{ctx.attempt}")
    run.clock.advance(3600)  # let every job it left behind finish
    spec = materialize(run.bq, run.clock(), tmp_path / "warehouse.duckdb")
    found = partitions(spec)
    _compared, differing = compare(found, clean)
    assert differing, "fresh job ids per attempt went unnoticed"
    assert any(len(found[day][0]) > len(clean[day][0]) for day in differing)  # duplicates
