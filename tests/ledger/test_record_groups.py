"""Records that share a group of fields share its declaration, without moving their own."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta

from twice.ledger.records import (
    AttemptFacts,
    AttemptRecord,
    DecisionRecord,
    ErrorRecord,
    LeaseRecord,
    NonfatalErrorRecord,
    ObservationRecord,
    PoolHolding,
)
from twice.reports.gather import Attempt

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _names(record: type) -> set[str]:
    return {f.name for f in fields(record)}


def test_journaled_detail_records_carry_their_tables_shared_columns() -> None:
    shared = {"seq", "uow_id", "recorded_at", "attempt", "detail"}
    for record in (ObservationRecord, ErrorRecord, NonfatalErrorRecord, DecisionRecord):
        assert shared <= _names(record)
    seen = ObservationRecord(7, "u1", "running", "bq", T0, recorded_at=T0)
    assert (seen.seq, seen.state, seen.attempt, dict(seen.detail)) == (7, "running", None, {})


def test_held_records_share_their_holding_period() -> None:
    lease = LeaseRecord(
        uow_id="u1",
        holder="h",
        token=3,
        renewed_at=T0,
        acquired_at=T0,
        expires_at=T0 + timedelta(minutes=5),
    )
    holding = PoolHolding(1, "bq", "h", 1, 2, acquired_at=T0, expires_at=T0, released_at=None)
    assert lease.active(T0) and not holding.active(T0)


def test_a_reports_attempt_and_the_ledgers_share_the_attempts_facts() -> None:
    facts = {f.name for f in fields(AttemptFacts)}
    assert facts <= _names(AttemptRecord) and facts <= _names(Attempt)
    record = AttemptRecord(1, "h", T0, "succeeded", uow_id="u1", finished_at=T0)
    assert (record.number, record.generation, record.duration) == (1, None, timedelta(0))
