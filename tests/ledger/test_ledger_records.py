"""Recording and querying: units, attempts, observations, errors, generations, fingerprints,
decisions, timelines, timestamps and transactions, on SQLite and PostgreSQL."""

from __future__ import annotations

import enum
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from tests.ledger.ledger_helpers import START, FakeClock, make_uow

from twice.core.interval import Interval
from twice.core.unit import UnitOfWork
from twice.ledger import (
    AttemptRecord,
    DecisionRecord,
    FingerprintRecord,
    JobGenerationRecord,
    Ledger,
    LedgerError,
    ObservationRecord,
    UnitRecord,
    UnknownUnitError,
)

DEST = "warehouse.positions"


# -- units ----------------------------------------------------------------------------------


def test_record_unit_is_idempotent_and_keeps_identity(ledger: Ledger, clock: FakeClock) -> None:
    uow = make_uow()
    first = ledger.record_unit(uow)
    clock.advance(60)
    again = ledger.record_unit(uow)
    assert first == again
    assert first.created_at == START
    assert first.to_unit_of_work() == uow
    assert ledger.unit(uow.uow_id) == first
    assert ledger.unit("nope") is None
    kinds = [event.kind for event in ledger.timeline(uow.uow_id)]
    assert kinds == ["unit-recorded"]


def test_unit_with_non_utc_interval_rebuilds_to_same_ids(ledger: Ledger) -> None:
    cet = timezone(timedelta(hours=1))
    uow = UnitOfWork(
        pipeline="funds",
        task="extract",
        interval=Interval(datetime(2026, 11, 5, tzinfo=cet), datetime(2026, 11, 6, tzinfo=cet)),
        destination=DEST,
        transform_version="t1",
    )
    record = ledger.record_unit(uow)
    assert record.interval_start.utcoffset() == timedelta(hours=1)
    assert record.to_unit_of_work().uow_id == uow.uow_id
    assert record.to_unit_of_work().job_id(2) == uow.job_id(2)


def test_units_filter_and_order(ledger: Ledger) -> None:
    for day in (7, 5, 6):
        ledger.record_unit(make_uow(day))
    ledger.record_unit(make_uow(5, task="extract"))
    days = [unit.interval_start.day for unit in ledger.units(task="load")]
    assert days == [5, 6, 7]
    assert len(ledger.units(pipeline="funds")) == 4
    assert ledger.units(pipeline="other") == []
    assert all(isinstance(unit, UnitRecord) for unit in ledger.units())


def test_recording_against_unknown_unit_is_refused(ledger: Ledger) -> None:
    with pytest.raises(UnknownUnitError, match="record_unit"):
        ledger.begin_attempt("ghost", holder="w1")
    with pytest.raises(UnknownUnitError):
        ledger.record_observation("ghost", "done", source="executor")
    with pytest.raises(UnknownUnitError):
        ledger.acquire_lease("ghost", "w1", 10)


# -- attempts -------------------------------------------------------------------------------


def test_attempts_are_numbered_from_one(ledger: Ledger, uow: UnitOfWork, clock: FakeClock) -> None:
    first = ledger.begin_attempt(uow.uow_id, holder="w1")
    assert (first.number, first.outcome, first.started_at) == (1, "running", START)
    clock.advance(5)
    done = ledger.finish_attempt(uow.uow_id, 1, "failed-transient")
    assert done.finished_at == START + timedelta(seconds=5)
    assert done.duration == timedelta(seconds=5)
    second = ledger.begin_attempt(uow.uow_id, holder="w2")
    third = ledger.begin_attempt(uow.uow_id, holder="w2")
    assert (second.number, third.number) == (2, 3)
    assert [a.number for a in ledger.attempts(uow.uow_id)] == [1, 2, 3]
    assert ledger.latest_attempt(uow.uow_id) == third
    assert ledger.attempt(uow.uow_id, 1) == done
    assert ledger.attempt(uow.uow_id, 9) is None
    other = make_uow(6)
    ledger.record_unit(other)
    assert ledger.begin_attempt(other.uow_id, holder="w1").number == 1


def test_finish_attempt_transitions(ledger: Ledger, uow: UnitOfWork) -> None:
    ledger.begin_attempt(uow.uow_id, holder="w1")
    ledger.finish_attempt(uow.uow_id, 1, "succeeded")
    again = ledger.finish_attempt(uow.uow_id, 1, "succeeded")  # a retried call is harmless
    assert again.outcome == "succeeded"
    with pytest.raises(LedgerError, match="already finished as succeeded"):
        ledger.finish_attempt(uow.uow_id, 1, "failed-permanent")
    ledger.begin_attempt(uow.uow_id, holder="w1")
    ledger.finish_attempt(uow.uow_id, 2, "unknown")  # e.g. timeout: outcome not known
    resolved = ledger.finish_attempt(uow.uow_id, 2, "failed-transient")  # later evidence
    assert resolved.outcome == "failed-transient"
    with pytest.raises(LedgerError, match="outcome must be one of"):
        ledger.finish_attempt(uow.uow_id, 2, "running")  # type: ignore[arg-type]
    with pytest.raises(LedgerError, match="has no attempt 7"):
        ledger.finish_attempt(uow.uow_id, 7, "succeeded")
    finished = [
        e.detail["outcome"] for e in ledger.timeline(uow.uow_id) if e.kind == "attempt-finished"
    ]
    assert finished == ["succeeded", "unknown", "failed-transient"]


def test_attempt_times_are_validated(ledger: Ledger, uow: UnitOfWork, clock: FakeClock) -> None:
    with pytest.raises(LedgerError, match=r"started_at .* is after now"):
        ledger.begin_attempt(uow.uow_id, holder="w1", started_at=START + timedelta(seconds=1))
    ledger.begin_attempt(uow.uow_id, holder="w1", started_at=START - timedelta(minutes=1))
    with pytest.raises(LedgerError, match="before attempt 1 started"):
        ledger.finish_attempt(uow.uow_id, 1, "succeeded", START - timedelta(minutes=2))
    with pytest.raises(LedgerError, match="timezone-aware"):
        ledger.finish_attempt(uow.uow_id, 1, "succeeded", datetime(2026, 12, 2, 8, 0))


def test_attempt_with_generation_takes_its_job_id(ledger: Ledger, uow: UnitOfWork) -> None:
    attempt = ledger.begin_attempt(uow.uow_id, holder="w1", generation=1)
    assert attempt.job_id == uow.job_id(1)
    custom = ledger.begin_attempt(uow.uow_id, holder="w1", job_id="external-123")
    assert (custom.generation, custom.job_id) == (None, "external-123")


def test_deadline_infeasible_is_a_decision_not_an_attempt(ledger: Ledger, uow: UnitOfWork) -> None:
    ledger.begin_attempt(uow.uow_id, holder="w1")
    ledger.finish_attempt(uow.uow_id, 1, "failed-transient")
    withheld = ledger.record_attempt_not_started(
        uow.uow_id, reason="attempt 2 needs 40 min, 25 min left before 06:00"
    )
    assert isinstance(withheld, DecisionRecord)
    assert (withheld.decision, withheld.attempt, withheld.not_started) == (
        "deadline-infeasible",
        2,
        True,
    )
    assert [a.number for a in ledger.attempts(uow.uow_id)] == [1]
    assert ledger.decisions(uow.uow_id) == [withheld]
    # If the operator later runs it anyway, it is still attempt 2.
    assert ledger.begin_attempt(uow.uow_id, holder="w1").number == 2


# -- observations ---------------------------------------------------------------------------


def test_future_observation_is_refused(ledger: Ledger, uow: UnitOfWork) -> None:
    future = START + timedelta(seconds=1)
    with pytest.raises(LedgerError, match=r"observed_at 2026-12-02T09:00:01\+00:00 is after now"):
        ledger.record_observation(
            uow.uow_id, "DONE", source="bigquery.jobs.get", observed_at=future
        )
    assert ledger.observations(uow.uow_id) == []


def test_stale_observation_is_kept_but_not_latest(
    ledger: Ledger, uow: UnitOfWork, clock: FakeClock
) -> None:
    clock.advance(600)
    fresh = ledger.record_observation(uow.uow_id, "RUNNING", source="bigquery.jobs.get")
    stale = ledger.record_observation(
        uow.uow_id, "PENDING", source="executor", observed_at=START, detail={"polls": 1}
    )
    assert stale.recorded_at > stale.observed_at
    assert stale.age(clock()) == timedelta(seconds=600)
    assert ledger.latest_observation(uow.uow_id) == fresh  # freshest evidence wins
    assert ledger.latest_observation(uow.uow_id, source="executor") == stale
    assert [o.state for o in ledger.observations(uow.uow_id)] == ["PENDING", "RUNNING"]
    assert ledger.observations(uow.uow_id)[0].detail == {"polls": 1}


def test_observation_attempt_must_exist(ledger: Ledger, uow: UnitOfWork) -> None:
    with pytest.raises(LedgerError, match="has no attempt 1"):
        ledger.record_observation(uow.uow_id, "DONE", source="executor", attempt=1)
    ledger.begin_attempt(uow.uow_id, holder="w1")
    record = ledger.record_observation(uow.uow_id, "DONE", source="operator", attempt=1)
    assert isinstance(record, ObservationRecord) and record.attempt == 1


def test_detail_must_be_json_data(ledger: Ledger, uow: UnitOfWork) -> None:
    when = datetime(2026, 12, 1, tzinfo=UTC)
    record = ledger.record_observation(
        uow.uow_id, "DONE", source="executor", detail={"end": when, "rows": [1, 2]}
    )
    assert record.detail == {"end": when.isoformat(), "rows": [1, 2]}
    with pytest.raises(LedgerError, match="not JSON data"):
        ledger.record_observation(uow.uow_id, "DONE", source="executor", detail={"x": object()})


# -- errors ---------------------------------------------------------------------------------


def test_errors_and_nonfatal_errors(ledger: Ledger, uow: UnitOfWork) -> None:
    ledger.begin_attempt(uow.uow_id, holder="w1")
    try:
        raise TimeoutError("read timed out after 30 s")
    except TimeoutError as exc:
        caught = ledger.record_exception(uow.uow_id, exc, classification="transient", attempt=1)
    assert (caught.error_class, caught.message) == ("TimeoutError", "read timed out after 30 s")
    explicit = ledger.record_error(
        uow.uow_id,
        error_class="google.api_core.exceptions.Forbidden",
        message="quota exceeded",
        classification="permanent",
        detail={"reason": "quotaExceeded"},
    )
    assert ledger.errors(uow.uow_id) == [caught, explicit]
    with pytest.raises(LedgerError, match="classification must be one of"):
        ledger.record_error(
            uow.uow_id,
            error_class="X",
            message="",
            classification="maybe",  # type: ignore[arg-type]
        )
    dropped = ledger.record_nonfatal(
        uow.uow_id, "rows dropped under maxBadRecords", count=17, attempt=1
    )
    assert ledger.nonfatal_errors(uow.uow_id) == [dropped]
    assert dropped.count == 17
    with pytest.raises(LedgerError, match="count must be an integer >= 1"):
        ledger.record_nonfatal(uow.uow_id, "x", count=0)


# -- job generations ------------------------------------------------------------------------


def test_job_generations(ledger: Ledger, uow: UnitOfWork) -> None:
    assert ledger.next_generation(uow.uow_id) == 1
    assert ledger.current_generation(uow.uow_id) is None
    first = ledger.record_job_generation(uow.uow_id)
    assert (first.generation, first.job_id, first.state) == (1, uow.job_id(1), "active")
    assert ledger.record_job_generation(uow.uow_id, 1) == first  # retried call: same record
    assert ledger.next_generation(uow.uow_id) == 2
    with pytest.raises(LedgerError, match=r"generation 1 .* is active; a new generation"):
        ledger.record_job_generation(uow.uow_id)
    ledger.mark_generation(uow.uow_id, 1, "confirmed-failed")
    with pytest.raises(LedgerError, match="taken in order: the next is 2, not 3"):
        ledger.record_job_generation(uow.uow_id, 3)
    second = ledger.record_job_generation(uow.uow_id)
    assert (second.generation, second.job_id) == (2, uow.job_id(2))
    assert ledger.current_generation(uow.uow_id) == second
    done = ledger.mark_generation(uow.uow_id, 2, "succeeded")
    assert isinstance(done, JobGenerationRecord) and done.state == "succeeded"
    with pytest.raises(LedgerError, match="is succeeded; it cannot become confirmed-failed"):
        ledger.mark_generation(uow.uow_id, 2, "confirmed-failed")
    # A cancelled job confirmed failed may still have finished: late evidence wins.
    assert ledger.mark_generation(uow.uow_id, 1, "succeeded").state == "succeeded"
    assert [g.state for g in ledger.job_generations(uow.uow_id)] == ["succeeded", "succeeded"]
    with pytest.raises(LedgerError, match="no job generation 5"):
        ledger.mark_generation(uow.uow_id, 5, "succeeded")


def test_job_id_is_unique_across_units(ledger: Ledger, uow: UnitOfWork) -> None:
    other = make_uow(6)
    ledger.record_unit(other)
    ledger.record_job_generation(uow.uow_id, job_id="shared-id")
    with pytest.raises(LedgerError, match="already used by unit of work"):
        ledger.record_job_generation(other.uow_id, job_id="shared-id")


def test_a_derived_job_id_taken_explicitly_elsewhere_is_refused(
    ledger: Ledger, uow: UnitOfWork
) -> None:
    """A generation's default job id is unique per unit, so it is not looked up first; one
    another unit took as its explicit job id is still refused, as a LedgerError, and nothing
    of the generation is recorded."""
    other = make_uow(6)
    ledger.record_unit(other)
    ledger.record_job_generation(other.uow_id, job_id=uow.job_id(1))
    with pytest.raises(LedgerError, match="already used by another unit of work"):
        ledger.record_job_generation(uow.uow_id)
    assert ledger.job_generations(uow.uow_id) == []
    assert [g.job_id for g in ledger.job_generations(other.uow_id)] == [uow.job_id(1)]


# -- fingerprints ---------------------------------------------------------------------------


def test_fingerprint_versions_per_partition(ledger: Ledger, uow: UnitOfWork) -> None:
    big = 25_000_000 * (2**60 - 1)  # a sum of 60-bit hashes: far beyond 64-bit integers
    v1 = ledger.record_fingerprint(DEST, "2026-11-05", 100, big, columns=["fund", "isin"])
    ledger.begin_attempt(uow.uow_id, holder="w1")
    v2 = ledger.record_fingerprint(
        DEST, "2026-11-05", 98, "123", uow_id=uow.uow_id, attempt=1, schema="fund:str,isin:str"
    )
    other = ledger.record_fingerprint(DEST, "2026-11-06", 5, "9")
    assert (v1.version, v2.version, other.version) == (1, 2, 1)
    assert v1.checksum == str(big) and v1.columns == ("fund", "isin")
    assert ledger.fingerprints(DEST, "2026-11-05") == [v1, v2]
    assert ledger.latest_fingerprint(DEST, "2026-11-05") == v2
    assert ledger.latest_fingerprint(DEST, "2026-11-30") is None
    assert ledger.latest_fingerprints(DEST) == [v2, other]
    assert ledger.latest_fingerprints("elsewhere") == []
    diff = ledger.fingerprint_diff(DEST, "2026-11-05")
    assert diff is not None
    assert (diff.before, diff.after, diff.row_delta) == (v1, v2, -2)
    assert diff.checksum_changed and diff.schema_changed and not diff.identical
    assert not diff.comparable  # v1 named its key columns, v2 did not
    same = [
        ledger.record_fingerprint(
            DEST, "2026-11-07", 5, "ab", columns=["k"], algorithm="md5-60-sum/1"
        )
        for _ in range(2)
    ]
    repeat = ledger.fingerprint_diff(DEST, "2026-11-07")
    assert repeat is not None and repeat.comparable and repeat.identical
    assert same[1].algorithm == "md5-60-sum/1" and same[1].version == 2
    first = ledger.fingerprint_diff(DEST, "2026-11-05", version=1)
    assert first is not None and first.before is None and first.row_delta is None
    assert ledger.fingerprint_diff(DEST, "nothing") is None
    assert [e.kind for e in ledger.timeline(uow.uow_id)][-1] == "fingerprint"


def test_fingerprint_input_is_validated(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match="row_count"):
        ledger.record_fingerprint(DEST, "p", -1, "0")
    with pytest.raises(LedgerError, match="checksum"):
        ledger.record_fingerprint(DEST, "p", 1, 1.5)  # type: ignore[arg-type]
    with pytest.raises(LedgerError, match="needs its uow_id"):
        ledger.record_fingerprint(DEST, "p", 1, "1", attempt=1)


# -- decisions ------------------------------------------------------------------------------


class PlannerDecision(enum.Enum):
    WAIT_BACKOFF = "wait-backoff"


def test_decisions(ledger: Ledger, uow: UnitOfWork, clock: FakeClock) -> None:
    as_of = START - timedelta(minutes=5)
    first = ledger.record_decision(
        uow.uow_id, "refresh-observation", reason="last observation is 2 h old", as_of=as_of
    )
    second = ledger.record_decision(
        uow.uow_id,
        PlannerDecision.WAIT_BACKOFF,
        reason="next attempt at 09:04",  # type: ignore[arg-type]
    )
    assert (first.as_of, first.recorded_at) == (as_of, START)
    assert second.decision == "wait-backoff"
    assert ledger.decisions(uow.uow_id) == [first, second]
    with pytest.raises(LedgerError, match="decision must be one of"):
        ledger.record_decision(uow.uow_id, "retry-now", reason="typo")  # type: ignore[arg-type]


# -- timeline -------------------------------------------------------------------------------


def test_timeline_orders_by_time_then_recording_order(
    ledger: Ledger, uow: UnitOfWork, clock: FakeClock
) -> None:
    # Frozen clock: everything at START, so recording order decides.
    ledger.begin_attempt(uow.uow_id, holder="w1", generation=1)
    ledger.record_job_generation(uow.uow_id)
    ledger.record_error(
        uow.uow_id, error_class="E", message="boom", classification="transient", attempt=1
    )
    ledger.finish_attempt(uow.uow_id, 1, "failed-transient")
    ledger.mark_generation(uow.uow_id, 1, "confirmed-failed")
    clock.advance(60)
    ledger.record_decision(uow.uow_id, "retry-eligible", reason="transient, budget left")
    # Observed earlier than it was recorded: it sorts at its observation time.
    ledger.record_observation(
        uow.uow_id, "FAILED", source="bigquery.jobs.get", observed_at=START + timedelta(seconds=30)
    )
    ledger.record_fingerprint(DEST, "2026-11-05", 0, "0", uow_id=uow.uow_id)

    events = ledger.timeline(uow.uow_id)
    assert [event.kind for event in events] == [
        "unit-recorded",
        "attempt-started",
        "job-generation",
        "error",
        "attempt-finished",
        "generation-marked",
        "observation",
        "decision",
        "fingerprint",
    ]
    keys = [(event.at, event.seq) for event in events]
    assert keys == sorted(keys)
    assert all(event.at.tzinfo is UTC for event in events)
    by_kind = {event.kind: event for event in events}
    assert isinstance(by_kind["unit-recorded"].record, UnitRecord)
    assert isinstance(by_kind["attempt-started"].record, AttemptRecord)
    assert isinstance(by_kind["generation-marked"].record, JobGenerationRecord)
    assert isinstance(by_kind["observation"].record, ObservationRecord)
    assert isinstance(by_kind["fingerprint"].record, FingerprintRecord)
    assert by_kind["attempt-finished"].summary == "attempt 1 finished: failed-transient"
    assert ledger.timeline("unknown") == []


# -- time storage ---------------------------------------------------------------------------


def test_times_are_stored_as_utc_and_read_back_aware(tmp_path: Path) -> None:
    tokyo = timezone(timedelta(hours=9))
    clock = FakeClock(datetime(2026, 12, 2, 18, 0, tzinfo=tokyo))
    path = tmp_path / "times.db"
    with Ledger.open(str(path), clock=clock) as ledger:
        uow = make_uow()
        ledger.record_unit(uow)
        ledger.record_observation(
            uow.uow_id,
            "DONE",
            source="executor",
            observed_at=datetime(2026, 12, 2, 17, 0, tzinfo=tokyo),
        )
        observed = ledger.observations(uow.uow_id)[0]
    assert observed.observed_at == datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
    assert observed.observed_at.tzinfo is UTC
    with sqlite3.connect(path) as conn:
        raw = conn.execute("SELECT observed_at, recorded_at FROM twice_observations").fetchone()
    assert raw == ("2026-12-02T08:00:00.000000+00:00", "2026-12-02T09:00:00.000000+00:00")


@pytest.mark.postgres
def test_postgres_session_timezone_does_not_leak(postgres_url: str) -> None:
    url = f"{postgres_url}?options=-c%20TimeZone%3DAsia%2FTokyo"
    with Ledger.open(url, clock=FakeClock()) as ledger:
        uow = make_uow()
        record = ledger.record_unit(uow)
        assert ledger.unit(uow.uow_id) == record
        assert record.created_at.tzinfo is UTC and record.created_at == START


def test_clock_must_be_aware(sqlite_url: str) -> None:
    with pytest.raises(LedgerError, match="timezone-aware"):
        Ledger.open(sqlite_url, clock=lambda: datetime(2026, 12, 2))


# -- transactions ---------------------------------------------------------------------------


def test_transaction_groups_writes_atomically(ledger: Ledger, uow: UnitOfWork) -> None:
    with pytest.raises(RuntimeError, match="crash"):
        with ledger.transaction():
            ledger.begin_attempt(uow.uow_id, holder="w1")
            ledger.record_observation(uow.uow_id, "RUNNING", source="executor", attempt=1)
            assert len(ledger.attempts(uow.uow_id)) == 1  # reads see the open transaction
            raise RuntimeError("crash between the two writes")
    assert ledger.attempts(uow.uow_id) == []
    assert ledger.observations(uow.uow_id) == []
    with ledger.transaction() as tx:
        tx.begin_attempt(uow.uow_id, holder="w1")
        with ledger.transaction():  # nested blocks join the outer one
            tx.finish_attempt(uow.uow_id, 1, "succeeded")
    assert [a.outcome for a in ledger.attempts(uow.uow_id)] == ["succeeded"]


def test_snapshot_reads_one_consistent_view_and_refuses_writes(engine_url: str) -> None:
    """What evidence is gathered from: a write committed by another process while the reads
    are under way is not half-seen; it shows in the next snapshot."""
    writer, reader = Ledger.open(engine_url), Ledger.open(engine_url)
    try:
        uow = make_uow()
        writer.record_unit(uow)
        writer.begin_attempt(uow.uow_id, holder="w1")
        with reader.snapshot():
            seen = [a.outcome for a in reader.attempts(uow.uow_id)]
            writer.finish_attempt(uow.uow_id, 1, "succeeded")
            writer.record_observation(uow.uow_id, "succeeded", source="executor", attempt=1)
            assert [a.outcome for a in reader.attempts(uow.uow_id)] == seen == ["running"]
            assert reader.observations(uow.uow_id) == []
            with pytest.raises(LedgerError, match="read-only snapshot"):
                reader.record_observation(uow.uow_id, "x", source="test")
        assert [a.outcome for a in reader.attempts(uow.uow_id)] == ["succeeded"]
        assert [o.state for o in reader.observations(uow.uow_id)] == ["succeeded"]
    finally:
        writer.close()
        reader.close()


def test_each_write_is_committed_on_its_own(engine_url: str) -> None:
    writer = Ledger.open(engine_url)
    reader = Ledger.open(engine_url)
    try:
        uow = make_uow()
        writer.record_unit(uow)
        writer.begin_attempt(uow.uow_id, holder="w1")
        assert [a.number for a in reader.attempts(uow.uow_id)] == [1]
    finally:
        writer.close()
        reader.close()


def test_timelines_read_together_equal_each_units_timeline(
    ledger: Ledger, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Ledger.timelines`` (a report's batched read, chunk by chunk) gives every unit exactly
    the timeline ``Ledger.timeline`` gives it: same events, order and records, none mixed up
    between units, across chunk boundaries, and an empty one for a unit with no event."""
    from twice.ledger import timeline as timeline_module

    monkeypatch.setattr(timeline_module, "CHUNK", 3)
    ids = []
    for day in range(8):
        uow = ledger.record_unit(make_uow(day + 1)).uow_id
        ids.append(uow)
        for number in range(1, 1 + day % 3):
            clock.advance(5)
            ledger.begin_attempt(uow, holder="w")
            ledger.record_observation(uow, "running", source="test", attempt=number)
            ledger.finish_attempt(uow, number, "failed-transient" if day % 2 else "succeeded")
            ledger.record_error(uow, error_class="ConnectionError", message=f"boom {day}",
                                classification="transient", attempt=number)
    together = ledger.timelines([*ids, "no-such-unit"])
    assert together["no-such-unit"] == []
    for uow in ids:
        assert together[uow] == ledger.timeline(uow)
        assert {event.uow_id for event in together[uow]} == {uow}
