"""A realistic incident written into a real ledger through its public API, for the report tests.

The funds_positions run for business date 2026-12-01, as of 05:30Z on 2026-12-02 with a 06:00Z
delivery deadline (times are UTC; the policy is 4 attempts, 4 min backoff doubling to 12 min):

- extract: transient failure, 4 min backoff, success, output validated (verified).
- load: lost acknowledgement (unknown), reconcile finds the job running, the resubmission with
  the same job id answers 409 duplicate, the job ends DONE without errorResult: succeeded, not
  yet validated.
- publish: timed out five minutes ago, outcome still unknown, reconcile-remote decided.
- report_file: DONE *with* errorResult, failed permanently, repair-cause.
- archive: two transient failures, the next attempt cannot finish before the deadline:
  deadline-infeasible, attempt 3 not started.
- transform: two transient failures, waiting for the backoff to end at 05:35Z.
- monitor: running, last observed at 05:15Z, stale since 05:25Z (10 min limit).
- fingerprints: partition 2026-11-30 re-fingerprinted by a backfill with 2 rows fewer and a new
  checksum; partition 2026-11-29 re-fingerprinted identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.ledger import Ledger

PIPELINE = "funds_positions"
DAY = datetime(2026, 12, 1, tzinfo=UTC)
AS_OF = datetime(2026, 12, 2, 5, 30, tzinfo=UTC)
DEADLINE = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
MAX_AGE_SECONDS = 600
POLICY: dict[str, Any] = {
    "max_attempts": 4, "initial_delay": 240.0, "multiplier": 2.0, "max_delay": 720.0,
    "jitter": "full", "transient": ["ConnectionError"], "attempt_timeout": 900.0,
}
TASKS = ("extract", "load", "publish", "report_file", "archive", "transform", "monitor")
DESTINATIONS = {"extract": "warehouse.positions_raw", "report_file": "files.funds_report"}
BACKFILL_DESTINATION = "warehouse.positions"


class StoryClock:
    """The ledger's clock, set by the story to each moment it writes."""

    def __init__(self) -> None:
        self.current = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.current


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 12, 2, hour, minute, second, tzinfo=UTC)


def unit_for(task: str) -> UnitOfWork:
    return UnitOfWork(
        pipeline=PIPELINE,
        task=task,
        interval=Interval(DAY, DAY + timedelta(days=1)),
        destination=DESTINATIONS.get(task, BACKFILL_DESTINATION),
        transform_version="t3",
        input_partition="positions/2026-12-01",
        input_version="src-v7",
    )


@dataclass
class Story:
    """Writes the story; ``uow`` maps task name to unit of work id."""

    ledger: Ledger
    clock: StoryClock

    def __post_init__(self) -> None:
        self.uow: dict[str, str] = {}

    def now(self, moment: datetime) -> datetime:
        self.clock.current = moment
        return moment

    def detail(self, **extra: Any) -> dict[str, Any]:
        return {"deadline": DEADLINE.isoformat(), "policy": POLICY,
                "max_observation_age": MAX_AGE_SECONDS, "safe_repeat": True, **extra}

    def attempt(self, task: str, start: datetime, end: datetime | None, outcome: str,
                **begin: Any) -> int:
        uow = self.uow[task]
        self.now(start)
        number = self.ledger.begin_attempt(uow, holder="worker-1", **begin).number
        if end is not None:
            self.now(end)
            self.ledger.finish_attempt(uow, number, outcome)  # type: ignore[arg-type]
        return number

    def transient(self, task: str, number: int) -> None:
        self.ledger.record_error(self.uow[task], error_class="ConnectionError",
                                 message="positions db connection reset",
                                 classification="transient", attempt=number)

    def write(self) -> None:
        ledger = self.ledger
        self.now(at(4, 0))
        ledger.record_fingerprint(BACKFILL_DESTINATION, "2026-11-30", 1000, "123456789012",
                                  columns=["fund_id", "day"], algorithm="md5-60-sum")
        ledger.record_fingerprint(BACKFILL_DESTINATION, "2026-11-29", 1000, "777000777000",
                                  columns=["fund_id", "day"], algorithm="md5-60-sum")
        self.now(at(4, 50))
        for task in TASKS:
            self.uow[task] = ledger.record_unit(unit_for(task)).uow_id
        self._extract()
        self._load()
        self._publish()
        self._report_file()
        self._archive()
        self._transform()
        self._monitor()
        self.now(at(5, 28))
        ledger.record_fingerprint(BACKFILL_DESTINATION, "2026-11-30", 998, "123450000012",
                                  columns=["fund_id", "day"], algorithm="md5-60-sum")
        ledger.record_fingerprint(BACKFILL_DESTINATION, "2026-11-29", 1000, "777000777000",
                                  columns=["fund_id", "day"], algorithm="md5-60-sum")
        self.now(AS_OF)

    def _extract(self) -> None:
        ledger, uow = self.ledger, self.uow["extract"]
        first = self.attempt("extract", at(5, 0), at(5, 1), "failed-transient")
        self.transient("extract", first)
        ledger.record_decision(uow, "wait-backoff", reason="attempt 2 could start at 05:05",
                               as_of=at(5, 1), attempt=first, detail=self.detail(
                                   backoff=240, earliest_start=at(5, 5).isoformat(),
                                   estimated_finish=at(5, 12).isoformat(), duration=300,
                                   validation=120))
        second = self.attempt("extract", at(5, 5), at(5, 9), "succeeded")
        ledger.record_observation(uow, "succeeded", source="twice.engine.executor", attempt=second)
        self.now(at(5, 10))
        ledger.record_observation(uow, "validated", source="twice.define.acceptance",
                                  attempt=second,
                                  detail={"acceptance": {"passed": True, "checks": [
                                      "rows >= 1: 1200 (ok)", "rejected rows <= 0: 0 (ok)"]}})
        ledger.record_fingerprint("warehouse.positions_raw", "2026-12-01", 1200, "42424242",
                                  uow_id=uow, attempt=second, columns=["fund_id"],
                                  algorithm="md5-60-sum")

    def _load(self) -> None:
        ledger, uow = self.ledger, self.uow["load"]
        self.now(at(5, 10))
        job = ledger.record_job_generation(uow).job_id
        first = self.attempt("load", at(5, 10), at(5, 12), "unknown", generation=1)
        ledger.record_error(uow, error_class="TimeoutError", classification="unknown",
                            message="no acknowledgement from jobs.insert within 120 s",
                            attempt=first)
        ledger.record_decision(uow, "reconcile-remote", reason="outcome unknown: inspect the job",
                               as_of=at(5, 12), attempt=first, detail=self.detail())
        self.now(at(5, 12, 30))
        ledger.record_observation(uow, "running", source="bigquery.jobs.get", attempt=first,
                                  detail={"job_id": job, "location": "EU"})
        second = self.attempt("load", at(5, 13), None, "", generation=1)
        self.now(at(5, 13, 1))
        ledger.record_observation(uow, "duplicate", source="bigquery.jobs.insert", attempt=second,
                                  detail={"http_status": 409, "job_id": job,
                                          "message": f"Already Exists: Job {job}"})
        self.now(at(5, 15))
        ledger.record_observation(uow, "DONE", source="bigquery.jobs.get", attempt=second,
                                  detail={"state": "DONE", "errorResult": None, "errors": []})
        ledger.finish_attempt(uow, second, "succeeded")
        ledger.mark_generation(uow, 1, "succeeded")
        self.now(at(5, 15, 5))
        ledger.record_decision(uow, "validate-output", reason="finished without error: validate",
                               as_of=at(5, 15, 5), attempt=second, detail=self.detail())

    def _publish(self) -> None:
        ledger, uow = self.ledger, self.uow["publish"]
        self.now(at(5, 20))
        ledger.record_job_generation(uow)
        first = self.attempt("publish", at(5, 20), at(5, 25), "unknown", generation=1)
        ledger.record_error(uow, error_class="TimeoutError", classification="unknown",
                            message="attempt timeout after 300 s", attempt=first)
        ledger.record_decision(uow, "reconcile-remote", reason="outcome unknown: inspect the job",
                               as_of=at(5, 25), attempt=first, detail=self.detail())

    def _report_file(self) -> None:
        ledger, uow = self.ledger, self.uow["report_file"]
        self.now(at(5, 2))
        ledger.record_job_generation(uow)
        first = self.attempt("report_file", at(5, 2), None, "", generation=1)
        self.now(at(5, 4))
        ledger.record_observation(uow, "DONE", source="bigquery.jobs.get", attempt=first,
                                  detail={"state": "DONE", "errorResult": {
                                      "reason": "invalid", "message": "Column amount missing"}})
        ledger.finish_attempt(uow, first, "failed-permanent")
        ledger.record_error(uow, error_class="google.api_core.exceptions.BadRequest",
                            message="Column amount missing", classification="permanent",
                            attempt=first)
        ledger.mark_generation(uow, 1, "confirmed-failed")
        self.now(at(5, 4, 10))
        ledger.record_decision(uow, "repair-cause", reason="failed permanently",
                               as_of=at(5, 4, 10), attempt=first, detail=self.detail())

    def _archive(self) -> None:
        ledger, uow = self.ledger, self.uow["archive"]
        first = self.attempt("archive", at(5, 0), at(5, 10), "failed-transient")
        self.transient("archive", first)
        second = self.attempt("archive", at(5, 14), at(5, 26), "failed-transient")
        self.transient("archive", second)
        ledger.record_attempt_not_started(
            uow, reason="attempt 3 could start at 05:34 and finish at 06:06, after the deadline "
            "06:00: do not start it", as_of=at(5, 26),
            detail=self.detail(backoff=480, earliest_start=at(5, 34).isoformat(),
                               estimated_finish=at(6, 6).isoformat(), duration=1620,
                               validation=300))

    def _transform(self) -> None:
        ledger, uow = self.ledger, self.uow["transform"]
        first = self.attempt("transform", at(5, 8), at(5, 11), "failed-transient")
        self.transient("transform", first)
        second = self.attempt("transform", at(5, 15), at(5, 27), "failed-transient")
        self.transient("transform", second)
        ledger.record_decision(uow, "wait-backoff", reason="attempt 3 could start at 05:35",
                               as_of=at(5, 27), attempt=second, detail=self.detail(
                                   backoff=480, earliest_start=at(5, 35).isoformat(),
                                   estimated_finish=at(5, 50).isoformat(), duration=600,
                                   validation=300))

    def _monitor(self) -> None:
        ledger, uow = self.ledger, self.uow["monitor"]
        first = self.attempt("monitor", at(5, 5), None, "")
        self.now(at(5, 15))
        ledger.record_observation(uow, "running", source="bigquery.jobs.get", attempt=first)
        ledger.record_decision(uow, "observe-running", reason="still running: observe it",
                               as_of=at(5, 15), attempt=first, detail=self.detail())


@dataclass(frozen=True)
class StoryLedger:
    """A written story: the ledger's URL and path, and the unit of work id of each task."""

    url: str
    path: Path
    uow: dict[str, str]


def write_story(path: Path) -> StoryLedger:
    """Write the story into a new SQLite ledger at ``path``."""
    url = f"sqlite:///{path}"
    clock = StoryClock()
    with Ledger.open(url, clock=clock) as ledger:
        story = Story(ledger, clock)
        story.write()
    return StoryLedger(url, path, story.uow)
