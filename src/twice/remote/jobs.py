"""The remote job protocol: submit with a client-selected id, inspect by id, request a cancel.

Three questions stay separate, because each has its own evidence:

- *Did the request reach the service?* A submit that times out or loses its connection after
  sending may have created the job. It raises ``OutcomeUnknownError``, never a plain failure:
  look the job up by its id (``reconcile_job``) before doing anything else.
- *Did the job finish?* ``JobState.DONE`` only means "no longer running"; a DONE job with an
  ``error_result`` failed. ``errors`` without ``error_result`` are non-fatal (BigQuery lists rows
  skipped under ``maxBadRecords`` there) and must be compared with the acceptance criteria.
- *Is the output correct?* Not answered here: that is acceptance and fingerprinting.

Reusing a job id answers ``DuplicateJob`` (HTTP 409): the job already exists, so inspect it
(``submit_or_inspect``) instead of inventing a new id. A new id (generation) is appropriate only
once the earlier job is confirmed failed. ``cancel`` returns at once and does not mean cancelled:
the job may still finish, so poll it afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from twice.core.outcomes import RemoteState
from twice.errors import OutcomeUnknownError, TwiceError


class JobState(StrEnum):
    """BigQuery's job states: DONE means finished, successfully or not."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"


@dataclass(frozen=True)
class JobError:
    """One error object (BigQuery's ``ErrorProto``): a machine ``reason`` and a message."""

    reason: str
    message: str
    location: str | None = None

    def to_api(self) -> dict[str, str]:
        resource = {"reason": self.reason, "message": self.message}
        if self.location is not None:
            resource["location"] = self.location
        return resource


@dataclass(frozen=True)
class JobStatus:
    """A job's status as one service saw it at ``observed_at`` (evidence ages; say when)."""

    job_id: str
    state: JobState
    observed_at: datetime
    service: str = "remote"
    error_result: JobError | None = None
    errors: tuple[JobError, ...] = ()
    statistics: Mapping[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.state is JobState.DONE

    @property
    def failed(self) -> bool:
        """DONE with an ``error_result``: the job ended unsuccessfully."""
        return self.done and self.error_result is not None

    @property
    def succeeded(self) -> bool:
        """DONE without ``error_result``. Still check ``nonfatal_errors`` against acceptance."""
        return self.done and self.error_result is None

    @property
    def nonfatal_errors(self) -> tuple[JobError, ...]:
        """Errors that did not fail the job (all of ``errors`` when it did not fail)."""
        if self.error_result is None:
            return self.errors
        return tuple(error for error in self.errors if error != self.error_result)

    def remote_state(self) -> RemoteState:
        """For the executor: PENDING/RUNNING are running; a DONE job is judged by errorResult."""
        if not self.done:
            return RemoteState.RUNNING
        return RemoteState.FAILED if self.error_result is not None else RemoteState.SUCCEEDED

    def to_api(self) -> dict[str, Any]:
        """The job resource as BigQuery's REST API would write it (jobs.get)."""
        status: dict[str, Any] = {"state": self.state.value}
        if self.error_result is not None:
            status["errorResult"] = self.error_result.to_api()
        if self.errors:
            status["errors"] = [error.to_api() for error in self.errors]
        return {"jobReference": {"jobId": self.job_id}, "status": status,
                "statistics": dict(self.statistics)}


@dataclass(frozen=True)
class Estimate:
    """Bytes a query would read, measured before running it (a dry run), and how sure that is.

    ``upper_bound`` is True when the service may read less than this (BigQuery on clustered
    tables; Parquet row groups a sorted column's statistics could skip): a refusal based on it
    may refuse a query whose real cost is lower, so reports say so. ``columns`` breaks the bytes
    down per column; ``notes`` says what did and did not reduce the estimate (e.g. LIMIT).
    """

    bytes: int
    method: str
    upper_bound: bool = False
    columns: Mapping[str, int] = field(default_factory=dict)
    partitions: tuple[str, ...] = ()
    partitions_total: int | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.bytes, bool) or not isinstance(self.bytes, int) or self.bytes < 0:
            raise ValueError(f"estimate bytes must be an integer >= 0, got {self.bytes!r}")

    def to_detail(self) -> dict[str, Any]:
        """JSON-ready form for the ledger and for ``twice estimate --json``."""
        return {
            "bytes": self.bytes,
            "method": self.method,
            "upper_bound": self.upper_bound,
            "columns": dict(self.columns),
            "partitions": list(self.partitions),
            "partitions_total": self.partitions_total,
            "notes": list(self.notes),
        }


# -- what every service implementation shares -------------------------------------------------

Clock = Callable[[], datetime]
"""When a service observed a status (aware UTC); injectable so tests control evidence ages."""


def utc_now() -> datetime:
    """The default service clock."""
    return datetime.now(UTC)


def config_query(config: Mapping[str, Any]) -> str:
    """The job's SQL, ``config["query"]``: refused unless a non-empty string."""
    query = config.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValueError("config.query: a non-empty SQL string is required")
    return query


def config_bytes_limit(config: Mapping[str, Any]) -> int | None:
    """``config["maximum_bytes_billed"]``: None or a positive integer (anything else is refused)."""
    limit = config.get("maximum_bytes_billed")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise ValueError(f"config.maximum_bytes_billed: a positive integer, got {limit!r}")
    return limit


#: BigQuery's ``errorResult`` for a job a cancel request stopped (services imitate its words).
STOPPED = JobError("stopped", "Job execution was cancelled: User requested cancellation")


def bytes_billed_exceeded(limit: object, needed: int) -> JobError:
    """BigQuery's ``errorResult`` for a query over its ``maximum_bytes_billed``: it did not run."""
    return JobError(
        "bytesBilledLimitExceeded",
        f"Query exceeded limit for bytes billed: {limit}. {needed} or higher required.",
    )


# -- errors -----------------------------------------------------------------------------------


class RemoteServiceError(TwiceError):
    """An HTTP error answered by the service (``status`` and BigQuery's ``reason``)."""

    status: int = 400
    reason: str = "invalid"

    def __init__(self, message: str, *, job_id: str | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id


class DuplicateJob(RemoteServiceError):
    """409 duplicate: a job with this id already exists. Inspect it; do not take a new id."""

    status = 409
    reason = "duplicate"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"Already Exists: Job {job_id}", job_id=job_id)


class JobNotFound(RemoteServiceError):
    """404 notFound: no job with this id (the submit never arrived, or not yet)."""

    status = 404
    reason = "notFound"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"Not found: Job {job_id}", job_id=job_id)


class BackendError(RemoteServiceError):
    """5xx backendError: a temporary server failure; retrying the *read* is safe."""

    status = 503
    reason = "backendError"

    def __init__(self, message: str = "Backend error", *, job_id: str | None = None,
                 status: int = 503) -> None:
        super().__init__(f"{status} {message}", job_id=job_id)
        self.status = status


class AcknowledgementLost(OutcomeUnknownError, ConnectionError):
    """The connection broke after the request was sent: the job may exist."""


class ResponseTimeout(OutcomeUnknownError, TimeoutError):
    """No response within the client's timeout: the job may exist."""


class SubmitBackendError(BackendError, OutcomeUnknownError):
    """A 5xx answer to a submit. BigQuery documents that it is then unclear whether the job was
    created, so it is an unknown outcome rather than a failure."""


class JobStillRunning(OutcomeUnknownError, TimeoutError):
    """The client stopped waiting while the job was still PENDING/RUNNING: observe it."""

    def __init__(self, job_id: str, waited: float, state: JobState) -> None:
        super().__init__(f"job {job_id} still {state.value} after waiting {waited:g} s")
        self.job_id = job_id
        self.state = state


class JobFailed(TwiceError):
    """The job is DONE with an ``errorResult``: confirmed failed (a new generation may follow).

    Whether retrying can help depends on ``error.reason`` (BigQuery: a ``backendError`` job
    failure is safe to retry); list ``JobFailed`` as transient in the policy to retry it.
    """

    def __init__(self, status: JobStatus) -> None:
        error = status.error_result
        assert error is not None
        super().__init__(f"job {status.job_id} failed: {error.reason}: {error.message}")
        self.job_id = status.job_id
        self.error = error
        self.status = status


# -- the protocol ------------------------------------------------------------------------------


@runtime_checkable
class RemoteJobService(Protocol):
    """A service running jobs under ids the client chooses."""

    @property
    def name(self) -> str: ...

    def submit(self, job_id: str, config: Mapping[str, Any]) -> JobStatus:
        """Create job ``job_id``; ``DuplicateJob`` if it exists; an ``OutcomeUnknownError`` error
        when the request may have arrived without an answer."""
        ...

    def get(self, job_id: str) -> JobStatus:
        """The job's status now (``JobNotFound`` if there is none)."""
        ...

    def cancel(self, job_id: str) -> JobStatus:
        """Ask for a cancel; returns at once and does NOT mean cancelled: poll afterwards."""
        ...


@runtime_checkable
class EstimatingJobService(RemoteJobService, Protocol):
    """A job service that can also estimate a query's bytes without running it (a dry run).

    Kept separate from ``RemoteJobService`` so services without a dry run still satisfy that
    protocol; ``estimate_query`` tells the two apart.
    """

    def estimate(self, query: str, config: Mapping[str, Any] | None = None) -> Estimate:
        """Bytes ``query`` would read; nothing runs and nothing is billed."""
        ...


def estimate_query(
    service: RemoteJobService, query: str, config: Mapping[str, Any] | None = None
) -> Estimate | None:
    """The service's dry-run estimate, or None when it offers none (then nothing is guarded)."""
    estimate = getattr(service, "estimate", None)
    if estimate is None or not callable(estimate):
        return None
    result = estimate(query, config)
    if not isinstance(result, Estimate):
        raise TypeError(f"{service.name}.estimate returned {type(result).__name__}, not Estimate")
    return result


# -- helpers for task code ---------------------------------------------------------------------


def submit_or_inspect(
    service: RemoteJobService, job_id: str, config: Mapping[str, Any]
) -> JobStatus:
    """Submit ``job_id``; if the service answers duplicate, return the existing job instead.

    This is what makes a resubmission after a lost acknowledgement safe: the same id finds the
    job the first request created, and no second job is started.
    """
    try:
        return service.submit(job_id, config)
    except DuplicateJob:
        return service.get(job_id)


def wait_for_job(
    service: RemoteJobService,
    job_id: str,
    *,
    poll_interval: float = 1.0,
    timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> JobStatus:
    """Poll ``get`` until the job is DONE. A 5xx on the read is retried (reads are safe).

    Raises ``JobStillRunning`` (an unknown outcome) if ``timeout`` seconds pass first.
    """
    started = clock()
    state = JobState.PENDING
    while True:
        try:
            status = service.get(job_id)
        except BackendError:
            status = None
        if status is not None:
            if status.done:
                return status
            state = status.state
        waited = clock() - started
        if timeout is not None and waited >= timeout:
            raise JobStillRunning(job_id, waited, state)
        sleep(poll_interval)


def run_job(
    service: RemoteJobService,
    job_id: str,
    config: Mapping[str, Any],
    *,
    poll_interval: float = 1.0,
    timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> JobStatus:
    """Submit (or find) the job, wait for DONE, raise ``JobFailed`` on ``errorResult``.

    Returns the final status; return it from the task so the executor records it as evidence
    (source ``remote:<service>``) and its non-fatal ``errors`` as non-fatal errors.
    """
    submitted = submit_or_inspect(service, job_id, config)
    status = submitted if submitted.done else wait_for_job(
        service, job_id, poll_interval=poll_interval, timeout=timeout, sleep=sleep
    )
    if status.failed:
        raise JobFailed(status)
    return status


def reconcile_job(service: RemoteJobService, job_id: str) -> RemoteState:
    """What became of ``job_id``: the answer a task's ``reconcile`` function should give.

    ``NOT_FOUND`` means the request never arrived (the same id may be resubmitted); a 5xx on
    the read gives ``UNKNOWN`` (no evidence either way: look again later).
    """
    try:
        return service.get(job_id).remote_state()
    except JobNotFound:
        return RemoteState.NOT_FOUND
    except BackendError:
        return RemoteState.UNKNOWN
