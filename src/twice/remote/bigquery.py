"""BigQuery behind the ``twice.remote.jobs`` protocol, on ``google-cloud-bigquery``.

- ``submit`` inserts a query job under the caller's deterministic id (``ctx.job_id``) with
  ``Client.query(job_id=...)``. A 409 (Conflict/AlreadyExists) raises ``DuplicateJob``: the job
  exists, so ``submit_or_inspect`` looks it up with ``get_job``; no new id is ever invented here.
  A 5xx, a broken connection or a timeout on the insert is an *unknown* outcome (the job may
  exist), never a failure.
- ``get`` reads the job: DONE with ``errorResult`` is a failure, classified by its ``reason``
  (``classify_reason``: ``backendError``/``rateLimitExceeded``/``internalError``... are transient,
  ``invalidQuery``/``bytesBilledLimitExceeded``... permanent); ``errors`` without ``errorResult``
  are non-fatal and surface as ``JobStatus.nonfatal_errors`` for the acceptance checks.
- ``cancel`` calls ``jobs.cancel``, which only *requests* a cancel: the returned status is
  usually still RUNNING, and the job may yet succeed. Poll ``get``.
- ``estimate`` is a dry run (``QueryJobConfig(dry_run=True)``): ``totalBytesProcessed``; when a
  referenced table is clustered the estimate is marked an upper bound (BigQuery prunes clustered
  blocks only while running).

``maximum_bytes_billed`` from the config goes to ``QueryJobConfig.maximum_bytes_billed`` as
given: this adapter never changes it between attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from twice.core.extras import require
from twice.remote.jobs import (
    AcknowledgementLost,
    BackendError,
    Clock,
    DuplicateJob,
    Estimate,
    JobError,
    JobFailed,
    JobNotFound,
    JobState,
    JobStatus,
    RemoteJobService,
    ResponseTimeout,
    SubmitBackendError,
    config_bytes_limit,
    config_query,
    run_job,
    utc_now,
)

if TYPE_CHECKING:
    from google.cloud import bigquery

WHO = "BigQuery jobs"
Classification = Literal["transient", "permanent"]
#: errorResult reasons that a new job may get past (BigQuery's troubleshooting table says
#: retry); anything else, including reasons we do not know, is permanent: repair the cause.
TRANSIENT_REASONS = frozenset({
    "backendError", "internalError", "rateLimitExceeded", "jobBackendError",
    "jobInternalError", "jobRateLimitExceeded", "tableUnavailable",
})
CONFIG_KEYS = frozenset({
    "query", "maximum_bytes_billed", "destination", "write_disposition", "labels",
    "priority", "use_legacy_sql", "location",
})


def classify_reason(reason: str) -> Classification:
    """Transient or permanent, from BigQuery's ``errorResult.reason``."""
    return "transient" if reason in TRANSIENT_REASONS else "permanent"


class TransientJobFailure(JobFailed):
    """DONE with a transient ``errorResult`` (list it in ``RetryPolicy.transient``)."""

    classification: Classification = "transient"


class PermanentJobFailure(JobFailed):
    """DONE with a permanent ``errorResult`` (invalidQuery, bytesBilledLimitExceeded, ...)."""

    classification: Classification = "permanent"


def failure_for(status: JobStatus) -> JobFailed:
    """The classified exception for a failed status."""
    assert status.error_result is not None
    if classify_reason(status.error_result.reason) == "transient":
        return TransientJobFailure(status)
    return PermanentJobFailure(status)


def run_query(
    service: RemoteJobService,
    job_id: str,
    query: str,
    *,
    maximum_bytes_billed: int | None = None,
    poll_interval: float = 1.0,
    timeout: float | None = None,
    sleep: Callable[[float], None] | None = None,
    **config: Any,
) -> JobStatus:
    """``run_job`` for a query, raising ``TransientJobFailure``/``PermanentJobFailure``."""
    import time

    full = {"query": query, **config}
    if maximum_bytes_billed is not None:
        full["maximum_bytes_billed"] = maximum_bytes_billed
    try:
        return run_job(service, job_id, full, poll_interval=poll_interval, timeout=timeout,
                       sleep=sleep or time.sleep)
    except JobFailed as exc:
        raise failure_for(exc.status) from None


def _job_error(raw: Mapping[str, Any]) -> JobError:
    return JobError(str(raw.get("reason", "")), str(raw.get("message", "")), raw.get("location"))


class BigQueryJobs:
    """The protocol over a ``google.cloud.bigquery.Client`` (see the module docstring).

    ``retry`` is passed to the client's calls: None (the default) leaves retrying to twice's
    own policy, so every insert twice makes is one recorded attempt.
    """

    def __init__(
        self,
        client: bigquery.Client,
        *,
        location: str | None = None,
        name: str = "bigquery",
        retry: Any = None,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._location = location
        self._name = name
        self._retry = retry
        self._clock = clock or utc_now

    @property
    def name(self) -> str:
        return self._name

    def _job_config(self, config: Mapping[str, Any], *, dry_run: bool = False) -> Any:
        bigquery = require("google.cloud.bigquery", extra="bigquery", who=WHO)

        unknown = sorted(set(config) - CONFIG_KEYS)
        if unknown:
            raise ValueError(f"config.{unknown[0]}: unknown key (known: {sorted(CONFIG_KEYS)})")
        limit = config_bytes_limit(config)
        job_config = bigquery.QueryJobConfig(
            dry_run=dry_run, use_legacy_sql=bool(config.get("use_legacy_sql", False)),
        )
        if dry_run:
            job_config.use_query_cache = False
        if limit is not None:
            job_config.maximum_bytes_billed = limit
        if config.get("destination"):
            job_config.destination = str(config["destination"])
        if config.get("write_disposition"):
            job_config.write_disposition = str(config["write_disposition"])
        if config.get("labels"):
            job_config.labels = dict(config["labels"])
        if config.get("priority"):
            job_config.priority = str(config["priority"])
        return job_config

    def _status(self, job: Any) -> JobStatus:
        """A JobStatus from a job resource the client returned, observed now (our clock)."""
        error = job.error_result
        errors = tuple(_job_error(e) for e in (job.errors or ()))
        statistics: dict[str, Any] = {}
        for key, value in (
            ("creationTime", job.created), ("startTime", job.started), ("endTime", job.ended),
        ):
            if value is not None:
                statistics[key] = value.isoformat()
        for key, attr in (
            ("totalBytesProcessed", "total_bytes_processed"),
            ("totalBytesBilled", "total_bytes_billed"),
            ("numDmlAffectedRows", "num_dml_affected_rows"),
        ):
            value = getattr(job, attr, None)
            if value is not None:
                statistics[key] = value
        return JobStatus(
            job_id=job.job_id,
            state=JobState(job.state or "PENDING"),
            observed_at=self._clock(),
            service=self._name,
            error_result=None if error is None else _job_error(error),
            errors=errors,
            statistics=statistics,
        )

    def submit(self, job_id: str, config: Mapping[str, Any]) -> JobStatus:
        """jobs.insert under ``job_id`` (see the module docstring for the error mapping)."""
        import requests

        exceptions = require("google.api_core.exceptions", extra="bigquery", who=WHO)

        query = config_query(config)
        job_config = self._job_config(config)
        try:
            job = self._client.query(
                query, job_config=job_config, job_id=job_id,
                location=config.get("location", self._location), retry=self._retry,
                job_retry=None,
            )
        except exceptions.Conflict:
            raise DuplicateJob(job_id) from None
        except exceptions.ServerError as exc:
            raise SubmitBackendError(
                f"{exc.message} (the job may or may not have been created)",
                job_id=job_id, status=exc.code or 503,
            ) from exc
        except requests.exceptions.Timeout as exc:
            raise ResponseTimeout(f"timed out waiting for jobs.insert {job_id}: {exc}") from exc
        except requests.exceptions.ConnectionError as exc:
            raise AcknowledgementLost(
                f"connection broke after sending jobs.insert {job_id}: {exc}"
            ) from exc
        return self._status(job)

    def get(self, job_id: str) -> JobStatus:
        """jobs.get: ``JobNotFound`` on 404, ``BackendError`` on 5xx or a broken read."""
        return self._by_id(self._client.get_job, job_id, read=True)

    def cancel(self, job_id: str) -> JobStatus:
        """jobs.cancel: a request only; the status it returns is usually not DONE yet."""
        return self._by_id(self._client.cancel_job, job_id, read=False)

    def _by_id(self, call: Callable[..., Any], job_id: str, *, read: bool) -> JobStatus:
        """``call`` (``get_job`` or ``cancel_job``) for ``job_id``, BigQuery's answers in the
        protocol's errors: 404 ``JobNotFound``, 5xx ``BackendError``. Only a ``read`` turns a
        broken connection into ``BackendError`` too: repeating a read is safe."""
        exceptions = require("google.api_core.exceptions", extra="bigquery", who=WHO)

        try:
            job = call(job_id, location=self._location, retry=self._retry)
        except exceptions.NotFound:
            raise JobNotFound(job_id) from None
        except exceptions.ServerError as exc:
            raise BackendError(exc.message, job_id=job_id, status=exc.code or 503) from exc
        except OSError as exc:  # requests' ConnectionError/Timeout
            if not read:
                raise
            raise BackendError(f"{type(exc).__name__}: {exc}", job_id=job_id) from exc
        return self._status(job)

    def estimate(self, query: str, config: Mapping[str, Any] | None = None) -> Estimate:
        """A dry run: ``totalBytesProcessed``; an upper bound when a referenced table is
        clustered. Nothing runs and nothing is billed."""
        job_config = self._job_config({"query": query, **(config or {})}, dry_run=True)
        job = self._client.query(
            query, job_config=job_config, location=self._location, retry=self._retry,
            job_retry=None,
        )
        total = int(job.total_bytes_processed or 0)
        clustered: list[str] = []
        for ref in job.referenced_tables or ():
            table = self._client.get_table(ref, retry=self._retry)
            if table.clustering_fields:
                clustered.append(f"{ref.table_id} ({', '.join(table.clustering_fields)})")
        notes = [
            "BigQuery dry run totalBytesProcessed: the columns read in the partitions kept; "
            "LIMIT does not reduce it"
        ]
        if clustered:
            notes.append(
                f"clustered table(s) {'; '.join(clustered)}: blocks pruned while running are "
                "not known to the dry run, so this is an upper bound"
            )
        return Estimate(
            bytes=total, method="bigquery dry run", upper_bound=bool(clustered),
            notes=tuple(notes),
        )
