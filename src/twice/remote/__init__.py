"""Remote job services addressed by client-selected job ids (BigQuery-style).

``twice.remote.jobs`` holds the protocol, the status and error types and the helpers a task uses
(submit or inspect, wait, reconcile); ``twice.testing.fake_bigquery`` is an in-process fake that
follows BigQuery's documented job-id semantics, for tests and demos.
"""

from __future__ import annotations

from twice.remote.jobs import (
    AcknowledgementLost,
    BackendError,
    DuplicateJob,
    Estimate,
    EstimatingJobService,
    JobError,
    JobFailed,
    JobNotFound,
    JobState,
    JobStatus,
    JobStillRunning,
    OutcomeUnknownError,
    RemoteJobService,
    RemoteServiceError,
    ResponseTimeout,
    SubmitBackendError,
    estimate_query,
    reconcile_job,
    run_job,
    submit_or_inspect,
    wait_for_job,
)

__all__ = [
    "AcknowledgementLost",
    "BackendError",
    "DuplicateJob",
    "Estimate",
    "EstimatingJobService",
    "JobError",
    "JobFailed",
    "JobNotFound",
    "JobState",
    "JobStatus",
    "JobStillRunning",
    "OutcomeUnknownError",
    "RemoteJobService",
    "RemoteServiceError",
    "ResponseTimeout",
    "SubmitBackendError",
    "estimate_query",
    "reconcile_job",
    "run_job",
    "submit_or_inspect",
    "wait_for_job",
]
