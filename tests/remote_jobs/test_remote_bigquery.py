"""BigQueryJobs on a real google-cloud-bigquery Client answered by recorded REST exchanges."""

from __future__ import annotations

import pytest

from tests.remote_jobs.replay import replay_client
from twice.define.pipeline import RemoteState
from twice.engine.cost import CostLimitExceeded, check_limit
from twice.remote import (
    AcknowledgementLost,
    BackendError,
    JobNotFound,
    JobState,
    OutcomeUnknownError,
    ResponseTimeout,
    SubmitBackendError,
    reconcile_job,
    submit_or_inspect,
    wait_for_job,
)
from twice.remote.bigquery import (
    BigQueryJobs,
    PermanentJobFailure,
    TransientJobFailure,
    classify_reason,
    run_query,
)

JOB = "twice_funds_positions_load_2024-12-02_g1"
QUERY = "SELECT fund_id, SUM(amount) AS position FROM funds.movements GROUP BY fund_id"


def service(name: str) -> tuple[BigQueryJobs, object]:
    client, adapter = replay_client(name)
    return BigQueryJobs(client, location="EU"), adapter


def inserts(adapter: object) -> list[dict]:
    return [s for s in adapter.sent if s["method"] == "POST" and s["path"].endswith("/jobs")]


def run(svc: BigQueryJobs, job_id: str = JOB, limit: int | None = 200):
    return run_query(svc, job_id, QUERY, maximum_bytes_billed=limit, poll_interval=0,
                     sleep=lambda _s: None)


def test_insert_carries_client_job_id_and_limit_then_polls_to_done() -> None:
    svc, adapter = service("bq_insert_then_done")
    status = run(svc)
    assert status.succeeded and status.job_id == JOB
    body = inserts(adapter)[0]["json"]
    assert body["jobReference"]["jobId"] == JOB
    assert body["configuration"]["query"]["maximumBytesBilled"] == "200"
    assert body["configuration"]["query"]["query"] == QUERY
    assert [s["method"] for s in adapter.sent] == ["POST", "GET", "GET"]
    assert status.observed_at.tzinfo is not None
    assert status.statistics["totalBytesBilled"] == 10485760
    assert not adapter.pending


def test_lost_ack_then_409_inspects_the_existing_job_never_a_new_id() -> None:
    svc, adapter = service("bq_lost_ack_then_duplicate")
    with pytest.raises(AcknowledgementLost) as lost:
        svc.submit(JOB, {"query": QUERY})
    assert isinstance(lost.value, OutcomeUnknownError)
    status = submit_or_inspect(svc, JOB, {"query": QUERY})
    assert status.succeeded and status.job_id == JOB
    ids = [s["json"]["jobReference"]["jobId"] for s in inserts(adapter)]
    assert ids == [JOB, JOB]  # the resubmission used the same id; nothing new was invented
    assert adapter.sent[-1]["method"] == "GET" and adapter.sent[-1]["path"].endswith(JOB)


def test_insert_5xx_and_timeout_are_unknown_outcomes_not_failures() -> None:
    svc, _ = service("bq_insert_5xx")
    with pytest.raises(SubmitBackendError) as exc:
        svc.submit(JOB, {"query": QUERY})
    assert isinstance(exc.value, OutcomeUnknownError) and exc.value.status == 503
    svc, _ = service("bq_insert_timeout")
    with pytest.raises(ResponseTimeout):
        svc.submit(JOB, {"query": QUERY})


@pytest.mark.parametrize(
    ("fixture", "exc_type", "reason"),
    [
        ("bq_done_backend_error", TransientJobFailure, "backendError"),
        ("bq_done_invalid_query", PermanentJobFailure, "invalidQuery"),
    ],
)
def test_done_with_error_result_is_a_classified_failure(fixture, exc_type, reason) -> None:
    svc, _ = service(fixture)
    with pytest.raises(exc_type) as exc:
        run(svc)
    assert exc.value.error.reason == reason
    assert exc.value.status.state is JobState.DONE
    assert exc.value.status.remote_state() is RemoteState.FAILED


def test_classification_table() -> None:
    for reason in ("backendError", "rateLimitExceeded", "internalError"):
        assert classify_reason(reason) == "transient"
    for reason in ("invalidQuery", "bytesBilledLimitExceeded", "accessDenied", "somethingNew"):
        assert classify_reason(reason) == "permanent"


def test_bytes_billed_limit_retry_keeps_the_same_limit() -> None:
    svc, adapter = service("bq_done_bytes_billed_limit")
    with pytest.raises(PermanentJobFailure) as first:
        run(svc, JOB, 200)
    assert first.value.error.reason == "bytesBilledLimitExceeded"
    with pytest.raises(PermanentJobFailure):
        run(svc, JOB.replace("_g1", "_g2"), 200)  # a new generation after confirmed failure
    limits = [s["json"]["configuration"]["query"]["maximumBytesBilled"] for s in inserts(adapter)]
    assert limits == ["200", "200"]


def test_errors_without_error_result_are_nonfatal_and_surfaced() -> None:
    svc, _ = service("bq_done_nonfatal_errors")
    status = run(svc)
    assert status.succeeded
    assert len(status.nonfatal_errors) == 2
    assert all(e.reason == "invalid" for e in status.nonfatal_errors)


def test_cancel_is_a_request_the_job_may_still_succeed() -> None:
    svc, adapter = service("bq_cancel_too_late")
    answered = svc.cancel(JOB)
    assert answered.state is JobState.RUNNING and not answered.done
    assert adapter.sent[0]["path"].endswith(f"{JOB}/cancel")
    final = wait_for_job(svc, JOB, poll_interval=0, sleep=lambda _s: None)
    assert final.succeeded  # cancel did not mean cancelled

    svc, _ = service("bq_cancel_stopped")
    assert not svc.cancel(JOB).done
    stopped = svc.get(JOB)
    assert stopped.failed and stopped.error_result.reason == "stopped"


def test_get_404_and_5xx_reconcile_to_not_found_and_unknown() -> None:
    svc, _ = service("bq_get_not_found")
    with pytest.raises(JobNotFound):
        svc.get(JOB)
    svc, _ = service("bq_get_not_found")
    assert reconcile_job(svc, JOB) is RemoteState.NOT_FOUND
    svc, _ = service("bq_get_5xx")
    with pytest.raises(BackendError):
        svc.get(JOB)
    svc, _ = service("bq_get_5xx")
    assert reconcile_job(svc, JOB) is RemoteState.UNKNOWN


def test_dry_run_estimate_and_clustered_upper_bound() -> None:
    svc, adapter = service("bq_dry_run_clustered")
    clustered = svc.estimate(QUERY)
    assert adapter.sent[0]["json"]["configuration"]["dryRun"] is True
    assert clustered.bytes == 260 and clustered.upper_bound
    svc, _ = service("bq_dry_run_plain")
    plain = svc.estimate(QUERY)
    assert plain.bytes == 260 and not plain.upper_bound
    check = check_limit("load_positions", clustered, 200)
    assert not check.allowed
    with pytest.raises(CostLimitExceeded) as exc:
        check.raise_if_refused()
    text = str(exc.value)
    assert "load_positions" in text and "260" in text and "200" in text and "upper bound" in text


def test_bad_config_names_the_field() -> None:
    svc, _ = service("bq_insert_then_done")
    with pytest.raises(ValueError, match=r"config\.maximum_bytes_billed"):
        svc.submit(JOB, {"query": QUERY, "maximum_bytes_billed": -1})
    with pytest.raises(ValueError, match=r"config\.dry_rn"):
        svc.submit(JOB, {"query": QUERY, "dry_rn": True})
