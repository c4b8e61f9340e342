"""An in-process fake of BigQuery's jobs API (insert/get/cancel), with fault injection.

It follows the documented semantics the executor depends on, so a test that passes here tests
the executor's reasoning rather than a convenient stub:

- ``jobs.insert`` with a client-selected id that already exists answers 409 ``duplicate``
  (``DuplicateJob`` carrying the id); the existing job can be inspected with ``get``.
- States are PENDING -> RUNNING -> DONE. DONE with ``errorResult`` is a failure; ``errors``
  without ``errorResult`` are non-fatal (the job succeeded).
- A 5xx answer to an insert leaves it unclear whether the job was created
  (``SubmitBackendError``, an unknown outcome); a 5xx on ``get`` is a plain temporary failure.
- ``jobs.cancel`` returns at once; the job stops only later (``cancel_delay``) and may finish
  first, so a cancel request never means cancelled.

Faults: ``lose_acknowledgements`` (the job is created but the client sees a connection error or
a timeout; with ``arrive_after`` the request reaches the service only later, so a ``get`` right
away says not found), ``fail_next`` (5xx answers) and per-job durations and outcomes
(``plan_job``/``plan_next``) for slow or failing jobs. Times come from an injectable clock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict, Unpack

from twice.remote.jobs import (
    STOPPED,
    AcknowledgementLost,
    BackendError,
    Clock,
    DuplicateJob,
    Estimate,
    JobError,
    JobNotFound,
    JobState,
    JobStatus,
    ResponseTimeout,
    SubmitBackendError,
    bytes_billed_exceeded,
    utc_now,
)

Method = Literal["submit", "get", "cancel", "estimate"]


@dataclass(frozen=True)
class JobPlan:
    """How a job will behave once created: time queued, time running, how it ends."""

    pending: float = 0.0
    duration: float = 0.0
    error_result: JobError | None = None
    errors: tuple[JobError, ...] = ()


class JobScript(TypedDict, total=False):
    """What ``plan_job``/``plan_next`` may script: a ``duration`` or ``pending`` time left out
    (or None) takes the fake's default; ``error_result`` fails the job, ``errors`` are
    non-fatal."""

    duration: float | None
    pending: float | None
    error_result: JobError | None
    errors: tuple[JobError, ...]


@dataclass
class FakeJob:
    """A job the fake service holds; ``end`` moves earlier if a cancel takes effect first."""

    job_id: str
    config: Mapping[str, Any]
    created_at: datetime
    plan: JobPlan
    cancel_requested_at: datetime | None = None
    cancelled_at: datetime | None = None

    @property
    def start(self) -> datetime:
        return self.created_at + timedelta(seconds=self.plan.pending)

    @property
    def natural_end(self) -> datetime:
        return self.start + timedelta(seconds=self.plan.duration)

    def status(self, now: datetime, service: str) -> JobStatus:
        cancelled = self.cancelled_at is not None and self.cancelled_at < self.natural_end
        end = self.cancelled_at if cancelled and self.cancelled_at is not None else self.natural_end
        if now < min(self.start, end):
            state = JobState.PENDING
        elif now < end:
            state = JobState.RUNNING
        else:
            state = JobState.DONE
        error_result = None
        errors: tuple[JobError, ...] = ()
        if state is JobState.DONE:
            error_result = STOPPED if cancelled else self.plan.error_result
            errors = self.plan.errors + ((error_result,) if error_result is not None else ())
        return JobStatus(
            job_id=self.job_id,
            state=state,
            observed_at=now,
            service=service,
            error_result=error_result,
            errors=errors,
            statistics={"creationTime": self.created_at.isoformat()},
        )


@dataclass
class _Fault:
    method: Method
    kind: Literal["lost-ack", "5xx"]
    status: int = 503
    created: bool = False
    arrive_after: float = 0.0
    error: Literal["connection", "timeout"] = "connection"


@dataclass(frozen=True)
class Call:
    """One request the fake answered, for tests to assert on (``answer`` is what the client saw)."""

    method: Method
    job_id: str
    answer: str
    at: datetime


@dataclass
class _Arrival:
    job_id: str
    config: Mapping[str, Any]
    at: datetime


class FakeBigQuery:
    """A thread-safe fake BigQuery jobs service (see the module docstring)."""

    def __init__(
        self,
        *,
        name: str = "bigquery",
        clock: Clock | None = None,
        duration: float = 0.0,
        pending: float = 0.0,
        cancel_delay: float = 0.5,
    ) -> None:
        self._name = name
        self._clock = clock or utc_now
        self._default = JobPlan(pending=pending, duration=duration)
        self._cancel_delay = cancel_delay
        self._jobs: dict[str, FakeJob] = {}
        self._plans: dict[str, JobPlan] = {}
        self._next_plans: deque[JobPlan] = deque()
        self._faults: deque[_Fault] = deque()
        self._arrivals: list[_Arrival] = []
        self._calls: list[Call] = []
        self._estimates: dict[str, Estimate] = {}
        self._lock = threading.RLock()

    @property
    def name(self) -> str:
        return self._name

    # -- fault injection -------------------------------------------------------------------

    def plan_job(self, job_id: str, **script: Unpack[JobScript]) -> None:
        """Script how job ``job_id`` will behave when it is created."""
        with self._lock:
            self._plans[job_id] = self._plan(script)

    def plan_next(self, **script: Unpack[JobScript]) -> None:
        """Script the next job created without a ``plan_job`` of its own (a queue)."""
        with self._lock:
            self._next_plans.append(self._plan(script))

    def lose_acknowledgements(
        self,
        count: int = 1,
        *,
        arrive_after: float = 0.0,
        error: Literal["connection", "timeout"] = "connection",
    ) -> None:
        """The next ``count`` submits reach the service but their answers are lost.

        With ``arrive_after`` seconds the request is still in flight: the job appears only
        then, so a ``get`` before it says not found (the client cannot tell the difference).
        """
        with self._lock:
            for _ in range(count):
                self._faults.append(
                    _Fault("submit", "lost-ack", arrive_after=arrive_after, error=error)
                )

    def fail_next(
        self, method: Method, count: int = 1, *, status: int = 503, created: bool = False
    ) -> None:
        """The next ``count`` calls of ``method`` answer a 5xx (``created``: the submit's job
        was created anyway, which the client cannot know)."""
        with self._lock:
            for _ in range(count):
                self._faults.append(_Fault(method, "5xx", status=status, created=created))

    def plan_estimate(self, query: str, bytes_read: int, *, upper_bound: bool = False) -> None:
        """What a dry run of ``query`` answers; a job for it with a lower
        ``maximum_bytes_billed`` in its config ends DONE with ``bytesBilledLimitExceeded``."""
        with self._lock:
            self._estimates[query] = Estimate(
                bytes_read, method="fake dry run", upper_bound=upper_bound
            )

    # -- inspection for tests --------------------------------------------------------------

    @property
    def jobs(self) -> dict[str, FakeJob]:
        """Jobs that exist now (requests still in flight are not jobs yet)."""
        with self._lock:
            self._deliver(self._clock())
            return dict(self._jobs)

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def answers(self, method: Method | None = None) -> list[str]:
        return [call.answer for call in self.calls if method is None or call.method == method]

    # -- the API -----------------------------------------------------------------------------

    def submit(self, job_id: str, config: Mapping[str, Any]) -> JobStatus:
        """jobs.insert with a client-selected id."""
        with self._lock:
            now = self._clock()
            self._deliver(now)
            fault = self._take_fault("submit")
            if fault is not None and fault.kind == "5xx":
                if fault.created and job_id not in self._jobs:
                    self._create(job_id, config, now)
                self._log("submit", job_id, f"{fault.status} backendError", now)
                raise SubmitBackendError(
                    "Backend error (the job may or may not have been created)",
                    job_id=job_id, status=fault.status,
                )
            duplicate = False
            if job_id in self._jobs:
                duplicate = True
                answer = "409 duplicate"
            elif self._in_flight(job_id):
                # The resubmission overtook a lost request still in flight: one job, created
                # now; the late request will be answered duplicate (to nobody).
                self._arrivals = [a for a in self._arrivals if a.job_id != job_id]
                self._create(job_id, config, now)
                answer = "created (overtook a request in flight)"
            elif fault is not None and fault.arrive_after > 0:
                self._arrivals.append(
                    _Arrival(job_id, config, now + timedelta(seconds=fault.arrive_after))
                )
                answer = "request in flight"
            else:
                self._create(job_id, config, now)
                answer = "created"
            if fault is not None:  # the answer, whatever it was, never reaches the client
                self._log("submit", job_id, f"{answer}; acknowledgement lost", now)
                if fault.error == "timeout":
                    raise ResponseTimeout(f"timed out waiting for jobs.insert {job_id}")
                raise AcknowledgementLost(f"connection reset after sending jobs.insert {job_id}")
            self._log("submit", job_id, answer, now)
            if duplicate:
                raise DuplicateJob(job_id)
            return self._jobs[job_id].status(now, self._name)

    def _existing(self, method: Method, job_id: str, now: datetime) -> FakeJob:
        """What ``get`` and ``cancel`` do first: deliver what is due, answer an injected fault
        with a backend error, and a missing job with 404 (each logged as the API answered)."""
        self._deliver(now)
        fault = self._take_fault(method)
        if fault is not None:
            self._log(method, job_id, f"{fault.status} backendError", now)
            raise BackendError(job_id=job_id, status=fault.status)
        job = self._jobs.get(job_id)
        if job is None:
            self._log(method, job_id, "404 notFound", now)
            raise JobNotFound(job_id)
        return job

    def get(self, job_id: str) -> JobStatus:
        """jobs.get: the status now, ``JobNotFound`` if there is no such job."""
        with self._lock:
            now = self._clock()
            job = self._existing("get", job_id, now)
            status = job.status(now, self._name)
            self._log("get", job_id, status.state.value, now)
            return status

    def cancel(self, job_id: str) -> JobStatus:
        """jobs.cancel: returns at once; the job stops ``cancel_delay`` seconds later unless it
        finishes first. Poll ``get`` to learn which."""
        with self._lock:
            now = self._clock()
            job = self._existing("cancel", job_id, now)
            if job.cancel_requested_at is None:
                job.cancel_requested_at = now
                job.cancelled_at = now + timedelta(seconds=self._cancel_delay)
            status = job.status(now, self._name)
            self._log("cancel", job_id, f"cancel requested ({status.state.value})", now)
            return status

    def estimate(self, query: str, config: Mapping[str, Any] | None = None) -> Estimate:
        """jobs.insert with ``dryRun``: the planned estimate (0 bytes if none was planned)."""
        with self._lock:
            self._log("estimate", "", f"dry run {query[:40]!r}", self._clock())
            return self._estimates.get(query, Estimate(0, method="fake dry run"))

    # -- internals ---------------------------------------------------------------------------

    def _plan(self, script: JobScript) -> JobPlan:
        unknown = sorted(set(script) - JobScript.__optional_keys__)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
        pending, duration = script.get("pending"), script.get("duration")
        return JobPlan(
            pending=self._default.pending if pending is None else pending,
            duration=self._default.duration if duration is None else duration,
            error_result=script.get("error_result"),
            errors=tuple(script.get("errors", ())),
        )

    def _take_fault(self, method: Method) -> _Fault | None:
        for fault in self._faults:
            if fault.method == method:
                self._faults.remove(fault)
                return fault
        return None

    def _in_flight(self, job_id: str) -> bool:
        return any(arrival.job_id == job_id for arrival in self._arrivals)

    def _deliver(self, now: datetime) -> None:
        """Requests in flight whose time has come create their jobs."""
        due = [arrival for arrival in self._arrivals if arrival.at <= now]
        self._arrivals = [arrival for arrival in self._arrivals if arrival.at > now]
        for arrival in due:
            if arrival.job_id not in self._jobs:
                self._create(arrival.job_id, arrival.config, arrival.at)
                self._log("submit", arrival.job_id, "created (late request arrived)", arrival.at)

    def _create(self, job_id: str, config: Mapping[str, Any], now: datetime) -> None:
        plan = self._plans.pop(job_id, None)
        if plan is None:
            plan = self._next_plans.popleft() if self._next_plans else self._default
        limit = config.get("maximum_bytes_billed")
        planned = self._estimates.get(str(config.get("query", "")))
        if limit is not None and planned is not None and planned.bytes > int(limit):
            plan = JobPlan(pending=plan.pending,
                           error_result=bytes_billed_exceeded(limit, planned.bytes))
        self._jobs[job_id] = FakeJob(job_id, dict(config), now, plan)

    def _log(self, method: Method, job_id: str, answer: str, at: datetime) -> None:
        self._calls.append(Call(method, job_id, answer, at))
